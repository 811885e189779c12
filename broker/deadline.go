package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// Errors of the deadline service.
var (
	ErrDeadline     = fmt.Errorf("%w: the deadline cannot be met", wire.ErrConflict)
	ErrUnaffordable = fmt.Errorf("%w: the job's price is above what the user can pay", wire.ErrInsufficient)
	ErrJobRunning   = fmt.Errorf("%w: a job of that name is already admitted", wire.ErrConflict)
	ErrUnknownJob   = fmt.Errorf("%w: unknown job", wire.ErrNotFound)
	ErrVMBusy       = fmt.Errorf("%w: the VM runs another plan", wire.ErrConflict)
)

// Defaults of the deadline service.
const (
	defaultDeadlineShare = 0.8
	maxDeadlineShare     = 0.95
	defaultMinHistory    = 5
	jockeyPeriod         = time.Minute
	controlSlack         = 1.2
	maxHistory           = 200
	upperZ               = 1.64 // the estimate's one-sided 95 % bound
)

// jobRec is an admitted job, kept on its plan's record so every replica
// sees it and a survivor runs it.
type jobRec struct {
	Spec     wire.JobSpec `json:"spec"`
	Work     float64      `json:"work"` // seconds at a full share: the estimate's upper bound
	Admitted time.Time    `json:"admitted"`
	Deadline time.Time    `json:"deadline"`
	Price    money.Micro  `json:"price"`
	Progress float64      `json:"progress"`
	MapsDone int          `json:"maps_done"`
	RedsDone int          `json:"reduces_done"`
	Done     bool         `json:"done,omitempty"`
	Finished time.Time    `json:"finished,omitzero"`
	// Share is what the control loop (Jockey with a C(p, a) table, else ARIA
	// over the tasks left) last said the job needs; the job holds at least
	// the reserved share whenever it runs.
	Share   float64   `json:"share,omitempty"`
	Control time.Time `json:"control,omitzero"`
	// Held is the share-seconds the job has held in finished stints (its
	// measured work, the estimator's training data), RunFrom when its
	// current stint of holding RunShare began; MapWork what it had held when
	// its maps were done.
	Held     float64   `json:"held"`
	RunFrom  time.Time `json:"run_from,omitzero"`
	RunShare float64   `json:"run_share,omitempty"`
	MapWork  float64   `json:"map_work,omitempty"`
}

// held is the share-seconds the job has held by now.
func (j *jobRec) held(now time.Time) float64 {
	h := j.Held
	if !j.RunFrom.IsZero() {
		h += now.Sub(j.RunFrom).Seconds() * j.RunShare
	}
	return h
}

// accountRun closes the job's stint at now and opens a new one with the
// share its bids buy, when its bids changed or it started or stopped
// running. It reports whether it changed the record.
func (b *Broker) accountRun(rec *planRecord, now time.Time, changed bool) bool {
	j := rec.Job
	if j == nil || j.Done {
		return false
	}
	running := len(rec.Bids) > 0
	if !changed && running == !j.RunFrom.IsZero() {
		return false
	}
	nj := *j
	nj.Held, nj.RunFrom, nj.RunShare = j.held(now), time.Time{}, 0
	if running {
		nj.RunFrom, nj.RunShare = now, b.heldShare(rec)
	}
	rec.Job = &nj
	return true
}

// heldShare is the mean share of its hosts a plan's bids buy against the
// others' rates there (as the hosts last reported them).
func (b *Broker) heldShare(rec *planRecord) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	mine := map[string]float64{}
	for _, bid := range rec.Bids {
		mine[bid.Host] += bid.rate()
	}
	if len(mine) == 0 {
		return 0
	}
	total := 0.0
	for h, r := range mine {
		st := b.hosts[h]
		y := st.Price
		for _, v := range st.VMs {
			if v.Plan == rec.Plan.ID {
				y -= v.Rate
			}
		}
		total += r / (r + max(y, 0))
	}
	return total / float64(len(mine))
}

// features are MRM's inputs to the processing-time estimate.
func features(s wire.JobSpec) []float64 {
	return []float64{float64(s.Maps), float64(s.Reduces), s.MapSelectivity, s.ReduceSelectivity}
}

