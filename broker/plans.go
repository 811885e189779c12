package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/internal/retry"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/wire"
)

func spendFingerprint(r *wire.SpendRequest) string {
	return fmt.Sprint(r.User, int64(r.Budget), r.Duration.D(), r.VMs, r.Workflows, r.Strategy, r.Boost, r.HostWeights)
}

// Spend starts a plan: check ownership, hold the budget, run the plan's
// first round. A plan whose first bids any host refuses is rolled back
// (bids cancelled, hold released). A host that does not answer gets its
// bids from the next rounds, once it answers. A spend cut off by an outage
// of the bank or the plans bucket is answered unavailable and left
// starting: a retry by its id, or the next round, carries it on (start).
func (b *Broker) Spend(ctx context.Context, req *wire.SpendRequest) (wire.SpendReply, error) {
	if err := req.Validate(); err != nil {
		return wire.SpendReply{}, err
	}
	if req.Strategy == wire.StrategyDeadline {
		return wire.SpendReply{}, wire.Errorf(wire.ErrBadRequest, "deadline plans come from `mrmarket submit --job FILE`")
	}
	return b.spend(ctx, req, nil)
}

// spend starts a plan; job is the admitted job of a deadline plan.
func (b *Broker) spend(ctx context.Context, req *wire.SpendRequest, job *jobRec) (wire.SpendReply, error) {
	if err := req.Validate(); err != nil {
		return wire.SpendReply{}, err
	}
	id := req.ID
	if id == "" {
		id = b.signedID(ctx)
	}
	if id == "" {
		id = "plan-" + randomHex()
	}
	ref := planRef{req.User, id}
	// A round leaves a plan alone while a try of it is on here, from
	// before its record exists (it would carry on a plan it sees starting
	// with no try on it).
	defer b.starting(ref)()
	fp := spendFingerprint(req)
	var failedRev uint64 // a failed plan's id may be used again
	v, ok, err := b.store.fetch(ctx, ref, false)
	if err != nil {
		return wire.SpendReply{}, err
	}
	if ok {
		switch {
		case v.rec.Request == fp && v.rec.Plan.Status == planStarting:
			if p := b.placingHere(ref); p != nil {
				// A try is placing its bids here still (a spend over
				// many hosts outlives its request): wait for it.
				return b.awaitTry(ctx, ref, p)
			}
			// A try of this spend was cut off half-way (its replica died,
			// or the bank, an agent or the plans bucket did not answer in
			// time): this retry carries it on.
			return b.start(ctx, v.rec.clone(), v.rev, b.cfg.Now(), false)
		case v.rec.Plan.Status != wire.PlanFailed:
			return b.replay(v.rec, fp)
		}
		failedRev = v.rev
	}
	_, vms, err := b.place(req.User, req.AllVMs())
	if err != nil {
		return wire.SpendReply{}, err
	}
	mandate, hold, err := b.mandateOf(ctx, req.User)
	if err != nil {
		return wire.SpendReply{}, err
	}
	now := b.cfg.Now()
	rec := b.newPlan(id, fp, req, vms, now, job)
	rec.Mandate = mandate
	if hold != "" {
		rec.Plan.Hold = hold
	}
	// The plan is recorded first, as "starting" (failed until it runs), so
	// a replica that dies half-way leaves a record a survivor carries on.
	var rev uint64
	if failedRev != 0 {
		rev, err = b.store.update(ctx, rec, failedRev)
		if errors.Is(err, errStale) {
			err = errExists
		}
	} else {
		rev, err = b.store.create(ctx, rec)
	}
	if errors.Is(err, errExists) {
		v, ok, err := b.store.fetch(ctx, ref, true)
		switch {
		case err != nil:
			return wire.SpendReply{}, err
		case !ok:
			return wire.SpendReply{}, fmt.Errorf("%w: plan %q exists but could not be read; retry with the same id", wire.ErrUnavailable, id)
		}
		return b.replay(v.rec, fp)
	}
	if err != nil {
		return wire.SpendReply{}, err
	}
	return b.start(ctx, rec, rev, now, failedRev != 0)
}

