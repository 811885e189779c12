package broker

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// planRecord is a plan as stored: the public plan, the request it came
// from, and the bids it has on the agents now.
type planRecord struct {
	Plan    wire.Plan         `json:"plan"`
	Request string            `json:"request"`
	Bids    map[string]bidRec `json:"bids"`
	Adjusts map[string]bool   `json:"adjusts,omitempty"`
	// Adjustments are what each adjustment asked (adjustFingerprint), by
	// its id: the id again with other amounts is refused, not replayed.
	// A record of an older broker has ids in Adjusts only.
	Adjustments map[string]string `json:"adjustments,omitempty"`
	// Job is the admitted job a deadline plan runs (replaced whole, never
	// changed in place: records are shared).
	Job *jobRec `json:"job,omitempty"`
	// Mandate is the user's signed spend or submit the plan acts for (when
	// it came signed): every bid and the hold carry it, so agents and the
	// bank check what the user asked for themselves.
	Mandate *wire.SignedRequest `json:"mandate,omitempty"`
	// More are the user's signed spend --more of the plan, each raising
	// what its bids may spend per second (mandate.RateCap): every bid
	// carries them too.
	More []wire.SignedRequest `json:"more,omitempty"`
	// Held says, per workflow, that StageStarted moved it to its active
	// stage and that stage's VMs have not been seen busy since
	// (strategies.Snapshot.Held); nil: none.
	Held []bool `json:"stage_held,omitempty"`
	// untried: no try of start has sent this plan's bids yet (a record
	// the spend at hand just created; never stored).
	untried bool
}

// bidRec is a bid the plan has placed: Budget over Duration from Start.
type bidRec struct {
	Host     string        `json:"host"`
	Budget   money.Micro   `json:"budget"`
	Start    time.Time     `json:"start"`
	Duration wire.Duration `json:"duration"`
}

func (b bidRec) charged(now time.Time) money.Micro {
	c, _ := money.Charge(b.Budget, now.Sub(b.Start), b.Duration.D())
	return c
}

func (b bidRec) rate() float64 { return money.Rate(b.Budget, b.Duration.D()) }

func (b bidRec) ended(now time.Time) bool { return !now.Before(b.Start.Add(b.Duration.D())) }

// clone copies everything a round may change; workflows and host weights
// are never changed after the plan starts and are shared.
func (r *planRecord) clone() *planRecord {
	c := *r
	c.untried = false // a copy is a stored record's
	c.Plan.VMs = slices.Clone(r.Plan.VMs)
	c.Plan.Stage = slices.Clone(r.Plan.Stage)
	c.Held = slices.Clone(r.Held)
	c.More = slices.Clone(r.More)
	c.Bids = make(map[string]bidRec, len(r.Bids))
	for k, v := range r.Bids {
		c.Bids[k] = v
	}
	if r.Adjusts != nil {
		c.Adjusts = make(map[string]bool, len(r.Adjusts))
		for k, v := range r.Adjusts {
			c.Adjusts[k] = v
		}
	}
	c.Adjustments = maps.Clone(r.Adjustments)
	return &c
}

// planRef names a plan: its user and its id. A plan id is its user's own:
// two users' plans of one id are two plans, so no user blocks another's
// spend or submit by taking its id first.
type planRef struct{ user, id string }

func refOf(p *wire.Plan) planRef { return planRef{p.User, p.ID} }

func (r planRef) String() string { return r.user + "/" + r.id }

// versioned is a plan with the revision it was read at.
type versioned struct {
	rec *planRecord
	rev uint64
}

// planStore keeps the plans; with JetStream every replica sees them all.
// Writes are compare-and-set on revisions, so two replicas never both
// commit a change to one plan.
type planStore interface {
	create(ctx context.Context, rec *planRecord) (uint64, error)
	update(ctx context.Context, rec *planRecord, rev uint64) (uint64, error)
	get(ref planRef) (versioned, bool)
	// fetch is get for a request that must not act on a stale copy:
	// the mirror's when it has the plan and fresh is false, else the
	// bucket's as it is now (a replica's mirror may lag the bucket, and
	// be missing a plan another replica just wrote).
	fetch(ctx context.Context, ref planRef, fresh bool) (versioned, bool, error)
	list() []versioned
	// each calls f on every plan, read-only, without copying.
	each(f func(rec *planRecord, rev uint64))
	heartbeat(ctx context.Context, replica string, at time.Time) error
	heartbeats() map[string]time.Time
	// boostTotal is the sum of the boosts its plans count (countedBoost).
	boostTotal() float64
	// repair writes back the plans found deleted or overwritten; Tick
	// calls it before its round.
	repair(ctx context.Context) error
	// commitments is host's deadline commitment record as stored now and
	// its revision (0: none yet); commit writes one over revision rev (0:
	// none yet), errStale if it changed since (commit.go).
	commitments(ctx context.Context, host string) (*commitRec, uint64, error)
	commit(ctx context.Context, rec *commitRec, rev uint64) (uint64, error)
	close()
}