func ariaProfile(p wire.JobProfile) strategies.ARIAProfile {
	return strategies.ARIAProfile{MapAvg: p.MapAvg, MapMax: p.MapMax, Sh1Avg: p.Sh1Avg, Sh1Max: p.Sh1Max,
		ShTypAvg: p.ShTypAvg, ShTypMax: p.ShTypMax, ReduceAvg: p.ReduceAvg, ReduceMax: p.ReduceMax}
}

// estimate is a job's processing time at a full share: mean, standard
// deviation and the upper bound admission plans with. With MinHistory
// finished jobs it is MRM's regression per phase (map; shuffle and reduce)
// over their measured work, retrained on every call from the finished jobs
// in the plan store; before that, ARIA's bounds over the job's profile,
// the upper bound taken as the one-sided 95 % point [recon].
func (b *Broker) estimate(s wire.JobSpec) (mean, sd, upper float64, source string, err error) {
	type done struct {
		at     time.Time
		x      []float64
		mw, rw float64
	}
	var hist []done
	b.store.each(func(rec *planRecord, _ uint64) {
		if j := rec.Job; j != nil && j.Done && j.MapWork > 0 && j.Held >= j.MapWork {
			hist = append(hist, done{j.Finished, features(j.Spec), j.MapWork, j.Held - j.MapWork})
		}
	})
	if len(hist) >= b.cfg.MinHistory {
		sort.Slice(hist, func(i, k int) bool { return hist[i].at.After(hist[k].at) })
		hist = hist[:min(len(hist), maxHistory)]
		maps, reds := &strategies.Estimator{Z: upperZ}, &strategies.Estimator{Z: upperZ}
		for _, h := range hist {
			maps.Observe(h.x, h.mw)
			reds.Observe(h.x, h.rw)
		}
		x := features(s)
		mm, ms, mu, err1 := maps.Predict(x)
		rm, rs, ru, err2 := reds.Predict(x)
		if err := errors.Join(err1, err2); err == nil && mm+rm > 0 {
			return mm + rm, math.Hypot(ms, rs), max(mu, 0) + max(ru, 0), "history", nil
		}
	}
	low, up, avg := strategies.ARIABounds(ariaProfile(s.Profile), s.Maps, s.Reduces, s.MapSlots, max(s.ReduceSlots, 1))
	if !(up > 0) || math.IsInf(up, 0) {
		return 0, 0, 0, "", wire.Errorf(wire.ErrBadRequest, "the job's profile gives no processing time (bounds %.1f–%.1f s)", low, up)
	}
	return avg, (up - avg) / upperZ, up, "profile", nil
}

// committed lists the admitted deadline jobs not yet done whose VMs share a
// host with hosts: MRM's queue, each with the
// time it still needs at the reserved share and its deadline, in seconds
// from now, in deadline order. A job behind its estimate is due when EDF
// can finish it, not before: it is committed, and the queue after it must
// still fit.
func (b *Broker) committed(now time.Time, hosts map[string]bool) []strategies.Queued {
	var q []strategies.Queued
	phi := b.cfg.DeadlineShare
	b.store.each(func(rec *planRecord, _ uint64) {
		j := rec.Job
		if j == nil || j.Done || j.Deadline.IsZero() || rec.Plan.Status != wire.PlanRunning && rec.Plan.Status != planStarting {
			return
		}
		if !slices.ContainsFunc(rec.Plan.VMs, func(v wire.PlanVM) bool { return hosts[v.Host] }) {
			return
		}
		q = append(q, strategies.Queued{Work: j.Work * (1 - j.Progress) / phi, Deadline: j.Deadline.Sub(now).Seconds()})
	})
	sort.SliceStable(q, func(i, k int) bool { return q[i].Deadline < q[k].Deadline })
	done := 0.0
	for i := range q {
		done += q[i].Work
		q[i].Deadline = max(q[i].Deadline, done)
	}
	return q
}

// jobHosts checks the job's VMs are known and the user's, and gives their hosts.
func (b *Broker) jobHosts(user string, s wire.JobSpec) (map[string]bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	hosts := map[string]bool{}
	for _, vm := range s.VMs {
		host, st, ok := b.vmInfo(vm)
		switch {
		case !ok:
			return nil, fmt.Errorf("%w %q (see `mrmarket vms`)", ErrUnknownVM, vm)
		case st.Owner != user:
			return nil, fmt.Errorf("%w: VM %q belongs to another user", ErrNotOwner, vm)
		}
		hosts[host] = true
	}
	return hosts, nil
}

