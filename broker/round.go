package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// roundWorkers is how many plans a round runs at once.
const roundWorkers = 16

// maxInFlight bounds the bid requests a round has waiting for agents.
const maxInFlight = 256

// rateTolerance is how far a VM's new rate may differ from its current bid
// before the broker re-bids: rounding noise is not worth a message.
const rateTolerance = 0.01

// remaining is what a plan has not spent by now: its budget less what its
// past bids charged and what its current bids have charged so far.
func remaining(rec *planRecord, now time.Time) money.Micro {
	r := rec.Plan.Budget - rec.Plan.Spent
	for _, bid := range rec.Bids {
		r -= bid.charged(now)
	}
	return max(r, 0)
}

// alloc is what a round wants one VM to have: Budget over Duration from now.
type alloc struct {
	host     string
	budget   money.Micro
	duration time.Duration
}

// allocate runs the plan's strategy for the remaining budget over the time
// left, and gives the active stages. The budgets it returns never sum above
// the remainder. It does not change rec: stored records are shared.
func (b *Broker) allocate(rec *planRecord, now time.Time, v roundView) (out map[string]alloc, stage []int) {
	left := rec.Plan.End.Sub(now)
	rest := remaining(rec, now)
	out = map[string]alloc{}
	stage = slices.Clone(rec.Plan.Stage)
	if left <= 0 || rest <= 0 {
		return out, stage
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	type vmRef struct {
		vm, host string
		idle     bool
	}
	known := func(vms []string) []vmRef {
		var refs []vmRef
		for _, vm := range vms {
			if host, st, ok := b.vmInfo(vm); ok {
				refs = append(refs, vmRef{vm, host, st.Idle})
			}
		}
		return refs
	}
	byRate := func(refs []vmRef, rates map[string]float64) {
		for _, r := range refs {
			if bud := money.Micro(math.Floor(rates[r.vm] * left.Seconds())); bud > 0 {
				out[r.vm] = alloc{r.host, bud, left}
			}
		}
	}
	even := func(refs []vmRef, total money.Micro, d time.Duration) {
		if len(refs) == 0 {
			return
		}
		for i, part := range money.Split(total, len(refs)) {
			if part > 0 {
				out[refs[i].vm] = alloc{refs[i].host, part, d}
			}
		}
	}
	// boosted spends total over refs for d by Alg. 5.1: idle VMs give up a
	// fraction boost of the flat rate to the active ones, the mean rate
	// unchanged (strategies.BottleneckElimination.Rates is the same rule
	// over maps; this is the hot loop of a large round).
	boosted := func(refs []vmRef, total money.Micro, d time.Duration, boost float64) {
		be := strategies.BottleneckElimination{Boost: boost}
		if len(refs) == 0 || be.Check() != nil {
			return
		}
		ni := 0
		for _, r := range refs {
			if r.idle {
				ni++
			}
		}
		flat := float64(total) / d.Seconds() / float64(len(refs))
		active, idle := be.ActiveIdle(flat, ni, len(refs)-ni)
		buds := make([]money.Micro, len(refs))
		var sum money.Micro
		for i, r := range refs {
			rate := active
			if r.idle {
				rate = idle
			}
			buds[i] = money.Micro(math.Floor(rate * d.Seconds()))
			sum += buds[i]
		}
		// Floating point may round the boosted rates a micro-credit over
		// the total: take it back from the largest budget.
		if over := sum - total; over > 0 {
			top := 0
			for i := range buds {
				if buds[i] > buds[top] {
					top = i
				}
			}
			buds[top] -= over
		}
		for i, r := range refs {
			if buds[i] > 0 {
				out[r.vm] = alloc{r.host, buds[i], d}
			}
		}
	}
	all := planVMs(rec)
	switch rec.Plan.Strategy {
	case wire.StrategyFair:
		even(known(all), rest, left)
	case wire.StrategyBottleneck:
		boosted(known(all), rest, left, v.boosts[rec.Plan.ID])
	case wire.StrategyBestResp:
		refs := known(all)
		perHost := map[string][]vmRef{}
		for _, r := range refs {
			perHost[r.host] = append(perHost[r.host], r)
		}
		var hosts []strategies.HostPrice
		for h := range perHost {
			y := b.hosts[h].Price
			for _, r := range perHost[h] { // the others' rates only
				if bid, ok := rec.Bids[r.vm]; ok && !bid.ended(now) {
					y -= bid.rate()
				}
			}
			w := 1.0
			if hw, ok := rec.Plan.HostWeights[h]; ok {
				w = hw
			}
			hosts = append(hosts, strategies.HostPrice{Host: h, Price: max(y, 0), Weight: w})
		}
		sort.Slice(hosts, func(i, j int) bool { return hosts[i].Host < hosts[j].Host })
		x, err := strategies.BestResponse{}.Rates(float64(rest)/left.Seconds(), hosts)
		if err == nil {
			rates := map[string]float64{}
			for h, refs := range perHost {
				for _, r := range refs {
					rates[r.vm] = x[h] / float64(len(refs))
				}
			}
			byRate(refs, rates)
		}
	case wire.StrategyDeadline:
		b.deadlineAlloc(rec, now, v.jobs, rest, left, out)
	case wire.StrategyWorkflow:
		weights := make([]float64, len(rec.Plan.Workflows))
		for i, w := range rec.Plan.Workflows {
			weights[i] = w.Weight
		}
		parts, err := strategies.WeightSplit(rest, weights)
		if err != nil {
			return out, stage
		}
		for i, w := range rec.Plan.Workflows {
			var vms []string
			seen := map[string]bool{}
			for _, s := range w.Stages {
				for _, vm := range s.VMs {
					if !seen[vm] {
						seen[vm] = true
						vms = append(vms, vm)
					}
				}
			}
			even(known(vms), parts[i], left)
		}
	case wire.StrategyStage, wire.StrategyStageBottleneck:
		weights := make([]float64, len(rec.Plan.Workflows))
		for i, w := range rec.Plan.Workflows {
			weights[i] = w.Weight
		}
		parts, err := strategies.WeightSplit(rest, weights)
		if err != nil {
			return out, stage
		}
		for i, w := range rec.Plan.Workflows {
			// A stage whose VMs are all idle is done, or a later stage was
			// reported started (StageStarted): move on, never back.
			s := stage[i]
			for s < len(w.Stages)-1 && allIdle(known(w.Stages[s].VMs), func(r vmRef) bool { return r.idle }) {
				s++
			}
			stage[i] = s
			sw := make([]float64, 0, len(w.Stages)-s)
			for _, st := range w.Stages[s:] {
				sw = append(sw, st.Weight)
			}
			stageParts, err := strategies.WeightSplit(parts[i], sw)
			if err != nil {
				continue
			}
			slice := left / time.Duration(len(sw))
			if rec.Plan.Strategy == wire.StrategyStageBottleneck {
				// The stage's idle VMs (stragglers' neighbours) give to
				// its busy ones; all idle means the stage moves on above.
				refs := known(w.Stages[s].VMs)
				if allIdle(refs, func(r vmRef) bool { return r.idle }) {
					even(refs, stageParts[0], slice)
				} else {
					boosted(refs, stageParts[0], slice, v.boosts[rec.Plan.ID])
				}
				continue
			}
			even(known(w.Stages[s].VMs), stageParts[0], slice)
		}
	}
	return out, stage
}

// needsChange reports whether a round would change anything of a plan:
// a stage moved, a bid ended, or a VM's wanted rate left the tolerance.
func needsChange(rec *planRecord, want map[string]alloc, stage []int, now time.Time) bool {
	if !slices.Equal(stage, rec.Plan.Stage) {
		return true
	}
	for vm, cur := range rec.Bids {
		if cur.ended(now) {
			return true
		}
		if _, ok := want[vm]; !ok {
			return true
		}
	}
	for vm, a := range want {
		cur, ok := rec.Bids[vm]
		if !ok || !keeps(cur, a, now) {
			return true
		}
	}
	return overCommits(rec, want, now)
}

// keeps reports whether the bid in force is close enough to what a round
// wants (same host, rate within the tolerance) to leave it alone.
func keeps(cur bidRec, a alloc, now time.Time) bool {
	if cur.ended(now) || cur.Host != a.host {
		return false
	}
	r0, r1 := cur.rate(), money.Rate(a.budget, a.duration)
	return math.Abs(r1-r0) <= rateTolerance*max(r0, r1)
}

// overCommits reports whether the bids a round would keep, with what is
// left of their budgets, and the ones it would send, together commit more
// than the plan has left: a kept bid may be up to the tolerance above what
// is wanted, and the plan must never commit more than its budget.
func overCommits(rec *planRecord, want map[string]alloc, now time.Time) bool {
	var commit money.Micro
	for vm, a := range want {
		if cur, ok := rec.Bids[vm]; ok && keeps(cur, a, now) {
			commit += cur.Budget - cur.charged(now)
		} else {
			commit += a.budget
		}
	}
	return commit > remaining(rec, now)
}

func allIdle[T any](xs []T, idle func(T) bool) bool {
	if len(xs) == 0 {
		return false
	}
	for _, x := range xs {
		if !idle(x) {
			return false
		}
	}
	return true
}

// planVMs lists a plan's VMs in order.
func planVMs(rec *planRecord) []string {
	if len(rec.Plan.Workflows) > 0 {
		var out []string
		seen := map[string]bool{}
		for _, w := range rec.Plan.Workflows {
			for _, s := range w.Stages {
				for _, vm := range s.VMs {
					if !seen[vm] {
						seen[vm] = true
						out = append(out, vm)
					}
				}
			}
		}
		return out
	}
	out := make([]string, 0, len(rec.Plan.VMs))
	for _, v := range rec.Plan.VMs {
		out = append(out, v.VM)
	}
	return out
}

// replan runs one round of a plan: allocate, diff with the bids in place,
// send one request per host whose bids change. The record is updated for
// the hosts that took their change; the errors of the others are returned.
func (b *Broker) replan(ctx context.Context, rec *planRecord, now time.Time, v roundView) (changed bool, errs []error) {
	want, stage := b.allocate(rec, now, v)
	return b.apply(ctx, rec, now, want, stage)
}

// apply sends the bids that take rec from its bids in force to want.
func (b *Broker) apply(ctx context.Context, rec *planRecord, now time.Time, want map[string]alloc, stage []int) (changed bool, errs []error) {
	changed = !slices.Equal(stage, rec.Plan.Stage)
	rec.Plan.Stage = stage
	type change struct {
		set    []wire.Bid
		cancel []string
	}
	changes := map[string]*change{}
	at := func(h string) *change {
		if changes[h] == nil {
			changes[h] = &change{}
		}
		return changes[h]
	}
	for vm, cur := range rec.Bids {
		if _, ok := want[vm]; !ok && !cur.ended(now) {
			at(cur.Host).cancel = append(at(cur.Host).cancel, vm)
		}
	}
	keepAny := !overCommits(rec, want, now) // else every bid is sent anew
	for vm, a := range want {
		if cur, ok := rec.Bids[vm]; ok && keepAny && keeps(cur, a, now) {
			continue
		}
		at(a.host).set = append(at(a.host).set, wire.Bid{VM: vm, Owner: rec.Plan.User, Plan: rec.Plan.ID, Hold: rec.Plan.Hold,
			Budget: a.budget, Duration: wire.Duration(a.duration)})
	}
	hosts := make([]string, 0, len(changes))
	for h := range changes {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	// One request per host, many in flight: a round over thousands of
	// hosts must not wait for each agent in turn.
	reqs := make([]*wire.BidRequest, len(hosts))
	results := make([]error, len(hosts))
	sem := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup
	for i, h := range hosts {
		c := changes[h]
		sort.Slice(c.set, func(i, j int) bool { return c.set[i].VM < c.set[j].VM })
		sort.Strings(c.cancel)
		req := &wire.BidRequest{Versioned: wire.Versioned{V: wire.Version}, Set: c.set, Cancel: c.cancel}
		if len(c.cancel) > 0 {
			req.Plan = rec.Plan.ID
		}
		reqs[i] = req
		atomic.AddInt64(&b.bids, 1)
		if b.cfg.Serial {
			results[i] = b.cfg.Agents.Bid(ctx, h, req)
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i] = b.cfg.Agents.Bid(ctx, h, req)
		}()
	}
	wg.Wait()
	for i, h := range hosts {
		if err := results[i]; err != nil {
			b.cfg.Metrics.Error("broker", "bids")
			errs = append(errs, fmt.Errorf("%s: %w", h, err))
			continue
		}
		// The host took it: settle what the replaced bids charged.
		changed = true
		for _, vm := range reqs[i].Cancel {
			rec.Plan.Spent += rec.Bids[vm].charged(now)
			delete(rec.Bids, vm)
		}
		for _, bid := range reqs[i].Set {
			if cur, ok := rec.Bids[bid.VM]; ok {
				rec.Plan.Spent += cur.charged(now)
			}
			rec.Bids[bid.VM] = bidRec{Host: h, Budget: bid.Budget, Start: now, Duration: bid.Duration}
		}
	}
	// Bids that ran their course are paid in full.
	for vm, cur := range rec.Bids {
		if cur.ended(now) {
			rec.Plan.Spent += cur.Budget
			delete(rec.Bids, vm)
			changed = true
		}
	}
	for i := range rec.Plan.VMs {
		v := &rec.Plan.VMs[i]
		if bid, ok := rec.Bids[v.VM]; ok {
			v.Host, v.Budget, v.Rate = bid.Host, bid.Budget, bid.rate()
		} else {
			v.Budget, v.Rate = 0, 0
		}
	}
	if b.accountRun(rec, now, changed) {
		changed = true
	}
	return changed, errs
}

// cancelAll removes every bid of the plan from its hosts and settles them.
func (b *Broker) cancelAll(ctx context.Context, rec *planRecord, now time.Time) {
	byHost := map[string][]string{}
	for vm, bid := range rec.Bids {
		byHost[bid.Host] = append(byHost[bid.Host], vm)
	}
	// In host order, like a round's requests: a deterministic simulation
	// needs it.
	for _, h := range slices.Sorted(maps.Keys(byHost)) {
		vms := byHost[h]
		slices.Sort(vms)
		req := &wire.BidRequest{Versioned: wire.Versioned{V: wire.Version}, Cancel: vms, Plan: rec.Plan.ID}
		if err := b.cfg.Agents.Bid(ctx, h, req); err != nil {
			// A host that does not answer keeps charging until the hold
			// is released, which bounds it.
			b.cfg.Metrics.Error("broker", "cancel_bids")
		}
		for _, vm := range vms {
			rec.Plan.Spent += rec.Bids[vm].charged(now)
			delete(rec.Bids, vm)
		}
	}
	for i := range rec.Plan.VMs {
		rec.Plan.VMs[i].Budget, rec.Plan.VMs[i].Rate = 0, 0
	}
}

// roundView is what a round of one plan needs to know of the others:
// the bottleneck plans' capped boosts and which admitted jobs run.
type roundView struct {
	boosts map[string]float64
	jobs   jobRun
}

// view computes the round view a plan of strategy needs.
func (b *Broker) view(strategy string) roundView {
	var v roundView
	switch strategy {
	case wire.StrategyBottleneck, wire.StrategyStageBottleneck:
		v.boosts = b.cappedBoosts()
	case wire.StrategyDeadline:
		v.jobs = b.jobShares()
	}
	return v
}

// cappedBoosts is every running bottleneck plan's boost, scaled so their
// sum stays within MaxBoost.
func (b *Broker) cappedBoosts() map[string]float64 {
	var ids []string
	var boosts []float64
	b.store.each(func(rec *planRecord, _ uint64) {
		p := &rec.Plan
		if (p.Strategy == wire.StrategyBottleneck || p.Strategy == wire.StrategyStageBottleneck) && (p.Status == wire.PlanRunning || p.Status == planStarting) {
			ids = append(ids, p.ID)
			boosts = append(boosts, p.Boost)
		}
	})
	capped := strategies.CapBoosts(boosts, b.cfg.MaxBoost)
	out := make(map[string]float64, len(ids))
	for i, id := range ids {
		out[id] = capped[i]
	}
	return out
}

// Tick runs one broker round at now: it beats its heartbeat, takes over
// the plans of replicas silent for two ticks, and for each plan it runs —
// ends it (releasing the rest) Settle after its end, or re-plans it and
// sends the bids that changed.
func (b *Broker) Tick(ctx context.Context, now time.Time) error {
	var errs []error
	if err := b.store.heartbeat(ctx, b.cfg.Replica, now); err != nil {
		return err
	}
	beats := b.store.heartbeats()
	view := roundView{boosts: b.cappedBoosts(), jobs: b.jobShares()}
	var mine []versioned
	b.store.each(func(rec *planRecord, rev uint64) {
		if rec.Plan.Status != wire.PlanRunning && rec.Plan.Status != planStarting {
			return
		}
		if rec.Plan.Owner != b.cfg.Replica {
			if last, ok := beats[rec.Plan.Owner]; ok && now.Sub(last) <= 2*b.cfg.Tick {
				return // its owner is alive
			}
		}
		mine = append(mine, versioned{rec, rev}) // shared: cloned before any change
	})
	sort.Slice(mine, func(i, j int) bool { return mine[i].rec.Plan.ID < mine[j].rec.Plan.ID })
	var mu sync.Mutex
	report := func(e ...error) {
		mu.Lock()
		errs = append(errs, e...)
		mu.Unlock()
	}
	one := func(v versioned) {
		rec, rev := v.rec, v.rev
		var want map[string]alloc // computed once, for the plans this replica runs
		var stage []int
		if rec.Plan.Owner == b.cfg.Replica && rec.Plan.Status == wire.PlanRunning && now.Before(rec.Plan.End.Add(b.cfg.Settle)) {
			if want, stage = b.allocate(rec, now, view); !needsChange(rec, want, stage, now) {
				return // the usual round: nothing to do, nothing copied
			}
		}
		rec = rec.clone()
		if rec.Plan.Owner != b.cfg.Replica {
			last, ok := beats[rec.Plan.Owner]
			if ok && now.Sub(last) <= 2*b.cfg.Tick {
				return // its owner is alive
			}
			if rec.Plan.Status == planStarting && !ok {
				// A plan being started by a replica we have not heard from
				// yet: give it the benefit of the doubt once.
				if now.Sub(rec.Plan.Start) <= 2*b.cfg.Tick {
					return
				}
			}
			rec.Plan.Owner = b.cfg.Replica
			nrev, err := b.store.update(ctx, rec, rev)
			if err != nil {
				return // another replica won it, or it changed
			}
			rev = nrev
			if rec.Plan.Status == planStarting { // its replica died setting it up
				rec.Plan.Status = wire.PlanFailed
				b.cancelAll(ctx, rec, now)
				if _, err := b.cfg.Bank.Release(ctx, &wire.ReleaseRequest{Hold: rec.Plan.Hold, User: rec.Plan.User}); err != nil && !errors.Is(err, wire.ErrNotFound) {
					report(err)
				}
				if _, err := b.store.update(ctx, rec, rev); err != nil {
					report(err)
				}
				return
			}
		}
		if rec.Plan.Status != wire.PlanRunning {
			return
		}
		if !now.Before(rec.Plan.End.Add(b.cfg.Settle)) {
			rel, err := b.cfg.Bank.Release(ctx, &wire.ReleaseRequest{Hold: rec.Plan.Hold, User: rec.Plan.User})
			if err != nil {
				b.cfg.Metrics.Error("broker", "release")
				report(fmt.Errorf("releasing plan %s: %w", rec.Plan.ID, err))
				return
			}
			for vm, bid := range rec.Bids {
				rec.Plan.Spent += bid.charged(now)
				delete(rec.Bids, vm)
			}
			rec.Plan.Status, rec.Plan.Released = wire.PlanDone, rel.Hold.Released
			if _, err := b.store.update(ctx, rec, rev); err != nil && !errors.Is(err, errStale) {
				report(err)
			}
			return
		}
		var changed bool
		var failed []error
		if want != nil {
			changed, failed = b.apply(ctx, rec, now, want, stage)
		} else { // taken over this round: allocate for it now
			changed, failed = b.replan(ctx, rec, now, view)
		}
		report(failed...)
		if changed {
			if _, err := b.store.update(ctx, rec, rev); err != nil && !errors.Is(err, errStale) {
				report(err)
			}
		}
	}
	if b.cfg.Serial {
		for _, v := range mine {
			one(v)
		}
		b.countRunning()
		return errors.Join(errs...)
	}
	// Plans are independent: run their rounds side by side.
	work := make(chan versioned)
	var wg sync.WaitGroup
	for range min(roundWorkers, max(len(mine), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := range work {
				one(v)
			}
		}()
	}
	for _, v := range mine {
		work <- v
	}
	close(work)
	wg.Wait()
	b.countRunning()
	return errors.Join(errs...)
}