// memStore is a plan store in memory, for a broker without JetStream.
type memStore struct {
	mu      sync.Mutex
	plans   map[planRef]versioned
	beats   map[string]time.Time
	commits map[string]versionedCommit // host → its commitment record
	rev     uint64
	boosts  boostSum // over plans, kept by set
}

// MemoryPlans is a plan store in this process's memory that several
// replicas may share (Config.Memory): failover without JetStream.
type MemoryPlans struct{ s *memStore }

// NewMemoryPlans makes an empty shared plan store.
func NewMemoryPlans() *MemoryPlans { return &MemoryPlans{newMemStore()} }

func newMemStore() *memStore {
	return &memStore{plans: map[planRef]versioned{}, beats: map[string]time.Time{}, commits: map[string]versionedCommit{}}
}

func (s *memStore) create(_ context.Context, rec *planRecord) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.plans[refOf(&rec.Plan)]; ok {
		return 0, errExists
	}
	s.rev++
	s.set(versioned{rec.clone(), s.rev})
	return s.rev, nil
}

// set stores v under its plan, and its boost in the sum, with mu held.
func (s *memStore) set(v versioned) {
	ref := refOf(&v.rec.Plan)
	var before *planRecord
	if cur, ok := s.plans[ref]; ok {
		before = cur.rec
	}
	s.boosts.change(before, v.rec)
	s.plans[ref] = v
}

func (s *memStore) boostTotal() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.boosts.total()
}

func (s *memStore) update(_ context.Context, rec *planRecord, rev uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.plans[refOf(&rec.Plan)]; !ok || cur.rev != rev {
		return 0, errStale
	}
	s.rev++
	s.set(versioned{rec.clone(), s.rev})
	return s.rev, nil
}

func (s *memStore) get(ref planRef) (versioned, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.plans[ref]
	if ok {
		v.rec = v.rec.clone()
	}
	return v, ok
}

func (s *memStore) fetch(_ context.Context, ref planRef, _ bool) (versioned, bool, error) {
	v, ok := s.get(ref)
	return v, ok, nil
}

func (s *memStore) list() []versioned {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]versioned, 0, len(s.plans))
	for _, v := range s.plans {
		out = append(out, versioned{v.rec.clone(), v.rev})
	}
	return out
}

// each calls f on every record without holding the store's lock, so f
// may take the broker's lock (Observe takes the broker's lock, then the
// store's). Stored records are never modified in place — put replaces
// them — so f reads a consistent record and must not modify it.
func (s *memStore) each(f func(rec *planRecord, rev uint64)) {
	s.mu.Lock()
	snap := make([]versioned, 0, len(s.plans))
	for _, v := range s.plans {
		snap = append(snap, v)
	}
	s.mu.Unlock()
	for _, v := range snap {
		f(v.rec, v.rev)
	}
}

func (s *memStore) heartbeat(_ context.Context, replica string, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.beats[replica] = at
	return nil
}

func (s *memStore) repair(context.Context) error { return nil }

func (s *memStore) heartbeats() map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]time.Time, len(s.beats))
	for k, v := range s.beats {
		out[k] = v
	}
	return out
}

func (s *memStore) close() {}