// costRate is what holding share phi of every host of the job costs per
// second against the hosts' best-effort rates, at prices they are unlikely
// to exceed: the best-effort price now or its mean plus 1.64 standard
// deviations, whichever is higher (at least 1 µ/s per host).
func (b *Broker) costRate(hosts map[string]bool, phi float64) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	total := 0.0
	for h := range hosts {
		y := b.bestEffortPrice(b.hosts[h])
		if st := b.beStats[h]; st != nil && st.N > 1 {
			y = max(y, st.Mean+upperZ*st.StdDev())
		}
		r, err := strategies.RateForShare(phi, y)
		if err == nil {
			total += max(r, 1)
		}
	}
	return total
}

// pricing is everything a quote or an admission computes.
type pricing struct {
	mean, sd, work float64 // processing time at a full share
	source         string
	run            float64 // seconds at the reserved share
	queue          []strategies.Queued
	gamma          float64 // γ̄: the mean run time of the queue and the job
	earliest       float64 // seconds from now
	exec           float64 // credits·1e-6 the run costs at the reserved share
}

func (b *Broker) price(now time.Time, user string, s wire.JobSpec) (*pricing, error) {
	hosts, err := b.jobHosts(user, s)
	if err != nil {
		return nil, err
	}
	p := &pricing{}
	if p.mean, p.sd, p.work, p.source, err = b.estimate(s); err != nil {
		return nil, err
	}
	phi := b.cfg.DeadlineShare
	p.run = p.work / phi
	p.queue = b.committed(now, hosts)
	sum := p.run
	for _, q := range p.queue {
		sum += q.Work
	}
	p.gamma = sum / float64(len(p.queue)+1)
	if p.earliest, err = strategies.EarliestFinish(0, p.queue, p.run); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDeadline, err)
	}
	p.exec = b.costRate(hosts, phi) * p.run
	return p, nil
}

// at is the price of finishing by d seconds from now: the run's cost at
// the reserved share plus MRM's Eq. 13 with κ = Kappa·cost/run, so a
// zero-slack deadline on an empty queue costs 1+Kappa times the run and a
// far one approaches the run's cost.
func (p *pricing) at(d, kappa float64) money.Micro {
	k := kappa * p.exec / p.run
	v := p.exec + strategies.MRMPrice(0, p.queue, p.run, d, k, p.gamma)
	if v > float64(money.Max) || math.IsNaN(v) {
		return money.Max
	}
	return money.Micro(math.Ceil(v))
}

// confidence is the probability, by the estimate, that the job needs no
// more time than it can have by d: the most work that fits by d (the
// largest run EarliestFinish still ends by d), against N(mean, sd).
func (p *pricing) confidence(d, phi float64) float64 {
	lo, hi := 0.0, d
	for range 50 {
		mid := (lo + hi) / 2
		if f, err := strategies.EarliestFinish(0, p.queue, mid); err == nil && f <= d+1e-9 {
			lo = mid
		} else {
			hi = mid
		}
	}
	if p.sd <= 0 {
		if lo*phi >= p.mean-1e-9 {
			return 1
		}
		return 0
	}
	return distuv.Normal{Mu: p.mean, Sigma: p.sd}.CDF(lo * phi)
}

// balancer is the part of bank.Client quotes use to tell a user what they
// can afford; a bank without it is not asked.
type balancer interface {
	Balance(ctx context.Context, req *wire.BalanceRequest) (wire.BalanceReply, error)
}

func (b *Broker) balance(ctx context.Context, user string) (money.Micro, bool) {
	bank, ok := b.cfg.Bank.(balancer)
	if !ok {
		return 0, false
	}
	rep, err := bank.Balance(ctx, &wire.BalanceRequest{User: user})
	if err != nil {
		return 0, false
	}
	return rep.Balance, true
}