// start carries a recorded plan from starting to running: its hold (the
// same request on every try, so a second one is the bank's replay), its
// bids, its record. Any replica may do it, any number of times: the spend
// that recorded it, a retry of that spend by its id, or a round (a plan
// whose replica died, or whose spend gave up). A definitive refusal rolls
// the plan back (failed, hold released, its id free again); a failure that
// decides nothing — the bank or the plans bucket not answering in time —
// leaves it starting and says unavailable, so a retry by id carries it on
// rather than finding it failed; an agent not answering leaves the plan
// running, its bids to come. reused says the id was a failed plan's.
func (b *Broker) start(ctx context.Context, rec *planRecord, rev uint64, now time.Time, reused bool) (wire.SpendReply, error) {
	ref := refOf(&rec.Plan)
	defer b.starting(ref)()
	hosts := planHosts(rec)
	p, placed := b.placeStart(ref, len(hosts))
	defer placed()
	expires, placement := b.holdTerms(rec)
	if _, err := b.cfg.Bank.Hold(ctx, &wire.HoldRequest{ID: rec.Plan.Hold, User: rec.Plan.User, Amount: rec.Plan.Budget,
		Expires: expires, Hosts: hosts, Memo: planMemo + rec.Plan.ID, Mandate: rec.Mandate, Placement: placement}); err != nil {
		if errors.Is(err, wire.ErrConflict) && reused {
			err = fmt.Errorf("%w (plan %q failed after its hold was placed: spend with a new id)", err, rec.Plan.ID)
		}
		return b.cutOff(ctx, rec, rev, now, err, undecided(err))
	}
	rec.untried = false
	ctx, cancel := placingTime(ctx, len(hosts))
	defer cancel()
	ctx = context.WithValue(ctx, answeredKey{}, &p.answered)
	// A host that refuses its bids fails the plan; one that does not answer
	// decides nothing: the plan runs, and the rounds send that host its
	// bids once it answers (its agent charges nothing meanwhile).
	if _, failed := b.replan(ctx, rec, now, b.view(rec.Plan.Strategy)); slices.ContainsFunc(failed, func(err error) bool { return !undecided(err) }) {
		return b.cutOff(ctx, rec, rev, now, fmt.Errorf("placing bids: %w", errors.Join(failed...)), false)
	}
	rec.Plan.Status = wire.PlanRunning
	rec.Plan.Owner = b.cfg.Replica
	if _, err := b.store.update(ctx, rec, rev); err != nil {
		if !errors.Is(err, errStale) {
			return b.cutOff(ctx, rec, rev, now, err, undecided(err))
		}
		// Another try of the same plan wrote first.
		v, ok, err := b.store.fetch(ctx, refOf(&rec.Plan), true)
		switch {
		case err != nil:
			return wire.SpendReply{}, err
		case ok && v.rec.Plan.Status == wire.PlanRunning:
			return wire.SpendReply{Plan: v.rec.Plan}, nil
		case ok && v.rec.Plan.Status == planStarting:
			return b.awaitStart(ctx, rec, now)
		case ok: // cancelled or failed meanwhile: the bids this try placed go too
			b.cancelAll(ctx, rec, now)
			return b.replay(v.rec, v.rec.Request)
		}
		return wire.SpendReply{}, fmt.Errorf("%w: plan %q vanished while starting", wire.ErrInternal, rec.Plan.ID)
	}
	b.countRunning()
	b.logPlan("started", rec.Plan, "end", rec.Plan.End.Format(time.RFC3339))
	return wire.SpendReply{Plan: rec.Plan}, nil
}

// awaitStartRetry is how often awaitStart looks at the plan again: every
// 20 ms while the request's context allows.
var awaitStartRetry = retry.Options{InitialBackoff: 20 * time.Millisecond}

