package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// startingTimeout is how long a plan of this replica may stay starting
// before a round fails it: far longer than a Spend takes.
const startingTimeout = 2 * time.Minute

// roundWorkers is how many plans a round runs at once.
const roundWorkers = 16

// maxInFlight bounds the bid batches a round (or a spend) has waiting for
// agents.
const maxInFlight = 256

// round is what a Tick knows as it starts: the time, this replica's
// rules, the replicas' heartbeats, and what a plan's strategy needs of the
// other plans.
type round struct {
	now          time.Time
	replica      string
	tick, settle time.Duration
	beats        map[string]time.Time
	view         roundView
	// startingHere are the plans a try of start is on in this process.
	startingHere map[planRef]bool
	// takenOver counts the plans this round took over, by the silent
	// replica they were taken from: a failover is one log line a round.
	mu        sync.Mutex
	takenOver map[string]int
}

// roundView is what a round of one plan needs to know of the others: what
// the bottleneck plans' boosts are scaled by to keep within MaxBoost
// (boosts.go) and which admitted jobs run (EDF).
type roundView struct {
	boostScale float64
	jobs       strategies.EDFRun
}

// action is what the planner decided to do with a plan this round.
type action int

const (
	actNone   action = iota // its owner is alive, Spend is starting it here, or nothing changes
	actFail                 // starting too long: cancel its bids, release its hold, fail it
	actSettle               // Settle past its end: release what is left, it is done
	actRebid                // send the bids that changed, record what the hosts took
	actStart                // starting, and no try of start on it here: carry it on (hold, bids, running)
)

// step is the planner's decision for one plan: the plan as read, whether
// to take it over from a silent owner first, and what to do with it — for
// actRebid, the active stages and the bid request for each host whose
// bids change.
type step struct {
	plan     versioned
	takeOver bool
	action   action
	stage    []int
	held     []bool
	changes  []bidChange
}

// Tick runs one broker round at now: it beats its heartbeat, then for each
// plan it runs or may take over, the planner decides (take over from a
// dead replica, fail a half-started plan, settle and release it at its
// end, or what its strategy wants now) and the executor carries that out
// (compare-and-set writes, bank releases, bid requests). Plans run side by
// side, at most roundWorkers at once; with Serial one at a time, by id.
func (b *Broker) Tick(ctx context.Context, now time.Time) error {
	if err := b.beat(ctx, now); err != nil {
		return err
	}
	b.roundSince.Store(now.UnixNano())
	defer b.roundSince.Store(0)
	if err := b.store.repair(ctx); err != nil {
		return err
	}
	if _, err := b.recoverHolds(ctx, now); err != nil {
		b.cfg.Metrics.Error("broker", "recover")
	}
	b.logStaleHosts(now)
	r := &round{now: now, replica: b.cfg.Replica, tick: b.cfg.Tick, settle: b.cfg.Settle, beats: b.store.heartbeats(),
		view: roundView{boostScale: b.boostScale(), jobs: b.edf(now)}, startingHere: b.startingHere(), takenOver: map[string]int{}}
	plans := r.candidates(b.store)
	errs := make([][]error, len(plans))
	// Decide every plan and carry out all but the bid changes; then send
	// the round's bid changes together, one batch per host whatever the
	// plans there; then record in each plan what its hosts took.
	rebids := make([]*execution, len(plans))
	b.parallel(len(plans), roundWorkers, func(i int) {
		v := plans[i]
		want := func() strategies.Decision { return b.allocate(v.rec, now, r.view) }
		st := r.decide(v, want)
		if st.action == actNone {
			return
		}
		x, ok := b.own(ctx, r, st)
		switch {
		case !ok:
		case st.action == actRebid:
			rebids[i] = x
		default:
			errs[i] = b.execute(ctx, r, x)
		}
	})
	var changes []bidChange
	for _, x := range rebids {
		if x != nil {
			x.from = len(changes)
			changes = append(changes, x.step.changes...)
		}
	}
	results := b.send(ctx, changes)
	b.parallel(len(plans), roundWorkers, func(i int) {
		if x := rebids[i]; x != nil {
			errs[i] = b.record(ctx, r, x, results[x.from:x.from+len(x.step.changes)])
		}
	})
	b.countRunning()
	for _, from := range slices.Sorted(maps.Keys(r.takenOver)) {
		b.cfg.Logger.Info("broker: plans taken over: their replica is silent", "from", from, "plans", r.takenOver[from], "replica", b.cfg.Replica)
	}
	return errors.Join(slices.Concat(errs...)...)
}