// Quote is a job's price-deadline curve (MRM §5): from the earliest finish
// the committed jobs leave, Points deadlines a tenth of the job's run
// apart, each with its price, the estimate's confidence and whether the
// user's balance pays for it. Nothing is held.
func (b *Broker) Quote(ctx context.Context, req *wire.QuoteRequest) (wire.QuoteReply, error) {
	if err := req.Validate(); err != nil {
		return wire.QuoteReply{}, err
	}
	b.admit.Lock()
	defer b.admit.Unlock()
	now := b.cfg.Now()
	p, err := b.price(now, req.User, req.Job)
	if err != nil {
		return wire.QuoteReply{}, err
	}
	n := req.Points
	if n == 0 {
		n = 10
	}
	bal, known := b.balance(ctx, req.User)
	rep := wire.QuoteReply{Job: req.Job.Name, Work: p.work, Mean: p.mean, SD: p.sd, Source: p.source,
		Share: b.cfg.DeadlineShare, Earliest: at(now, p.earliest), Queued: len(p.queue), Balance: bal}
	step := max(p.run/10, b.cfg.Tick.Seconds())
	for i := range n {
		d := p.earliest + float64(i)*step
		price := p.at(d, b.cfg.DeadlineKappa)
		rep.Curve = append(rep.Curve, wire.QuotePoint{Deadline: at(now, d), Price: price,
			Confidence: p.confidence(d, b.cfg.DeadlineShare), Affordable: !known || price <= bal})
	}
	rep.MapSlots, rep.ReduceSlots = b.ariaSlots(req.Job, p.earliest*b.cfg.DeadlineShare)
	return rep, nil
}

// ariaSlots is ARIA's minimum (map, reduce) allocation (Eq. 15) to finish
// the job's tasks in d seconds at a full share; 0, 0 when none does.
func (b *Broker) ariaSlots(s wire.JobSpec, d float64) (int, int) {
	m, r, err := strategies.ARIASlots(ariaProfile(s.Profile), s.Maps, s.Reduces, d, math.MaxInt32, math.MaxInt32)
	if err != nil {
		return 0, 0
	}
	return m, r
}

func at(now time.Time, secs float64) time.Time {
	return now.Add(time.Duration(secs * float64(time.Second))).Truncate(time.Millisecond)
}