// awaitStart waits, while ctx allows, for another try of start on rec's
// plan to end, and answers as it ended; if the plan does not run, the bids
// this try placed are withdrawn.
func (b *Broker) awaitStart(ctx context.Context, rec *planRecord, now time.Time) (wire.SpendReply, error) {
	r := retry.Start(ctx, awaitStartRetry)
	r.Next() // the try that found the plan starting was the first
	for {
		if !r.Next() {
			return wire.SpendReply{}, fmt.Errorf("%w: plan %q is being started by another try; retry with the same id", wire.ErrUnavailable, rec.Plan.ID)
		}
		v, ok, err := b.store.fetch(ctx, refOf(&rec.Plan), true)
		switch {
		case err != nil || !ok || v.rec.Plan.Status == planStarting:
			continue
		case v.rec.Plan.Status == wire.PlanRunning:
			return wire.SpendReply{Plan: v.rec.Plan}, nil
		}
		b.cancelAll(ctx, rec, now)
		return b.replay(v.rec, v.rec.Request)
	}
}

// placing is a try of start in this process: how many of its plan's hosts
// have answered their bids, of how many; done is closed when it ends.
type placing struct {
	hosts    int
	answered atomic.Int64
	done     chan struct{}
}

// placeStart registers a try of start on ref over hosts hosts, unless
// another is registered; end ends it.
func (b *Broker) placeStart(ref planRef, hosts int) (p *placing, end func()) {
	p = &placing{hosts: hosts, done: make(chan struct{})}
	b.startMu.Lock()
	defer b.startMu.Unlock()
	if b.placings[ref] != nil {
		return p, func() {}
	}
	b.placings[ref] = p
	return p, func() {
		b.startMu.Lock()
		delete(b.placings, ref)
		b.startMu.Unlock()
		close(p.done)
	}
}

// placingHere is the try of start on ref running in this process, if any.
func (b *Broker) placingHere(ref planRef) *placing {
	b.startMu.Lock()
	defer b.startMu.Unlock()
	return b.placings[ref]
}

// placingTime is the context a try of start places its bids and records
// its plan in: the request's, or, for a plan over more hosts than one
// wave of bid requests (maxInFlight), one that outlives the request's
// deadline by a request's time per wave, so a spend over thousands of
// hosts is not rolled back for taking longer than one request. Its
// retries by id wait for it meanwhile (awaitTry), each answered with its
// progress.
func placingTime(ctx context.Context, hosts int) (context.Context, context.CancelFunc) {
	waves := (hosts + maxInFlight - 1) / maxInFlight
	if waves <= 1 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(context.WithoutCancel(ctx), min(time.Duration(waves)*rpc.DefaultTimeout, startingTimeout/2))
}

// progressEvery is how long a retry waits for the try of start it found
// running before it answers with that try's progress: well within the
// shortest attempt of a client (the CLI's first is 2 s), so the progress
// reaches it.
const progressEvery = time.Second

// awaitTry answers a retry of a spend whose try p is placing its bids in
// this process: as the try ended, if it ends within progressEvery, else
// unavailable with its progress (asked again, it waits again).
func (b *Broker) awaitTry(ctx context.Context, ref planRef, p *placing) (wire.SpendReply, error) {
	wait := time.NewTimer(progressEvery)
	defer wait.Stop()
	select {
	case <-p.done:
	case <-wait.C:
		return wire.SpendReply{}, startingProgress(ref, p)
	case <-ctx.Done():
		return wire.SpendReply{}, startingProgress(ref, p)
	}
	v, ok, err := b.store.fetch(ctx, ref, true)
	switch {
	case err != nil:
		return wire.SpendReply{}, err
	case !ok:
		return wire.SpendReply{}, fmt.Errorf("%w: plan %q vanished while starting", wire.ErrInternal, ref.id)
	case v.rec.Plan.Status == planStarting:
		return wire.SpendReply{}, fmt.Errorf("%w: plan %q is starting; retry with the same id", wire.ErrUnavailable, ref.id)
	}
	return b.replay(v.rec, v.rec.Request)
}

// startingProgress is the answer to a retry of a spend still placing its
// bids: unavailable, with how many of its hosts have answered.
func startingProgress(ref planRef, p *placing) error {
	done := int(p.answered.Load())
	return &wire.Error{Code: wire.CodeUnavailable, Progress: &wire.Progress{Done: done, Of: p.hosts, What: "hosts answered its bids"},
		Message: fmt.Sprintf("plan %q is starting: %d of %d hosts answered its bids; retry with the same id", ref.id, done, p.hosts)}
}