// kvStore keeps plans in the MRM_PLANS JetStream bucket and mirrors the
// bucket locally through a watch, so reads are local and every replica
// converges on every write. With a Signer every record is sealed by the
// broker that wrote it (purpose "plan/<id>"); with verification on
// (seal.go) a record not sealed by a broker is refused, counted and
// reported, and never run; a plan key deleted or overwritten is reported
// and restored from the mirror.
type kvStore struct {
	mem *memStore // the mirror
	*sealing

	// keys is the bucket key of each plan of the mirror, refs the plan of
	// each key (guarded by mem.mu): a plan stored before plan ids were
	// each user's keeps the key of its id alone (planKeyOf).
	keys map[planRef]string
	refs map[string]planRef

	// writing holds, by key, the values this replica is writing (guarded
	// by mem.mu): the watch may deliver a write before the write's own
	// acknowledgement, and a value that is one of them is mirrored as the
	// record it was encoded from, not opened and decoded again.
	writing map[string][]ownWrite

	// kvMu guards the bucket and its watch, replaced when the bucket is
	// found gone (recreate).
	kvMu     sync.Mutex
	kv       jetstream.KeyValue
	nc       *nats.Conn // the connection kv is on, when known
	watcher  jetstream.KeyWatcher
	done     chan struct{}
	recreate func(ctx context.Context) (jetstream.KeyValue, error) // nil: a lost bucket is only reported

	// The watch's health: the last revision it delivered, and this
	// replica's oldest heartbeat write it has not delivered yet (rev, and
	// when it was written). A watch whose consumer lived on a NATS node
	// that died delivers nothing until the client library notices, tens
	// of seconds later; meanwhile this replica would see no other replica
	// beat and no plan another wrote. heartbeat notices within watchStall
	// and follows the bucket anew.
	watchRev atomic.Uint64
	// advanced is closed, and replaced, each time watchRev grows.
	advancedMu sync.Mutex
	advanced   chan struct{}
	beatMu     sync.Mutex
	beatRev    uint64
	beatAt     time.Time
	rewatching atomic.Bool
}

// watchStall is how long a heartbeat write may go undelivered by the
// watch before the watch is replaced.
const watchStall = 2 * time.Second

const (
	planPrefix    = "plan."
	replicaPrefix = "replica."
)

// PlanKey is the MRM_PLANS key of user's plan id: "plan.<user>.<id>",
// each base64url-encoded (ids may hold characters keys may not).
func PlanKey(user, id string) string {
	return planPrefix + base64.RawURLEncoding.EncodeToString([]byte(user)) + "." + base64.RawURLEncoding.EncodeToString([]byte(id))
}

// planKeyOf decodes a plan key: user and id, or for a key from before plan
// ids were each user's ("plan.<id>") the id alone, its user "" (the
// record says whose it is).
func planKeyOf(key string) (user, id string, ok bool) {
	rest, ok := strings.CutPrefix(key, planPrefix)
	if !ok {
		return "", "", false
	}
	u, i, namespaced := strings.Cut(rest, ".")
	if !namespaced {
		u, i = "", rest
	}
	ub, uerr := base64.RawURLEncoding.DecodeString(u)
	ib, ierr := base64.RawURLEncoding.DecodeString(i)
	return string(ub), string(ib), uerr == nil && ierr == nil && len(ib) > 0 && (!namespaced || len(ub) > 0)
}

func newKVStore(ctx context.Context, kv jetstream.KeyValue, seal *sealing) (*kvStore, error) {
	seal.damaged = map[planRef]string{}
	s := &kvStore{mem: newMemStore(), sealing: seal, keys: map[planRef]string{}, refs: map[string]planRef{}, writing: map[string][]ownWrite{}}
	if err := s.watch(ctx, kv); err != nil {
		return nil, err
	}
	return s, nil
}

// watch follows kv, once its initial values are in the mirror; kvMu is
// not held.
func (s *kvStore) watch(ctx context.Context, kv jetstream.KeyValue) error {
	w, err := kv.WatchAll(context.Background())
	if err != nil {
		return fmt.Errorf("broker: watching %s: %w", wire.BucketPlans, err)
	}
	ready, done := make(chan struct{}), make(chan struct{})
	go s.follow(w, ready, done)
	select {
	case <-ready:
	case <-ctx.Done():
		_ = w.Stop()
		return ctx.Err()
	}
	s.kvMu.Lock()
	s.kv, s.watcher, s.done = kv, w, done
	s.kvMu.Unlock()
	return nil
}

// follow applies the bucket's changes to the mirror.
func (s *kvStore) follow(w jetstream.KeyWatcher, ready, done chan struct{}) {
	defer close(done)
	readyOnce := sync.Once{}
	for e := range w.Updates() {
		if e == nil { // the initial values are all delivered
			readyOnce.Do(func() { close(ready) })
			continue
		}
		s.apply(e.Key(), e.Value(), e.Revision(), e.Operation())
		for rev := e.Revision(); ; {
			cur := s.watchRev.Load()
			if rev <= cur {
				break
			}
			if s.watchRev.CompareAndSwap(cur, rev) {
				s.advancedMu.Lock()
				if s.advanced != nil {
					close(s.advanced)
					s.advanced = nil
				}
				s.advancedMu.Unlock()
				break
			}
		}
	}
	readyOnce.Do(func() { close(ready) })
}