// Submit admits a job with a committed deadline (the one asked for, or the
// earliest whose price fits the budget), holds its price and runs it as a
// plan of strategy "deadline": EDF on committed deadlines, realised as
// spending (see the package doc). A deadline earlier than the earliest
// feasible finish, or a price above the budget or the balance, is refused
// and nothing is held.
func (b *Broker) Submit(ctx context.Context, req *wire.SubmitRequest) (wire.SubmitReply, error) {
	if err := req.Validate(); err != nil {
		return wire.SubmitReply{}, err
	}
	id := req.ID
	if id == "" {
		id = "job-" + randomHex()
	}
	if v, ok := b.store.get(id); ok && v.rec.Job != nil && v.rec.Plan.Status != wire.PlanFailed {
		if v.rec.Plan.User != req.User || v.rec.Job.Spec.Name != req.Job.Name {
			return wire.SubmitReply{}, ErrPlanReused
		}
		return wire.SubmitReply{Job: b.jobView(v.rec, b.cfg.Now()), Plan: v.rec.Plan}, nil
	}
	b.admit.Lock()
	defer b.admit.Unlock()
	// A VM takes one plan's bid at a time: a job runs on VMs of its own.
	var clash error
	b.store.each(func(rec *planRecord, _ uint64) {
		if rec.Plan.Status != wire.PlanRunning && rec.Plan.Status != planStarting || clash != nil {
			return
		}
		if j := rec.Job; j != nil && !j.Done && rec.Plan.User == req.User && j.Spec.Name == req.Job.Name {
			clash = fmt.Errorf("%w: %q (plan %s)", ErrJobRunning, req.Job.Name, rec.Plan.ID)
			return
		}
		if rec.Job != nil && rec.Job.Done {
			return
		}
		for _, v := range rec.Plan.VMs {
			if slices.Contains(req.Job.VMs, v.VM) {
				clash = fmt.Errorf("%w: VM %q is in plan %s; give the job VMs of its own", ErrVMBusy, v.VM, rec.Plan.ID)
				return
			}
		}
	})
	if clash != nil {
		return wire.SubmitReply{}, clash
	}
	now := b.cfg.Now()
	p, err := b.price(now, req.User, req.Job)
	if err != nil {
		return wire.SubmitReply{}, err
	}
	kappa := b.cfg.DeadlineKappa
	var d float64
	var price money.Micro
	if req.BestEffort {
		// No deadline, no premium: the budget pays the run at the shares the
		// overlap order gives it; below the run's cost at today's prices it
		// would stall half way.
		if cost := money.Micro(math.Ceil(p.exec)); req.Budget < cost {
			return wire.SubmitReply{}, fmt.Errorf("%w: the run costs about %s at today's prices, the budget is %s", ErrUnaffordable, cost, req.Budget)
		}
		price = req.Budget
	} else if !req.Deadline.IsZero() {
		d = req.Deadline.Sub(now).Seconds()
		if d < p.earliest-1e-6 {
			return wire.SubmitReply{}, fmt.Errorf("%w: the earliest finish is %s (%.0f s from now)", ErrDeadline, at(now, p.earliest).Format(time.RFC3339), p.earliest)
		}
		price = p.at(d, kappa)
		if d > wire.MaxDuration.Seconds()/2 {
			return wire.SubmitReply{}, wire.Errorf(wire.ErrBadRequest, "deadline %s is too far", req.Deadline.Format(time.RFC3339))
		}
	} else {
		// The price falls with the deadline: the earliest one the budget
		// pays, to the second, by bisection up to ten runs beyond.
		lo, hi := p.earliest, p.earliest+10*p.run+3600
		if p.at(hi, kappa) > req.Budget {
			return wire.SubmitReply{}, fmt.Errorf("%w: even a deadline %.0f s away costs %s, the budget is %s", ErrUnaffordable, hi, p.at(hi, kappa), req.Budget)
		}
		if p.at(lo, kappa) > req.Budget {
			for hi-lo > 0.5 {
				if mid := (lo + hi) / 2; p.at(mid, kappa) <= req.Budget {
					hi = mid
				} else {
					lo = mid
				}
			}
			lo = hi
		}
		d = math.Ceil(lo)
		price = p.at(d, kappa)
	}
	if req.Budget > 0 && price > req.Budget {
		return wire.SubmitReply{}, fmt.Errorf("%w: finishing by then costs %s, the budget is %s", ErrUnaffordable, price, req.Budget)
	}
	if bal, ok := b.balance(ctx, req.User); ok && price > bal {
		return wire.SubmitReply{}, fmt.Errorf("%w: finishing by then costs %s, the balance is %s", ErrUnaffordable, price, bal)
	}
	job := &jobRec{Spec: req.Job, Work: p.work, Admitted: now, Price: price}
	// A late job keeps running, for a quarter of its window past its
	// deadline; a best-effort one for ten runs (at least an hour); a done
	// one ends its plan at once.
	end := now.Add(max(time.Duration(10*p.run*float64(time.Second)), time.Hour))
	if !req.BestEffort {
		job.Deadline = at(now, d)
		end = job.Deadline.Add(max(job.Deadline.Sub(now)/4, 10*b.cfg.Tick))
	}
	rep, err := b.spend(ctx, &wire.SpendRequest{ID: id, User: req.User, Budget: price,
		Duration: wire.Duration(end.Sub(now)), VMs: req.Job.VMs, Strategy: wire.StrategyDeadline}, job)
	if err != nil {
		return wire.SubmitReply{}, err
	}
	v, _ := b.store.get(id)
	if v.rec == nil {
		return wire.SubmitReply{}, fmt.Errorf("%w: job %s vanished", wire.ErrInternal, id)
	}
	return wire.SubmitReply{Job: b.jobView(v.rec, now), Plan: rep.Plan}, nil
}

// jobRun is which admitted jobs hold a share of their hosts now, and how
// much, and each host's total of those shares.
type jobRun struct {
	share map[string]float64 // plan → share of each of its hosts
	host  map[string]float64 // host → the jobs' shares on it
}