// cutOff ends a try of start that failed with err: a plan refused is rolled
// back; one cut off by an outage (open) stays starting for the next try.
func (b *Broker) cutOff(ctx context.Context, rec *planRecord, rev uint64, now time.Time, err error, open bool) (wire.SpendReply, error) {
	if open {
		return wire.SpendReply{}, fmt.Errorf("%w: plan %q is starting (%v); retry with the same id", wire.ErrUnavailable, rec.Plan.ID, err)
	}
	return b.rollBack(ctx, rec, rev, now, err)
}

// undecided says err decides nothing about a request: no answer came in
// time, no one answered, or the service said it could not answer.
func undecided(err error) bool {
	return errors.Is(err, wire.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrConnectionClosed)
}

// planHosts are the hosts of rec's VMs, sorted, each once.
func planHosts(rec *planRecord) []string {
	var hosts []string
	for _, vm := range rec.Plan.VMs {
		hosts = append(hosts, vm.Host)
	}
	slices.Sort(hosts)
	return slices.Compact(hosts)
}

// starting marks plan ref as being started here until the function it
// returns is called: a round leaves it alone meanwhile.
func (b *Broker) starting(ref planRef) func() {
	b.startMu.Lock()
	b.inStart[ref]++
	b.startMu.Unlock()
	return func() {
		b.startMu.Lock()
		if b.inStart[ref]--; b.inStart[ref] <= 0 {
			delete(b.inStart, ref)
		}
		b.startMu.Unlock()
	}
}

// startingHere is the set of plans being started here now.
func (b *Broker) startingHere() map[planRef]bool {
	b.startMu.Lock()
	defer b.startMu.Unlock()
	out := make(map[planRef]bool, len(b.inStart))
	for ref := range b.inStart {
		out[ref] = true
	}
	return out
}

// place checks that every VM is known and user's, and gives the hosts
// (sorted, each once) and the plan's VMs where they are.
func (b *Broker) place(user string, vms []string) (hosts []string, out []wire.PlanVM, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, vm := range vms {
		host, st, ok := b.vmInfo(vm)
		switch {
		case !ok:
			return nil, nil, fmt.Errorf("%w %q (see `mrmarket vms`)", ErrUnknownVM, vm)
		case st.Owner != user:
			return nil, nil, fmt.Errorf("%w: VM %q belongs to another user", ErrNotOwner, vm)
		}
		hosts = append(hosts, host)
		out = append(out, wire.PlanVM{VM: vm, Host: host})
	}
	slices.Sort(hosts)
	return slices.Compact(hosts), out, nil
}

// newPlan is the record of a plan being started now.
func (b *Broker) newPlan(id, fp string, req *wire.SpendRequest, vms []wire.PlanVM, now time.Time, job *jobRec) *planRecord {
	rec := &planRecord{Request: fp, Bids: map[string]bidRec{}, Plan: wire.Plan{
		ID: id, User: req.User, Strategy: req.Strategy, Budget: req.Budget, Duration: req.Duration,
		Start: now, End: now.Add(req.Duration.D()), Hold: "hold-" + id + "-" + randomHex()[:6], Status: planStarting,
		Workflows: req.Workflows, Boost: req.Boost, HostWeights: req.HostWeights, Owner: b.cfg.Replica,
		Stage: make([]int, len(req.Workflows)), VMs: vms,
	}, Job: job, untried: true}
	if len(req.Workflows) == 0 {
		rec.Plan.Stage = nil
	}
	return rec
}

// rollBack fails a plan that could not start: its bids cancelled, its
// hold released, the record failed (its id free again).
func (b *Broker) rollBack(ctx context.Context, rec *planRecord, rev uint64, now time.Time, cause error) (wire.SpendReply, error) {
	releaseErr, storeErr := b.fail(ctx, rec, rev, now)
	if releaseErr != nil {
		b.cfg.Metrics.Error("broker", "release")
		cause = fmt.Errorf("%w (and releasing its hold failed: %v; the bank frees it at expiry)", cause, releaseErr)
	}
	if storeErr != nil {
		b.cfg.Metrics.Error("broker", "store")
	}
	return wire.SpendReply{}, cause
}