// checkWatch is told of each heartbeat written (at revision rev) and
// replaces the watch when it has not delivered an earlier one for
// watchStall.
func (s *kvStore) checkWatch(rev uint64) {
	s.beatMu.Lock()
	defer s.beatMu.Unlock()
	delivered := s.watchRev.Load() >= s.beatRev
	if !delivered && time.Since(s.beatAt) > watchStall && s.rewatching.CompareAndSwap(false, true) {
		go s.rewatch()
	}
	if s.beatRev == 0 || delivered {
		s.beatRev, s.beatAt = rev, time.Now()
	}
}

// rewatch follows the bucket with a new watch (its initial values merge
// into the mirror by revision) and stops the stalled one.
func (s *kvStore) rewatch() {
	defer s.rewatching.Store(false)
	s.kvMu.Lock()
	kv, old := s.kv, s.watcher
	s.kvMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.watch(ctx, kv); err != nil {
		s.report("plan bucket watch stalled, and following it anew failed", allPlans{}, err)
		return
	}
	_ = old.Stop()
	s.report("plan bucket watch stalled: following it anew", allPlans{}, nil)
}

// bucket is the plan bucket, each read and write bounded by one daemon
// attempt, and by the broker's connection (natsutil.Bounded): a write lost
// with its stream's leader is answered unavailable after it, not after the
// request's whole deadline, and one lost with the broker's NATS server at
// once.
func (s *kvStore) bucket() jetstream.KeyValue {
	s.kvMu.Lock()
	defer s.kvMu.Unlock()
	return natsutil.Bounded(s.kv, s.nc, rpc.DaemonAttempt)
}

func (s *kvStore) apply(key string, value []byte, rev uint64, op jetstream.KeyValueOp) {
	if strings.HasPrefix(key, replicaPrefix) {
		var at time.Time
		if json.Unmarshal(value, &at) == nil {
			s.mem.mu.Lock()
			s.mem.beats[strings.TrimPrefix(key, replicaPrefix)] = at
			s.mem.mu.Unlock()
		}
		return
	}
	user, id, ok := planKeyOf(key)
	if !ok {
		return
	}
	ref, known := s.refAt(key, user, id)
	if op != jetstream.KeyValuePut {
		s.lost(ref, "deleted", known && s.has(ref, rev))
		return
	}
	if known && s.seen(ref, rev) {
		return // our own write, mirrored already: no need to open it again
	}
	if rec := s.ownRecord(key, value); rec != nil {
		s.put(key, rec, rev) // our own write, not acknowledged yet
		return
	}
	rec, err := s.open(user, id, value)
	if err != nil {
		s.refuse(ref, err, known && s.has(ref, rev))
		return
	}
	s.put(key, rec, rev)
}

// refAt is the plan stored under key (of user and id, user "" for a key of
// the id alone), and whether the mirror knows which it is.
func (s *kvStore) refAt(key, user, id string) (planRef, bool) {
	if user != "" {
		return planRef{user, id}, true
	}
	s.mem.mu.Lock()
	defer s.mem.mu.Unlock()
	ref, ok := s.refs[key]
	if !ok {
		ref = planRef{"", id}
	}
	return ref, ok
}

// put mirrors rec, stored under key at revision rev, unless the mirror has
// it at a later revision.
func (s *kvStore) put(key string, rec *planRecord, rev uint64) {
	ref := refOf(&rec.Plan)
	s.mem.mu.Lock()
	defer s.mem.mu.Unlock()
	if cur, ok := s.mem.plans[ref]; !ok || cur.rev < rev {
		s.mem.set(versioned{rec, rev})
		s.keys[ref], s.refs[key] = key, ref
	}
}

// keyOf is the bucket key of plan ref: the one it is stored under, or
// PlanKey for a plan not stored yet.
func (s *kvStore) keyOf(ref planRef) string {
	s.mem.mu.Lock()
	defer s.mem.mu.Unlock()
	if key, ok := s.keys[ref]; ok {
		return key
	}
	return PlanKey(ref.user, ref.id)
}