// jobShares decides who runs. Deadline jobs first, EDF over hosts: in
// deadline order, each job whose hosts no earlier job holds runs at the
// reserved share. At every moment some job due no later than a waiting one
// runs, so each finishes no later than in the single-server EDF schedule
// admission checked. Then the best-effort jobs whose hosts no deadline job
// holds share the reserved share by the broker's overlap policy (Lin et
// al.: MaxSRPT by default), each at the share of its current station —
// the map station while it has maps left, the shuffle station after.
func (b *Broker) jobShares() jobRun {
	type entry struct {
		id    string
		job   *jobRec
		hosts []string
	}
	var dl, be []entry
	b.store.each(func(rec *planRecord, _ uint64) {
		j := rec.Job
		if j == nil || j.Done || rec.Plan.Status != wire.PlanRunning && rec.Plan.Status != planStarting {
			return
		}
		e := entry{id: rec.Plan.ID, job: j}
		for _, v := range rec.Plan.VMs {
			e.hosts = append(e.hosts, v.Host)
		}
		if j.Deadline.IsZero() {
			be = append(be, e)
		} else {
			dl = append(dl, e)
		}
	})
	sort.Slice(dl, func(i, k int) bool {
		if di, dk := dl[i].job.Deadline, dl[k].job.Deadline; !di.Equal(dk) {
			return di.Before(dk)
		}
		return dl[i].id < dl[k].id
	})
	phi := b.cfg.DeadlineShare
	run := jobRun{share: map[string]float64{}, host: map[string]float64{}}
	taken := map[string]bool{}
	for _, e := range dl {
		if slices.ContainsFunc(e.hosts, func(h string) bool { return taken[h] }) {
			continue
		}
		run.share[e.id] = phi
		for _, h := range e.hosts {
			taken[h] = true
		}
	}
	var free []entry
	for _, e := range be {
		if !slices.ContainsFunc(e.hosts, func(h string) bool { return taken[h] }) {
			free = append(free, e)
		}
	}
	if len(free) > 0 {
		sort.Slice(free, func(i, k int) bool { return free[i].id < free[k].id })
		now := make([]strategies.OverlapNow, len(free))
		for i, e := range free {
			x, y := overlapWork(e.job.Spec)
			now[i] = strategies.OverlapNow{
				OverlapJob: strategies.OverlapJob{Release: e.job.Admitted.Sub(time.Time{}).Seconds(), Map: x, Shuffle: y},
				MapLeft:    x * (1 - frac(e.job.MapsDone, e.job.Spec.Maps)), ShuffleLeft: y * (1 - frac(e.job.RedsDone, e.job.Spec.Reduces))}
		}
		m, sh, err := strategies.OverlapRates(now, b.cfg.JobOrder)
		if err == nil {
			for i, e := range free {
				r := m[i]
				if now[i].MapLeft <= 0 {
					r = sh[i]
				}
				if r > 1e-9 {
					run.share[e.id] = phi * r
				}
			}
		}
	}
	// Map and shuffle are one resource here, a host's CPU: where the
	// policy's two stations together ask more than the reserved share of a
	// host, its best-effort jobs are scaled down to fit.
	for _, e := range free {
		for _, h := range e.hosts {
			run.host[h] += run.share[e.id]
		}
	}
	for _, e := range free {
		scale := 1.0
		for _, h := range e.hosts {
			if t := run.host[h]; t > phi {
				scale = min(scale, phi/t)
			}
		}
		run.share[e.id] *= scale
	}
	clear(run.host)
	for _, list := range [][]entry{dl, free} {
		for _, e := range list {
			for _, h := range slices.Compact(slices.Sorted(slices.Values(e.hosts))) {
				run.host[h] += run.share[e.id]
			}
		}
	}
	return run
}

// overlapWork is a job's map and shuffle work in Lin et al.'s model:
// seconds at a full share of its slots (ARIA's averages).
func overlapWork(s wire.JobSpec) (x, y float64) {
	p := s.Profile
	x = float64(s.Maps) * p.MapAvg / float64(s.MapSlots)
	if s.Reduces > 0 {
		y = p.Sh1Avg + float64(s.Reduces)*(p.ShTypAvg+p.ReduceAvg)/float64(s.ReduceSlots)
	}
	return x, y
}

func frac(done, total int) float64 {
	if total <= 0 {
		return 1
	}
	return min(float64(done)/float64(total), 1)
}