// fail marks a plan that could not start failed: its bids cancelled, its
// hold released (the bank's figures, captured and released, kept in the
// plan), and the record written — over a newer revision of its own if its
// bid round wrote one meanwhile (a starting plan is its replica's alone),
// so a failed spend is not left listed as starting.
func (b *Broker) fail(ctx context.Context, rec *planRecord, rev uint64, now time.Time) (releaseErr, storeErr error) {
	// Each step of the cleanup gets its own time: the spend failing is
	// often its request's deadline passing (bids timed out), and a spent
	// context would leave the hold released but the plan listed as
	// starting.
	step := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), rpc.DefaultTimeout)
	}
	cctx, cancel := step()
	b.cancelAll(cctx, rec, now)
	cancel()
	rec.Plan.Status = wire.PlanFailed
	rctx, cancel := step()
	rel, err := b.cfg.Bank.Release(rctx, &wire.ReleaseRequest{Hold: rec.Plan.Hold, User: rec.Plan.User})
	cancel()
	ctx, cancel = step()
	defer cancel()
	switch {
	case err == nil:
		rec.Plan.Spent, rec.Plan.Released = rel.Hold.Captured, rel.Hold.Released
	case !errors.Is(err, wire.ErrNotFound):
		releaseErr = err
	}
	_, storeErr = b.store.update(ctx, rec, rev)
	if errors.Is(storeErr, errStale) {
		if v, ok := b.store.get(refOf(&rec.Plan)); ok && v.rec.Plan.Status == planStarting {
			_, storeErr = b.store.update(ctx, rec, v.rev)
		}
	}
	return releaseErr, storeErr
}

// logPlan is the one line of a plan's start or end, for the operator.
func (b *Broker) logPlan(what string, p wire.Plan, attrs ...any) {
	b.cfg.Logger.Info("broker: plan "+what, append([]any{"plan", p.ID, "user", p.User, "budget", p.Budget.String(), "replica", b.cfg.Replica}, attrs...)...)
}

// planStarting marks a plan being set up; it is not a wire status, and a
// plan left in it by a dead replica is failed by a survivor.
const planStarting = "starting"

func (b *Broker) replay(rec *planRecord, fp string) (wire.SpendReply, error) {
	if rec.Request != fp {
		return wire.SpendReply{}, fmt.Errorf("%w: %q", ErrPlanReused, rec.Plan.ID)
	}
	if rec.Plan.Status == wire.PlanFailed {
		return wire.SpendReply{}, fmt.Errorf("%w: plan %q %s", wire.ErrConflict, rec.Plan.ID, rec.Plan.Status)
	}
	// A plan still starting is returned as it is (status "starting"): a
	// retry learns the spend's outcome is under way, and `plans` lists it.
	return wire.SpendReply{Plan: rec.Plan}, nil
}

// mutate applies f to the latest version of plan ref until the write wins
// the revision race.
func (b *Broker) mutate(ctx context.Context, ref planRef, f func(rec *planRecord) error) (*planRecord, error) {
	for try := range 100 {
		v, ok, err := b.store.fetch(ctx, ref, try > 0) // after a lost race, the bucket's version
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%w %q", ErrUnknownPlan, ref.id)
		}
		if err := f(v.rec); err != nil {
			return v.rec, err
		}
		if _, err := b.store.update(ctx, v.rec, v.rev); err == nil {
			return v.rec, nil
		} else if !errors.Is(err, errStale) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%w: plan %q kept changing", wire.ErrUnavailable, ref.id)
}

// errCancelled stops a cancel's mutation of a plan that is no longer
// running.
var errCancelled = errors.New("not running")