// ownWrite is a value this replica is writing under a key, and the record
// it encodes.
type ownWrite struct {
	data []byte
	rec  *planRecord
}

// write notes that data, rec's encoding, is being written under key, until
// the returned func is called (once the write is answered and mirrored).
func (s *kvStore) write(key string, data []byte, rec *planRecord) (done func()) {
	w := ownWrite{data, rec} // rec is not changed while its write is on
	s.mem.mu.Lock()
	s.writing[key] = append(s.writing[key], w)
	s.mem.mu.Unlock()
	return func() {
		s.mem.mu.Lock()
		defer s.mem.mu.Unlock()
		ws := slices.DeleteFunc(s.writing[key], func(o ownWrite) bool { return &o.data[0] == &w.data[0] })
		if len(ws) == 0 {
			delete(s.writing, key)
		} else {
			s.writing[key] = ws
		}
	}
}

// ownRecord is the record of value if this replica is writing exactly
// value under key now, else nil. The value is the seal this replica made:
// there is nothing to check in it.
func (s *kvStore) ownRecord(key string, value []byte) *planRecord {
	s.mem.mu.Lock()
	defer s.mem.mu.Unlock()
	for _, w := range s.writing[key] {
		if bytes.Equal(w.data, value) {
			return w.rec.clone()
		}
	}
	return nil
}

// seen reports whether the mirror has plan ref at revision rev or later.
func (s *kvStore) seen(ref planRef, rev uint64) bool {
	s.mem.mu.Lock()
	defer s.mem.mu.Unlock()
	cur, ok := s.mem.plans[ref]
	return ok && cur.rev >= rev
}

// has reports whether the mirror has plan ref from before revision rev
// (what a damaged key is restored from).
func (s *kvStore) has(ref planRef, rev uint64) bool {
	s.mem.mu.Lock()
	defer s.mem.mu.Unlock()
	cur, ok := s.mem.plans[ref]
	return ok && cur.rev < rev
}

func (s *kvStore) create(ctx context.Context, rec *planRecord) (uint64, error) {
	data, err := s.encode(rec)
	if err != nil {
		return 0, err
	}
	ref := refOf(&rec.Plan)
	if _, ok := s.mem.get(ref); ok {
		return 0, errExists // perhaps under the key of a plan from before plan ids were each user's
	}
	key := s.keyOf(ref)
	defer s.write(key, data, rec)()
	rev, err := s.bucket().Create(ctx, key, data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, errExists
	}
	if err != nil {
		return 0, fmt.Errorf("%w: plan store: %v", wire.ErrUnavailable, err)
	}
	s.put(key, rec.clone(), rev)
	return rev, nil
}

func (s *kvStore) update(ctx context.Context, rec *planRecord, rev uint64) (uint64, error) {
	data, err := s.encode(rec)
	if err != nil {
		return 0, err
	}
	key := s.keyOf(refOf(&rec.Plan))
	defer s.write(key, data, rec)()
	nrev, err := s.bucket().Update(ctx, key, data, rev)
	if err != nil {
		if natsutil.WrongLastSequence(err) {
			return 0, errStale
		}
		return 0, fmt.Errorf("%w: plan store: %v", wire.ErrUnavailable, err)
	}
	s.put(key, rec.clone(), nrev)
	return nrev, nil
}

// repair writes back, from the mirror, every plan whose key was deleted
// or overwritten by a record no broker sealed (see apply). Tick calls it.
func (s *kvStore) repair(ctx context.Context) error {
	var errs []error
	for _, ref := range s.takeDamaged() {
		v, ok := s.mem.get(ref)
		if !ok {
			continue
		}
		data, err := s.encode(v.rec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		key := s.keyOf(ref)
		rev, err := s.bucket().Put(ctx, key, data)
		if err != nil {
			s.markDamaged(ref, "restore failed")
			errs = append(errs, fmt.Errorf("%w: restoring plan %s: %v", wire.ErrUnavailable, ref, err))
			continue
		}
		s.put(key, v.rec, rev)
		s.report("plan restored", ref, nil)
	}
	return errors.Join(errs...)
}

func (s *kvStore) get(ref planRef) (versioned, bool) { return s.mem.get(ref) }

func (s *kvStore) fetch(ctx context.Context, ref planRef, fresh bool) (versioned, bool, error) {
	if v, ok := s.mem.get(ref); ok && !fresh {
		return v, true, nil
	}
	e, err := s.bucket().Get(ctx, s.keyOf(ref))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		v, ok := s.mem.get(ref)
		return v, ok, nil
	case err != nil:
		return versioned{}, false, fmt.Errorf("%w: plan store: %v", wire.ErrUnavailable, err)
	}
	s.apply(e.Key(), e.Value(), e.Revision(), e.Operation())
	v, ok := s.mem.get(ref)
	return v, ok, nil
}