// deadlineAlloc is a job plan's round, called by allocate with b.mu held:
// nothing while the job does not run (jobShares); else on each of its
// hosts the rate that buys its share q against the best-effort rates y
// there, the jobs' shares on the host adding to Q: r = q·y/(1 − Q), spread
// over its VMs there. A deadline job's q is at least what its control loop
// asks (at most 0.95), and it never spends less than its hold over its
// predicted run, so a tighter deadline's higher price buys a larger share.
func (b *Broker) deadlineAlloc(rec *planRecord, now time.Time, run jobRun, rest money.Micro, left time.Duration, out map[string]alloc) {
	j := rec.Job
	q := run.share[rec.Plan.ID]
	if j == nil || j.Done || q <= 0 {
		return
	}
	deadline := !j.Deadline.IsZero()
	if deadline {
		q = min(max(q, j.Share), maxDeadlineShare)
	}
	perHost := map[string][]string{}
	var hosts []string
	for _, v := range rec.Plan.VMs {
		if _, _, ok := b.vmInfo(v.VM); !ok {
			continue
		}
		if perHost[v.Host] == nil {
			hosts = append(hosts, v.Host)
		}
		perHost[v.Host] = append(perHost[v.Host], v.VM)
	}
	if len(hosts) == 0 {
		return
	}
	need := map[string]float64{}
	ceiling := map[string]float64{}
	total := 0.0
	for _, h := range hosts {
		y := b.bestEffortPrice(b.hosts[h])
		others := max(run.host[h]-run.share[rec.Plan.ID], 0)
		tot := min(others+q, maxDeadlineShare)
		need[h] = max(q*y/(1-tot), 1)
		ceiling[h] = max(maxDeadlineShare*y/(1-maxDeadlineShare), 1)
		total += need[h]
	}
	d := time.Duration(j.Work * (1 - j.Progress) / q * float64(time.Second))
	d = min(max(d, b.cfg.Tick), left)
	if spread := float64(rest) / d.Seconds(); deadline && spread > total {
		for _, h := range hosts {
			need[h] = min(need[h]*spread/total, ceiling[h])
		}
	}
	budget := 0.0
	for _, h := range hosts {
		budget += need[h] * d.Seconds()
	}
	scale := 1.0
	if budget > float64(rest) {
		scale = float64(rest) / budget
	}
	for _, h := range hosts {
		per := need[h] * scale * d.Seconds() / float64(len(perHost[h]))
		for _, vm := range perHost[h] {
			if bud := money.Micro(math.Floor(per)); bud > 0 {
				out[vm] = alloc{h, bud, d}
			}
		}
	}
}

// JobProgress records a running job's progress (the YARN monitor, or the
// simulator, reports it): it accounts the share-seconds the job held since
// the last report (its measured work), runs the control loop once a period
// (Jockey over the job's C(p, a) table when it has one, else ARIA's
// minimum slots for the tasks left at the pace measured so far, as a share
// of the job's slots), and
// when the job is done ends its plan, releasing what it did not spend.
func (b *Broker) JobProgress(ctx context.Context, req *wire.ProgressRequest) (wire.Job, error) {
	if err := req.Validate(); err != nil {
		return wire.Job{}, err
	}
	var id string
	b.store.each(func(rec *planRecord, _ uint64) {
		if j := rec.Job; j != nil && rec.Plan.User == req.User && j.Spec.Name == req.Job && rec.Plan.Status == wire.PlanRunning && !j.Done {
			id = rec.Plan.ID
		}
	})
	if id == "" {
		return wire.Job{}, fmt.Errorf("%w %q of %s", ErrUnknownJob, req.Job, req.User)
	}
	now := b.cfg.Now()
	rec, err := b.mutate(ctx, id, func(rec *planRecord) error {
		j := rec.Job
		nj := *j
		nj.Progress = max(j.Progress, req.Progress)
		nj.MapsDone, nj.RedsDone = max(j.MapsDone, req.MapsDone), max(j.RedsDone, req.ReducesDone)
		if nj.MapWork == 0 && nj.MapsDone >= j.Spec.Maps {
			nj.MapWork = j.held(now)
		}
		if req.Done {
			nj.Done, nj.Finished, nj.Progress = true, now, 1
			nj.Held, nj.RunFrom, nj.RunShare = j.held(now), time.Time{}, 0
			if nj.MapWork == 0 {
				nj.MapWork = nj.Held
			}
			if rec.Plan.End.After(now) {
				rec.Plan.End = now
			}
		} else if !j.Deadline.IsZero() && (j.Control.IsZero() || now.Sub(j.Control) >= jockeyPeriod) {
			nj.Share, nj.Control = b.control(&nj, now), now
		}
		rec.Job = &nj
		return nil
	})
	if err != nil {
		return wire.Job{}, err
	}
	return b.jobView(rec, now), nil
}