// candidates are the running and starting plans this replica owns or whose
// owner is silent, by id. They are shared: cloned before any change.
func (r *round) candidates(store planStore) []versioned {
	var out []versioned
	store.each(func(rec *planRecord, rev uint64) {
		if rec.Plan.Status != wire.PlanRunning && rec.Plan.Status != planStarting {
			return
		}
		if _, alive := r.ownerAlive(rec.Plan.Owner); alive {
			return
		}
		out = append(out, versioned{rec, rev})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].rec.Plan.ID < out[j].rec.Plan.ID })
	return out
}

// ownerAlive reports whether a plan's owner has a heartbeat (heard) and
// is another replica whose heartbeat is at most two ticks older than this
// replica's own latest one as the store gave it back (alive: its plans are
// left alone). Silence is measured in the store's order, not against the
// clock: while the store takes no heartbeat (its stream lost its leader)
// or its watch delivers none (its consumer's node died), the others' beats
// stop and so do this one's, and no replica goes silent to another. Until
// this replica's own heartbeat has come back, it judges none silent. This
// replica is heard, and not another.
func (r *round) ownerAlive(owner string) (heard, alive bool) {
	if owner == r.replica {
		return true, false
	}
	last, ok := r.beats[owner]
	own, back := r.beats[r.replica]
	if !back {
		return ok, true
	}
	return ok, ok && own.Sub(last) <= 2*r.tick
}

// decide is the planner, a pure function of the round, the plan as read
// and what its strategy wants (asked only of a plan this replica runs on):
// leave the plan alone, take it over from a dead owner, carry on a plan
// left starting (fail it once it has been starting for startingTimeout),
// settle it at its end, or send its bid changes.
func (r *round) decide(v versioned, want func() strategies.Decision) step {
	rec := v.rec
	st := step{plan: v}
	if rec.Plan.Owner != r.replica {
		heard, alive := r.ownerAlive(rec.Plan.Owner)
		if alive {
			return st
		}
		if rec.Plan.Status == planStarting && !heard && r.now.Sub(rec.Plan.Start) <= 2*r.tick {
			// A plan being started by a replica we have not heard from
			// yet: give it the benefit of the doubt once.
			return st
		}
		st.takeOver = true
	}
	switch {
	case rec.Plan.Status == planStarting && r.now.Sub(rec.Plan.Start) > startingTimeout:
		// No try carried it to running in all that time (its hold or its
		// bids kept failing): fail it and release its hold rather than
		// leave it starting with money held.
		st.action = actFail
	case rec.Plan.Status == planStarting && (st.takeOver || !r.startingHere[refOf(&rec.Plan)] && r.now.Sub(rec.Plan.Start) > 2*r.tick):
		// Its replica died setting it up, or the spend starting it here
		// gave up on an outage: the user's signed spend is carried on,
		// as a retry of it by its id would.
		st.action = actStart
	case rec.Plan.Status != wire.PlanRunning: // a try of start is on it here
	case !r.now.Before(rec.Plan.End.Add(r.settle)):
		st.action = actSettle
	default:
		// A plan taken over is re-planned whatever it wants; the usual
		// round of one of ours changes nothing and copies nothing.
		d := want()
		if st.takeOver || needsChange(rec, d, r.now) {
			st.action, st.stage, st.held, st.changes = actRebid, d.Stage, d.Held, bidChanges(rec, d.Allocs, r.now)
		}
	}
	return st
}

// execution is a plan's step being carried out: a copy of the plan, its
// revision (after a take-over), and where its bid changes start among the
// round's.
type execution struct {
	step step
	rec  *planRecord
	rev  uint64
	from int
}

// own readies st to be carried out on a copy of its plan, first taking the
// plan over from its silent owner (compare-and-set) if st says so; false
// if another replica won it, or it changed.
func (b *Broker) own(ctx context.Context, r *round, st step) (*execution, bool) {
	x := &execution{step: st, rec: st.plan.rec.clone(), rev: st.plan.rev}
	if !st.takeOver {
		return x, true
	}
	from := x.rec.Plan.Owner
	x.rec.Plan.Owner = b.cfg.Replica
	nrev, err := b.store.update(ctx, x.rec, x.rev)
	if err != nil {
		return nil, false
	}
	x.rev = nrev
	r.mu.Lock()
	r.takenOver[from]++
	r.mu.Unlock()
	return x, true
}