// usersPlan is user's plan id as stored, if it started (it may have ended
// since). An id only other users' started plans have is refused as
// theirs, as it was when plan ids were global.
func (b *Broker) usersPlan(ctx context.Context, id, user string) (versioned, error) {
	v, ok, err := b.store.fetch(ctx, planRef{user, id}, false)
	switch {
	case err != nil:
		return v, err
	case ok && v.rec.Plan.Status != wire.PlanFailed:
		return v, nil
	}
	others := false
	b.store.each(func(rec *planRecord, _ uint64) {
		others = others || rec.Plan.ID == id && rec.Plan.User != user && rec.Plan.Status != wire.PlanFailed
	})
	if others {
		return v, fmt.Errorf("%w: plan %q belongs to another user", ErrNotOwner, id)
	}
	return v, fmt.Errorf("%w %q", ErrUnknownPlan, id)
}

// Cancel ends a running plan now and releases what it did not spend.
// Cancelling a finished plan changes nothing and returns it.
func (b *Broker) Cancel(ctx context.Context, req *wire.CancelRequest) (wire.Plan, error) {
	if err := req.Validate(); err != nil {
		return wire.Plan{}, err
	}
	v, err := b.usersPlan(ctx, req.Plan, req.User)
	if err != nil {
		return wire.Plan{}, err
	}
	switch v.rec.Plan.Status {
	case wire.PlanRunning, planStarting, wire.PlanCancelled:
	default:
		return v.rec.Plan, nil
	}
	now := b.cfg.Now()
	// The record says cancelled first (so no round bids for it again),
	// then the bids stop (agents settle them at once), then the rest goes
	// back. The bids are cancelled once, after the write won, not on each
	// try of it: a cancel racing a round that takes the plan over would
	// otherwise send them again at every lost race. A plan still starting
	// is cancelled too: it may hold money already (a try of start then
	// finds the changed record and withdraws its bids). A plan cancelled
	// already is released again (the bank replays a closed hold's
	// release): the cancel's release may have failed, and this is its
	// retry.
	var stop []bidChange
	ref := planRef{req.User, req.Plan}
	rec, err := b.mutate(ctx, ref, func(rec *planRecord) error {
		if rec.Plan.Status != wire.PlanRunning && rec.Plan.Status != planStarting {
			return errCancelled
		}
		stop = cancelChanges(rec)
		dropBids(rec, now)
		rec.Plan.Status, rec.Plan.End = wire.PlanCancelled, now
		return nil
	})
	switch {
	case errors.Is(err, errCancelled) && rec.Plan.Status == wire.PlanCancelled:
	case errors.Is(err, errCancelled):
		return rec.Plan, nil // it ended otherwise meanwhile
	case err != nil:
		return wire.Plan{}, err
	default:
		b.stopBids(ctx, stop)
		b.logPlan("cancelled", rec.Plan)
	}
	rel, err := b.cfg.Bank.Release(ctx, &wire.ReleaseRequest{Hold: rec.Plan.Hold, User: rec.Plan.User})
	if err != nil {
		return wire.Plan{}, err
	}
	if rec.Plan.Released == rel.Hold.Released {
		return rec.Plan, nil
	}
	rec, err = b.mutate(ctx, ref, func(rec *planRecord) error {
		rec.Plan.Released = rel.Hold.Released
		return nil
	})
	if err != nil {
		return wire.Plan{}, err
	}
	b.countRunning()
	return rec.Plan, nil
}