// control is the share the job needs to meet its deadline from where it
// is, smoothed by Jockey's hysteresis.
func (b *Broker) control(j *jobRec, now time.Time) float64 {
	left := j.Deadline.Sub(now)
	var raw float64
	if t := j.Spec.Table; t != nil {
		tbl := strategies.CTable{Progress: t.Progress, Alloc: t.Alloc, Remaining: make([][]time.Duration, len(t.Remaining))}
		for i, row := range t.Remaining {
			for _, s := range row {
				tbl.Remaining[i] = append(tbl.Remaining[i], time.Duration(s*float64(time.Second)))
			}
		}
		// One period of Jockey's loop: elapsed 0 against the time left, so
		// the controller needs no state beyond the smoothed share.
		jk := strategies.Jockey{Table: tbl, Deadline: left, Slack: controlSlack, DeadZone: min(3*time.Minute, left/10)}
		_, r, err := jk.Step(0, j.Progress)
		if err != nil {
			return j.Share
		}
		raw = r
	} else {
		s := j.Spec
		// The profile's task times, stretched by how much slower the job
		// has been than they say (its measured work against ARIA's mean
		// for the progress made).
		prof := ariaProfile(s.Profile)
		if j.Progress > 0.05 {
			_, _, avg := strategies.ARIABounds(prof, s.Maps, s.Reduces, s.MapSlots, max(s.ReduceSlots, 1))
			if f := j.held(now) / (avg * j.Progress); f > 1 && avg > 0 {
				for _, v := range []*float64{&prof.MapAvg, &prof.MapMax, &prof.Sh1Avg, &prof.Sh1Max, &prof.ShTypAvg, &prof.ShTypMax, &prof.ReduceAvg, &prof.ReduceMax} {
					*v *= f
				}
			}
		}
		m, r, err := strategies.ARIASlots(prof, max(s.Maps-j.MapsDone, 0), max(s.Reduces-j.RedsDone, 0),
			left.Seconds()/controlSlack, math.MaxInt32, math.MaxInt32)
		if err != nil {
			raw = 1
		} else {
			raw = float64(m) / float64(s.MapSlots)
			if s.Reduces > 0 {
				raw = max(raw, float64(r)/float64(s.ReduceSlots))
			}
		}
	}
	raw = min(raw, 1)
	if j.Control.IsZero() {
		return raw
	}
	return j.Share + 0.2*(raw-j.Share)
}

// jobView is the public view of an admitted job.
func (b *Broker) jobView(rec *planRecord, now time.Time) wire.Job {
	j := rec.Job
	v := wire.Job{ID: rec.Plan.ID, User: rec.Plan.User, Name: j.Spec.Name, Admitted: j.Admitted, Deadline: j.Deadline,
		Finished: j.Finished, Progress: j.Progress, Work: j.Work, Price: j.Price, Spent: rec.Plan.Spent}
	for _, bid := range rec.Bids {
		v.Spent += bid.charged(now)
	}
	phi := b.cfg.DeadlineShare
	late := !j.Deadline.IsZero() && (j.Done && j.Finished.After(j.Deadline) || !j.Done && now.After(j.Deadline))
	switch {
	case j.Done:
		v.Status, v.Predict = wire.JobDone, j.Finished
	case len(rec.Bids) > 0:
		// The share it is given: a deadline job's target, a best-effort
		// job's what its bids bought.
		v.Status, v.Share = wire.JobRunning, j.RunShare
		if !j.Deadline.IsZero() {
			v.Share = min(max(phi, j.Share), maxDeadlineShare)
		}
		v.Predict = at(now, j.Work*(1-j.Progress)/max(v.Share, 0.01))
	default:
		v.Status = wire.JobQueued
		v.Predict = at(now, j.Work*(1-j.Progress)/phi)
	}
	if late {
		v.Status = wire.JobLate
	}
	if rec.Plan.Status == wire.PlanCancelled {
		v.Status = wire.PlanCancelled
	}
	return v
}

// Jobs lists admitted jobs, of req.User when set, earliest deadline first.
func (b *Broker) Jobs(req *wire.JobsRequest) wire.JobsReply {
	now := b.cfg.Now()
	rep := wire.JobsReply{Jobs: []wire.Job{}}
	b.store.each(func(rec *planRecord, _ uint64) {
		if rec.Job == nil || rec.Plan.Status == planStarting || rec.Plan.Status == wire.PlanFailed || req.User != "" && rec.Plan.User != req.User {
			return
		}
		rep.Jobs = append(rep.Jobs, b.jobView(rec, now))
	})
	sort.Slice(rep.Jobs, func(i, k int) bool {
		if !rep.Jobs[i].Deadline.Equal(rep.Jobs[k].Deadline) {
			return rep.Jobs[i].Deadline.Before(rep.Jobs[k].Deadline)
		}
		return rep.Jobs[i].ID < rep.Jobs[k].ID
	})
	return rep
}