// execute is the executor of the steps other than a rebid: it fails,
// starts or settles the plan and returns what failed.
func (b *Broker) execute(ctx context.Context, r *round, x *execution) []error {
	switch x.step.action {
	case actFail:
		return b.failStarted(ctx, x.rec, x.rev, r.now)
	case actStart:
		if _, err := b.start(ctx, x.rec, x.rev, r.now, false); err != nil {
			return []error{fmt.Errorf("starting plan %s: %w", x.rec.Plan.ID, err)}
		}
		return nil
	case actSettle:
		return b.settle(ctx, x.rec, x.rev, r.now)
	}
	return nil
}

// record finishes a rebid once the round's bids were sent: it applies to
// the plan what its hosts took (results, one per change) and writes it
// back by compare-and-set, and returns what failed.
func (b *Broker) record(ctx context.Context, r *round, x *execution, results []error) []error {
	st := x.step
	changed, errs := b.took(x.rec, r.now, st.stage, st.held, st.changes, results)
	if changed {
		if _, err := b.store.update(ctx, x.rec, x.rev); errors.Is(err, errStale) {
			b.withdrawIfEnded(ctx, refOf(&x.rec.Plan), st.changes)
		} else if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// withdrawIfEnded cancels the bids a round just set for plan ref if the
// plan ended while they were on their way (a cancel won the record): the
// cancel stopped the bids it knew of, not these.
func (b *Broker) withdrawIfEnded(ctx context.Context, ref planRef, sent []bidChange) {
	v, ok, err := b.store.fetch(ctx, ref, true)
	if err != nil || !ok || v.rec.Plan.Status == wire.PlanRunning || v.rec.Plan.Status == planStarting {
		return // still on: the next round reconciles it
	}
	var stop []bidChange
	for _, c := range sent {
		if len(c.req.Set) == 0 {
			continue
		}
		vms := make([]string, len(c.req.Set))
		for i, bid := range c.req.Set {
			vms[i] = bid.VM
		}
		stop = append(stop, cancelOn(c.host, ref.id, vms))
	}
	b.stopBids(ctx, stop)
}

// failStarted fails a plan whose replica died starting it: its bids
// cancelled, its hold released.
func (b *Broker) failStarted(ctx context.Context, rec *planRecord, rev uint64, now time.Time) []error {
	var errs []error
	releaseErr, storeErr := b.fail(ctx, rec, rev, now)
	for _, err := range []error{releaseErr, storeErr} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// settle ends a plan Settle after its end: the rest of its hold released,
// its bids paid as far as they ran.
func (b *Broker) settle(ctx context.Context, rec *planRecord, rev uint64, now time.Time) []error {
	rel, err := b.cfg.Bank.Release(ctx, &wire.ReleaseRequest{Hold: rec.Plan.Hold, User: rec.Plan.User})
	if err != nil {
		b.cfg.Metrics.Error("broker", "release")
		return []error{fmt.Errorf("releasing plan %s: %w", rec.Plan.ID, err)}
	}
	payBids(rec, now)
	rec.Plan.Status, rec.Plan.Released = wire.PlanDone, rel.Hold.Released
	switch _, err := b.store.update(ctx, rec, rev); {
	case errors.Is(err, errStale): // another replica ended it, and says so
	case err != nil:
		return []error{err}
	default:
		b.logPlan("ended", rec.Plan, "spent", rel.Hold.Captured.String(), "released", rel.Hold.Released.String())
	}
	return nil
}

// parallel runs f(0), …, f(n−1), at most limit at once; with Serial one
// at a time, in order, in this goroutine (what a deterministic simulation
// needs).
func (b *Broker) parallel(n, limit int, f func(i int)) {
	if b.cfg.Serial {
		for i := range n {
			f(i)
		}
		return
	}
	var g errgroup.Group
	g.SetLimit(limit)
	for i := range n {
		g.Go(func() error { f(i); return nil })
	}
	_ = g.Wait() // f reports its errors itself
}

// view is the round view a plan of strategy needs, as Spend and Adjust
// run one plan's round.
func (b *Broker) view(strategy string) roundView {
	var v roundView
	st, err := strategies.ByName(strategy)
	if err != nil {
		return v
	}
	if st.Reads()&strategies.ReadsBoost != 0 {
		v.boostScale = b.boostScale()
	}
	if st.Reads()&strategies.ReadsJob != 0 {
		v.jobs = b.edf(b.cfg.Now())
	}
	return v
}