// Adjust changes a running plan's budget (spend --more / --less); the
// plan's next round spends the new remainder.
func (b *Broker) Adjust(ctx context.Context, req *wire.AdjustRequest) (wire.Plan, error) {
	if err := req.Validate(); err != nil {
		return wire.Plan{}, err
	}
	v, err := b.usersPlan(ctx, req.Plan, req.User)
	switch {
	case err != nil:
		return wire.Plan{}, err
	case v.rec.Plan.Status != wire.PlanRunning:
		return wire.Plan{}, fmt.Errorf("%w: %q is %s", ErrNotRunning, req.Plan, v.rec.Plan.Status)
	case v.rec.Adjusts[req.ID]:
		if err := adjustReplay(v.rec, req); err != nil {
			return wire.Plan{}, err
		}
		return v.rec.Plan, nil
	case req.More > 0 && len(v.rec.More) >= wire.MaxMore:
		return wire.Plan{}, wire.Errorf(wire.ErrBadRequest, "plan %q has had %d additions, the most a plan takes: start another", req.Plan, wire.MaxMore)
	}
	signed := signedHere(ctx)
	if req.More > 0 {
		ext := &wire.ExtendRequest{ID: wire.AdjustPlanID(req.Plan, req.ID), Hold: v.rec.Plan.Hold, User: req.User, Amount: req.More, Mandate: signed}
		if _, err := b.cfg.Bank.Extend(ctx, ext); err != nil {
			return wire.Plan{}, err
		}
	}
	now := b.cfg.Now()
	rec, err := b.mutate(ctx, planRef{req.User, req.Plan}, func(rec *planRecord) error {
		if rec.Adjusts[req.ID] {
			return adjustReplay(rec, req)
		}
		if req.Less > 0 && req.Less > remaining(rec, now) {
			return fmt.Errorf("%w: %s left unspent", ErrLess, remaining(rec, now))
		}
		if rec.Adjusts == nil {
			rec.Adjusts = map[string]bool{}
		}
		rec.Adjusts[req.ID] = true
		if rec.Adjustments == nil {
			rec.Adjustments = map[string]string{}
		}
		rec.Adjustments[req.ID] = adjustFingerprint(req)
		rec.Plan.Budget += req.More - req.Less
		if req.More > 0 && signed != nil && signed.Subject == wire.BrokerAdjust {
			rec.More = append(rec.More, *signed) // its bids may spend faster now
		}
		// Re-plan now: after --less the bids in force would commit more
		// than the new budget until the owner's next round.
		rec.untried = false
		if _, failed := b.replan(ctx, rec, now, b.view(rec.Plan.Strategy)); len(failed) > 0 {
			b.cfg.Metrics.Error("broker", "adjust_bids")
		}
		return nil
	})
	if err != nil {
		return wire.Plan{}, err
	}
	if req.Less > 0 {
		// What --less gives back goes back now, once per adjustment (the
		// bank keys the release by its id), after the bids were lowered
		// to what is left.
		rel := &wire.ReleaseRequest{Versioned: wire.Versioned{V: wire.Version}, Hold: rec.Plan.Hold, User: req.User,
			ID: wire.AdjustPlanID(req.Plan, req.ID), Amount: req.Less}
		if _, err := b.cfg.Bank.Release(ctx, rel); err != nil {
			// The plan spends less already; its end releases the rest.
			b.cfg.Metrics.Error("broker", "release_less")
		}
	}
	return rec.Plan, nil
}

// ErrAdjustReused refuses an adjustment id used already for other amounts.
var ErrAdjustReused = fmt.Errorf("%w: adjustment id already used for a different adjustment", wire.ErrConflict)

// adjustFingerprint is what an adjustment asks ("--more 5", "--less 2"),
// compared when its id comes again.
func adjustFingerprint(req *wire.AdjustRequest) string {
	var asks []string
	if req.More > 0 {
		asks = append(asks, "--more "+req.More.String())
	}
	if req.Less > 0 {
		asks = append(asks, "--less "+req.Less.String())
	}
	return strings.Join(asks, " ")
}

// adjustReplay answers an adjustment whose id rec has applied already: a
// replay when it asks the same (or the record does not say what it
// asked), else ErrAdjustReused.
func adjustReplay(rec *planRecord, req *wire.AdjustRequest) error {
	if fp, ok := rec.Adjustments[req.ID]; ok && fp != adjustFingerprint(req) {
		return fmt.Errorf("%w: %q was %s on plan %q", ErrAdjustReused, req.ID, fp, rec.Plan.ID)
	}
	return nil
}

// StageStarted tells the broker that stage of workflow of user's started
// (the simulator submits its job: sim.StageFeed; the broker scripts):
// StartStage without its reply, and without checking the names, as before
// the request had a subject.
func (b *Broker) StageStarted(ctx context.Context, user, workflow, stage string) error {
	_, err := b.startStage(ctx, &wire.StageRequest{User: user, Workflow: workflow, Stage: stage})
	return err
}