func (s *kvStore) list() []versioned                { return s.mem.list() }
func (s *kvStore) each(f func(*planRecord, uint64)) { s.mem.each(f) }
func (s *kvStore) boostTotal() float64              { return s.mem.boostTotal() }
func (s *kvStore) heartbeats() map[string]time.Time {
	return s.mem.heartbeats()
}

func (s *kvStore) heartbeat(ctx context.Context, replica string, at time.Time) error {
	data, _ := json.Marshal(at)
	rev, err := s.bucket().Put(ctx, replicaPrefix+replica, data)
	if err != nil {
		if rerr := s.recover(ctx); rerr != nil {
			return errors.Join(fmt.Errorf("%w: plan store: %v", wire.ErrUnavailable, err), rerr)
		}
		if rev, err = s.bucket().Put(ctx, replicaPrefix+replica, data); err != nil {
			return fmt.Errorf("%w: plan store: %v", wire.ErrUnavailable, err)
		}
	}
	s.checkWatch(rev)
	// The mirror has this replica's heartbeat once the watch brings it
	// back, not before: another replica is silent only when this one's
	// beats came back through the same watch and theirs did not (round.go).
	s.awaitWatch(ctx, rev, rpc.DaemonAttempt)
	return nil
}

// awaitWatch waits until the watch has delivered revision rev, ctx ends or
// within passes: the mirror is then at least as fresh as that write.
func (s *kvStore) awaitWatch(ctx context.Context, rev uint64, within time.Duration) {
	timer := time.NewTimer(within)
	defer timer.Stop()
	for s.watchRev.Load() < rev {
		s.advancedMu.Lock()
		if s.advanced == nil {
			s.advanced = make(chan struct{})
		}
		ch := s.advanced
		s.advancedMu.Unlock()
		if s.watchRev.Load() >= rev {
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

func (s *kvStore) close() {
	s.kvMu.Lock()
	w, done := s.watcher, s.done
	s.kvMu.Unlock()
	_ = w.Stop()
	<-done
}

// recover checks the bucket is there after a failed write; a bucket found
// deleted is reported and, when the store can, created again and every
// plan the mirror has written back to it (sealed, as the replica that runs
// it would), then followed anew.
func (s *kvStore) recover(ctx context.Context) error {
	if _, err := s.bucket().Status(ctx); !errors.Is(err, jetstream.ErrStreamNotFound) && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil // not lost: the write failed for another reason
	}
	s.bucketLost.Add(1)
	s.metrics.Error("broker", "plan_bucket_lost")
	s.report("plan bucket "+wire.BucketPlans+" deleted", allPlans{}, nil)
	if s.recreate == nil {
		return fmt.Errorf("%w: the plan bucket %s is gone", wire.ErrUnavailable, wire.BucketPlans)
	}
	kv, err := s.recreate(ctx)
	if err != nil {
		return fmt.Errorf("%w: recreating %s: %v", wire.ErrUnavailable, wire.BucketPlans, err)
	}
	s.close() // the old watch: its bucket is gone
	var errs []error
	for _, v := range s.mem.list() {
		data, err := s.encode(v.rec)
		if err == nil {
			ref := refOf(&v.rec.Plan)
			key := PlanKey(ref.user, ref.id)
			var rev uint64
			if rev, err = kv.Put(ctx, key, data); err == nil {
				s.mem.mu.Lock()
				s.mem.set(versioned{v.rec, rev}) // the new bucket's revisions
				delete(s.refs, s.keys[ref])
				s.keys[ref], s.refs[key] = key, ref
				s.mem.mu.Unlock()
			}
		}
		errs = append(errs, err)
	}
	if err := s.watch(ctx, kv); err != nil {
		errs = append(errs, err)
	}
	s.report("plan bucket "+wire.BucketPlans+" recreated and plans restored", allPlans{}, nil)
	return errors.Join(errs...)
}
