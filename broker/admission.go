package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// The deadline service's admission: MRM's queue and prices, quotes, and
// submits that admit a job as a plan of strategy "deadline".

// Defaults of the deadline service.
const (
	defaultDeadlineShare = 0.8
	maxDeadlineShare     = strategies.MaxDeadlineShare
	defaultMinHistory    = 5
	jockeyPeriod         = time.Minute
	controlSlack         = 1.2
	maxHistory           = 200
	upperZ               = 1.64 // the estimate's one-sided 95 % bound
	marginTail           = 1e-5 // the margin: the chance a job's miss passes it, were the misses normal
)

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
	mean, sd, work float64 // processing time at a full share; work is what admission plans (estimated)
	bound          float64 // the regression's upper bound (0: the profile's)
	source         string
	run            float64 // seconds at the reserved share
	queue          []strategies.Queued
	gamma          float64      // γ̄: the mean run time of the queue and the job
	earliest       float64      // seconds from now
	exec           float64      // credits·1e-6 the run costs at the reserved share
	commits        *hostCommits // the hosts' commitment records, as read
}

// price prices a job now as user's plan id (none for a quote): MRM's queue
// on its hosts is the store's jobs and those their commitment records list
// (commit.go), but that plan's.
func (b *Broker) price(ctx context.Context, now time.Time, user string, s wire.JobSpec, id string) (*pricing, error) {
	hosts, err := b.jobHosts(user, s)
	if err != nil {
		return nil, err
	}
	p := &pricing{}
	e, err := b.estimate(s)
	if err != nil {
		return nil, err
	}
	p.mean, p.sd, p.work, p.bound, p.source = e.mean, e.sd, e.work, e.bound, e.source
	// The records first: a job committed after this read makes the
	// commit fail, one committed before is in them or in the store.
	if p.commits, err = b.readCommits(ctx, hosts); err != nil {
		return nil, err
	}
	phi := b.cfg.DeadlineShare
	p.run = p.work / phi
	p.queue = b.committed(now, hosts, p.commits.pending(planRef{user, id}))
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
	p, err := b.price(ctx, now, req.User, req.Job, "")
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
	m, r, err := strategies.ARIASlots(s.Profile, s.Maps, s.Reduces, d, math.MaxInt32, math.MaxInt32)
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
// spending (see the package doc). The deadline is committed on the job's
// hosts before anything is held (commit.go): a submit another replica's
// admission beats to a host prices again. A deadline earlier than the
// earliest feasible finish, a price above the budget or the balance, or
// losing that race maxAdmitTries times (ErrAdmitRace) is refused and
// nothing is held.
func (b *Broker) Submit(ctx context.Context, req *wire.SubmitRequest) (wire.SubmitReply, error) {
	if err := req.Validate(); err != nil {
		return wire.SubmitReply{}, err
	}
	id := req.ID
	if id == "" {
		id = b.signedID(ctx) // the hold's name (mandate.go)
	}
	if id == "" {
		id = "job-" + randomHex()
	}
	if rep, done, err := b.replaySubmit(ctx, id, req, false); done {
		return rep, err
	}
	b.admit.Lock()
	defer b.admit.Unlock()
	// A retry by id may run beside the attempt it retries (requests are
	// not kept in order): that attempt may have admitted the job while
	// this one waited for the lock — then this is its replay, not a clash.
	if rep, done, err := b.replaySubmit(ctx, id, req, true); done {
		return rep, err
	}
	if err := b.clash(req); err != nil {
		return wire.SubmitReply{}, err
	}
	token := randomHex()
	now, p, d, price, err := b.admitJob(ctx, req, id, token)
	if err != nil {
		return wire.SubmitReply{}, err
	}
	job := &jobRec{Spec: req.Job, Work: p.work, Admitted: now, Price: price, Request: submitFingerprint(req), UsedFrom: b.usedOf(req.Job.VMs), Bound: p.bound}
	// A late job keeps running, for a quarter of its window past its
	// deadline; a best-effort one for ten runs (at least an hour); a done
	// one ends its plan at once.
	end := now.Add(max(time.Duration(10*p.run*float64(time.Second)), time.Hour))
	if !req.BestEffort {
		job.Deadline, job.Commit = at(now, d), token
		end = job.Deadline.Add(max(job.Deadline.Sub(now)/4, 10*b.cfg.Tick))
	}
	rep, err := b.spend(ctx, &wire.SpendRequest{ID: id, User: req.User, Budget: price,
		Duration: wire.Duration(end.Sub(now)), VMs: req.Job.VMs, Strategy: wire.StrategyDeadline}, job)
	v, _ := b.store.get(planRef{req.User, id})
	if job.Commit != "" && (err != nil && !undecided(err) || v.rec == nil || v.rec.Job == nil || v.rec.Job.Commit != token) {
		// Not admitted after all, or the id's plan is another admission's
		// (a retry raced this one): this one commits nothing. A start cut
		// off by an outage keeps its commitment: the plan is carried on by
		// a retry or a round, or fails, and a failed plan's commitment
		// counts for nothing (commit.go).
		b.uncommit(ctx, p.commits.hosts, token)
	}
	if errors.Is(err, ErrPlanReused) {
		// Another try of this submit, on another replica, recorded its
		// plan first. It priced at another moment, so its spend differs
		// from this one's; the submit does not, and its answer is this
		// one's (replaySubmit refuses a different job under the id).
		if rep, done, rerr := b.replaySubmit(ctx, id, req, true); done {
			return rep, rerr
		}
		// That try's plan has failed since: a retry admits the job again.
		return wire.SubmitReply{}, fmt.Errorf("%w: another try of job %q failed while this one was admitting it; retry with the same id", wire.ErrUnavailable, id)
	}
	if err != nil {
		return wire.SubmitReply{}, err
	}
	if v.rec == nil {
		return wire.SubmitReply{}, fmt.Errorf("%w: job %s vanished", wire.ErrInternal, id)
	}
	b.cfg.Metrics.JobAdmitted(!req.BestEffort)
	return wire.SubmitReply{Job: b.jobView(v.rec, now), Plan: rep.Plan}, nil
}

// submitFingerprint is what a submit asks, compared when its id comes
// again: the job file, and the deadline or budget it is admitted for (not
// the max price and pace the CLI signs from a quote, which may move
// between two tries of one submit).
func submitFingerprint(r *wire.SubmitRequest) string {
	spec, _ := json.Marshal(r.Job)
	var deadline int64
	if !r.Deadline.IsZero() {
		deadline = r.Deadline.UnixNano()
	}
	return fmt.Sprint(r.User, deadline, int64(r.Budget), r.BestEffort, string(spec))
}

// replaySubmit answers a submit of the user's plan id that was admitted
// already (done: the answer is rep, err): the job as it is, carried on if
// its start was cut off; a plan id of another job's is refused. fresh
// reads the bucket rather than this replica's mirror.
func (b *Broker) replaySubmit(ctx context.Context, id string, req *wire.SubmitRequest, fresh bool) (rep wire.SubmitReply, done bool, err error) {
	v, ok, err := b.store.fetch(ctx, planRef{req.User, id}, fresh)
	if err != nil {
		return rep, true, err
	}
	if !ok || v.rec.Job == nil || v.rec.Plan.Status == wire.PlanFailed {
		return rep, false, nil
	}
	if v.rec.Job.Spec.Name != req.Job.Name {
		return rep, true, ErrPlanReused
	}
	if fp := v.rec.Job.Request; fp != "" && fp != submitFingerprint(req) {
		return rep, true, fmt.Errorf("%w: job %q was admitted with another job file, deadline or budget: submit with a new id", ErrPlanReused, id)
	}
	if v.rec.Plan.Status == planStarting {
		// Admitted, but its start was cut off: carry it on (plans.go).
		started, err := b.start(ctx, v.rec.clone(), v.rev, b.cfg.Now(), false)
		if err != nil {
			return rep, true, err
		}
		return wire.SubmitReply{Job: b.jobView(v.rec, b.cfg.Now()), Plan: started.Plan}, true, nil
	}
	return wire.SubmitReply{Job: b.jobView(v.rec, b.cfg.Now()), Plan: v.rec.Plan}, true, nil
}

// admitJob prices a submit of plan id and, for a deadline, commits it on
// its hosts (commit.go) as admission token: when another admission commits one of
// them first, it prices again, at most maxAdmitTries times. It gives the
// time it priced at, the pricing, the deadline (seconds from then) and
// the price; refused, nothing is left committed.
func (b *Broker) admitJob(ctx context.Context, req *wire.SubmitRequest, id, token string) (time.Time, *pricing, float64, money.Micro, error) {
	var hosts []string // those a commit may have written
	fail := func(err error) (time.Time, *pricing, float64, money.Micro, error) {
		if hosts != nil {
			b.uncommit(ctx, hosts, token)
		}
		return time.Time{}, nil, 0, 0, err
	}
	for range maxAdmitTries {
		now := b.cfg.Now()
		p, err := b.price(ctx, now, req.User, req.Job, id)
		if err != nil {
			return fail(err)
		}
		d, price, err := p.terms(req, now, b.cfg.DeadlineKappa)
		if err != nil {
			return fail(err)
		}
		if req.Budget > 0 && price > req.Budget {
			return fail(fmt.Errorf("%w: finishing by then costs %s, the budget is %s", ErrUnaffordable, price, req.Budget))
		}
		if req.MaxPrice > 0 && price > req.MaxPrice {
			return fail(fmt.Errorf("%w: finishing by then costs %s, the most signed for is %s", ErrUnaffordable, price, req.MaxPrice))
		}
		if bal, ok := b.balance(ctx, req.User); ok && price > bal {
			return fail(fmt.Errorf("%w: finishing by then costs %s, the balance is %s", ErrUnaffordable, price, bal))
		}
		if req.BestEffort {
			return now, p, d, price, nil // no deadline to commit
		}
		hosts = p.commits.hosts
		err = b.commit(ctx, p.commits, commitment{Plan: id, User: req.User, Token: token, Work: p.work, Deadline: at(now, d), Admitted: now}, now)
		if err == nil {
			return now, p, d, price, nil
		}
		if !errors.Is(err, errStale) {
			return fail(err)
		}
	}
	return fail(ErrAdmitRace)
}

// clash refuses a job of a name the user already runs. A job may share its
// VMs with running plans: an agent keeps one bid per (VM, plan) and their
// rates add up, and EDF decides which deadline job runs on a host. Only a
// live job keeps its name (liveJob).
func (b *Broker) clash(req *wire.SubmitRequest) error {
	var clash error
	now := b.cfg.Now()
	b.store.each(func(rec *planRecord, _ uint64) {
		if clash == nil && rec.liveJob(now) && rec.Plan.User == req.User && rec.Job.Spec.Name == req.Job.Name {
			clash = fmt.Errorf("%w: %q (plan %s)", ErrJobRunning, req.Job.Name, rec.Plan.ID)
		}
	})
	return clash
}

// terms are what a submit asks for, priced: the deadline (seconds from
// now; none for a best-effort job) and the price to hold — the deadline
// asked for, or the earliest one the budget pays, or for a best-effort
// job the budget, if it pays the run at today's prices.
func (p *pricing) terms(req *wire.SubmitRequest, now time.Time, kappa float64) (d float64, price money.Micro, err error) {
	switch {
	case req.BestEffort:
		// No deadline, no premium: the budget pays the run at the shares the
		// overlap order gives it; below the run's cost at today's prices it
		// would stall half way.
		if cost := money.Micro(math.Ceil(p.exec)); req.Budget < cost {
			return 0, 0, fmt.Errorf("%w: the run costs about %s at today's prices, the budget is %s", ErrUnaffordable, cost, req.Budget)
		}
		return 0, req.Budget, nil
	case !req.Deadline.IsZero():
		d = req.Deadline.Sub(now).Seconds()
		if d < p.earliest-1e-6 {
			return 0, 0, fmt.Errorf("%w: the earliest finish is %s (%.0f s from now)", ErrDeadline, at(now, p.earliest).Format(time.RFC3339), p.earliest)
		}
		if d > wire.MaxDuration.Seconds()/2 {
			return 0, 0, wire.Errorf(wire.ErrBadRequest, "deadline %s is too far", req.Deadline.Format(time.RFC3339))
		}
		return d, p.at(d, kappa), nil
	}
	// The price falls with the deadline: the earliest one the budget
	// pays, to the second, by bisection up to ten runs beyond.
	lo, hi := p.earliest, p.earliest+10*p.run+3600
	if p.at(hi, kappa) > req.Budget {
		return 0, 0, fmt.Errorf("%w: even a deadline %.0f s away costs %s, the budget is %s", ErrUnaffordable, hi, p.at(hi, kappa), req.Budget)
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
	return d, p.at(d, kappa), nil
}