// errStayed ends a stage start's mutation of a plan it does not move, so
// nothing is written: a monitor tells of a stage again and again.
var errStayed = errors.New("stage stays")

// StartStage tells the broker that req.Stage of req.Workflow of req.User's
// started (the YARN monitor sees its application: `mrmarket stages watch`
// on mrm.v1.broker.stage; the simulator submits its job): that user's
// running stage-priority plans with this workflow and stage move to it,
// never back, and hold it until its VMs are seen busy
// (strategies.Snapshot.Held). Idle VMs alone cannot tell when stages run
// back to back on the same VMs. It answers the plans that moved: none is
// not an error (an unknown workflow or stage, no running staged plan, or
// every one at the stage or past it already), since a monitor tells of
// every application it sees.
func (b *Broker) StartStage(ctx context.Context, req *wire.StageRequest) (wire.StageReply, error) {
	if err := req.Validate(); err != nil {
		return wire.StageReply{Plans: []string{}}, err
	}
	return b.startStage(ctx, req)
}

func (b *Broker) startStage(ctx context.Context, req *wire.StageRequest) (wire.StageReply, error) {
	rep := wire.StageReply{Plans: []string{}}
	var refs []planRef
	b.store.each(func(rec *planRecord, _ uint64) {
		if rec.Plan.User == req.User && rec.Plan.Status == wire.PlanRunning && wire.StagedStrategy(rec.Plan.Strategy) {
			refs = append(refs, refOf(&rec.Plan))
		}
	})
	var errs []error
	for _, ref := range refs {
		_, err := b.mutate(ctx, ref, func(rec *planRecord) error {
			if rec.Plan.Status != wire.PlanRunning {
				return errStayed // ended since it was listed
			}
			moved := false
			for i, w := range rec.Plan.Workflows {
				if w.Name != req.Workflow {
					continue
				}
				for k, st := range w.Stages {
					if st.Name == req.Stage && k > rec.Plan.Stage[i] {
						// Held until its VMs are seen busy: its job may
						// not compute yet, and its VMs, idle since before
						// it, are not a stage that ended.
						rec.Plan.Stage[i] = k
						if len(rec.Held) != len(rec.Plan.Workflows) {
							rec.Held = make([]bool, len(rec.Plan.Workflows))
						}
						rec.Held[i] = true
						moved = true
					}
				}
			}
			if !moved {
				return errStayed
			}
			return nil
		})
		switch {
		case err == nil:
			rep.Plans = append(rep.Plans, ref.id)
		case !errors.Is(err, errStayed):
			errs = append(errs, err)
		}
	}
	sort.Strings(rep.Plans)
	return rep, errors.Join(errs...)
}

// Plans lists plans, oldest first, of req.User when set.
func (b *Broker) Plans(req *wire.PlansRequest) wire.PlansReply {
	rep := wire.PlansReply{Plans: []wire.Plan{}}
	b.store.each(func(rec *planRecord, _ uint64) {
		p := rec.Plan
		// Plans that never started (failed spends) are not listed; plans
		// starting are, since they may hold money already.
		if p.Status == wire.PlanFailed || req.User != "" && p.User != req.User {
			return
		}
		p.VMs, p.Stage = slices.Clone(p.VMs), slices.Clone(p.Stage)
		rep.Plans = append(rep.Plans, p)
	})
	sort.Slice(rep.Plans, func(i, j int) bool {
		if !rep.Plans[i].Start.Equal(rep.Plans[j].Start) {
			return rep.Plans[i].Start.Before(rep.Plans[j].Start)
		}
		if rep.Plans[i].ID != rep.Plans[j].ID {
			return rep.Plans[i].ID < rep.Plans[j].ID
		}
		return rep.Plans[i].User < rep.Plans[j].User
	})
	return rep
}

func (b *Broker) countRunning() {
	if b.cfg.Metrics == nil {
		return
	}
	n := 0
	b.store.each(func(rec *planRecord, _ uint64) {
		if rec.Plan.Status == wire.PlanRunning {
			n++
		}
	})
	b.cfg.Metrics.PlansRunning.Set(float64(n))
}
