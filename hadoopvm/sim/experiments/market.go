package experiments

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/hadoopvm/sim"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// The market runs of lin's, mrm's and aria's workloads: the kind of trace
// the stand-alone models use, submitted through the broker for jobs on the
// simulator's hosts, so that what the models assume (a job served at any
// rate the policy gives it, a single server, slots granted exactly) meets
// slots, shares, ticks and the product's own estimates. Each is reported
// beside its model on the same trace (aria's: the same jobs, unscaled).

// The market world [recon]: 2-core hosts, each job on a VM of its own on
// every host (2 slots), a host network of 100 MB/s the reduces fetch their
// shuffle over, and a small CPU-hungry background VM spending at a constant
// rate, so the jobs' shares are bought against a price.
const (
	mktCores      = 2.0
	mktSlots      = 2
	mktNet        = 100.0  // MB/s into each host
	mktBackground = 0.02   // cores the background VM wants
	mktBgRate     = 1000.0 // its spending rate, micro-credits/s
	mktTask       = 30.0   // core-seconds of a lin map task; a lin reduce's fetch takes as long at its slot's part of the network
	mktUnit       = 60.0   // seconds of the whole cluster one unit of lin's work is
	mktTick       = 5 * time.Second
	// mktMaxJobs bounds a run's jobs: each has a VM on every host, and the
	// agents' floors (agent.FloorShare each, at most 10 % of a host for all
	// unfunded VMs) would shrink with more than 500 VMs on a host, changing
	// what a waiting job gets.
	mktMaxJobs = 500
)

// mktWorld is a market of simulated 2-core hosts, every job with a VM of
// its own on each: the broker runs in the simulation, fed the jobs'
// progress as the YARN monitor would (sim.ProgressFeed).
type mktWorld struct {
	s *sim.Sim
	b *broker.Broker
}

// mktVMs are job k's VMs, one per host.
func mktVMs(k, hosts int) []string {
	vms := make([]string, hosts)
	for h := range hosts {
		vms[h] = fmt.Sprintf("j%d-h%d", k, h)
	}
	return vms
}

func newMktWorld(seed uint64, hosts, jobs int, order string) (*mktWorld, error) {
	var hs []sim.HostSpec
	var vms []sim.VMSpec
	for h := range hosts {
		id := fmt.Sprint("h", h)
		hs = append(hs, sim.HostSpec{ID: id, Cores: mktCores, Net: mktNet, Background: mktBackground, BackgroundRate: mktBgRate})
		for k := range jobs {
			vms = append(vms, sim.VMSpec{ID: fmt.Sprintf("j%d-%s", k, id), Owner: "u", Host: id, Slots: mktSlots})
		}
	}
	s, err := sim.New(sim.Config{Seed: seed, Start: start, Tick: mktTick}, hs, vms)
	if err != nil {
		return nil, err
	}
	s.Ledger().Grant("u", 100_000_000*money.PerCredit)
	b, err := broker.New(broker.Config{Agents: s.Agents(), Bank: s.Ledger(), Now: s.Now, Tick: mktTick, Settle: 2 * mktTick,
		Serial: true, JobOrder: order, Replica: "market-experiment"})
	if err != nil {
		return nil, err
	}
	s.Attach(b)
	s.Observe(sim.ProgressFeed(b))
	return &mktWorld{s: s, b: b}, nil
}

// ---- lin-market ----

// linMarketParams are lin-market's settings.
type linMarketParams struct {
	Loads []float64 `json:"load" doc:"offered loads: arrival rate × mean map size, as lin (the paper: 0.75, 0.9)"`
	Jobs  int       `json:"jobs" doc:"jobs per trace (lin's model uses 100000; the market runs a few hundred)"`
	Hosts int       `json:"hosts" doc:"simulated 2-core hosts; every job has a 2-slot VM on each"`
	// Policies are the job orders run (the broker's: fifo, klps, maxsrpt,
	// splitsrpt); ratios to k-LPS need klps among them.
	Policies []string `json:"policies" doc:"job orders run through the market and the model (fifo, klps, maxsrpt, splitsrpt)"`
}

func (p *linMarketParams) check() error {
	if len(p.Policies) == 0 {
		return fmt.Errorf("policies needs at least one of %v", linMarketPolicies)
	}
	for i, x := range p.Policies {
		if !slices.Contains(linMarketPolicies, x) || slices.Contains(p.Policies[:i], x) {
			return fmt.Errorf("policy %q: want each of %v at most once", x, linMarketPolicies)
		}
	}
	lp := linParams{Loads: p.Loads, Jobs: max(p.Jobs, 10)}
	if err := lp.check(); err != nil {
		return err
	}
	return mktCheckSize(p.Jobs, p.Hosts)
}

// mktCheckSize refuses a market run's jobs or hosts out of range.
func mktCheckSize(jobs, hosts int) error {
	switch {
	case jobs < 10 || jobs > mktMaxJobs:
		return fmt.Errorf("jobs %d: want 10 … %d (each has VMs of its own on every host)", jobs, mktMaxJobs)
	case hosts < 1 || hosts > 32:
		return fmt.Errorf("hosts %d: want 1 … 32", hosts)
	}
	return nil
}

// linMarketPolicies are the job orders compared through the market.
var linMarketPolicies = []string{strategies.PolicyFIFO, strategies.PolicyKLPS, strategies.PolicyMaxSRPT, strategies.PolicySplitSRPT}

// linMarketJob is one job of the trace as the market runs it: whole map
// tasks and reduces, and the model's sizes in units of the same tasks.
type linMarketJob struct {
	arrive        float64 // units
	maps, reduces int
}

// linMarketTrace is lin's trace (linJobs: its first n jobs for the seed)
// in whole tasks [recon]: a unit of work (mean map size 1) is 4·hosts map
// tasks of 30 core-seconds — a minute of the whole cluster's cores — and
// as many reduces, each fetching a minute of its host's network at its
// share; sizes round to whole tasks, at least one of each (the model
// needs both stations' work).
func linMarketTrace(jobs []strategies.OverlapJob, hosts int) ([]linMarketJob, []strategies.OverlapJob) {
	per := float64(mktPerUnit(hosts))
	out, model := make([]linMarketJob, len(jobs)), make([]strategies.OverlapJob, len(jobs))
	for i, j := range jobs {
		m := max(1, int(math.Round(j.Map*per)))
		r := max(1, int(math.Round(j.Shuffle*per)))
		out[i] = linMarketJob{arrive: j.Release, maps: m, reduces: r}
		model[i] = strategies.OverlapJob{Release: j.Release, Map: float64(m) / per, Shuffle: float64(r) / per}
	}
	return out, model
}

// mktPerUnit is how many tasks a unit of lin's work is on hosts hosts.
func mktPerUnit(hosts int) int { return int(math.Round(mktUnit * mktCores * float64(hosts) / mktTask)) }

// mktShuffleMB is a reduce's fetch: mktTask seconds at its slot's part of
// the host network.
const mktShuffleMB = mktTask * mktNet / mktCores

// linMarketSpecs are the broker's and the simulator's view of job k: its
// ARIA profile says each task takes 30 s at its slot's full share (two
// slots on two cores, or on the network), so the broker's overlap work is
// the model's size in seconds.
func linMarketSpecs(k, hosts int, j linMarketJob) (wire.JobSpec, sim.JobSpec) {
	vms := mktVMs(k, hosts)
	name := fmt.Sprint("job-", k)
	slotTime := mktTask * mktSlots / mktCores
	spec := wire.JobSpec{Name: name, VMs: vms, Maps: j.maps, Reduces: j.reduces, MapSlots: mktSlots * hosts, ReduceSlots: mktSlots * hosts,
		Profile: strategies.JobProfile{MapAvg: slotTime, MapMax: 1.5 * slotTime}}
	sj := sim.JobSpec{ID: name, User: "u", Name: name, VMs: vms, Maps: j.maps, Map: sim.Dist{Mean: mktTask, CV: 0.2}, SlowStart: 0.05}
	if j.reduces > 0 {
		spec.Profile.ShTypAvg, spec.Profile.ShTypMax = slotTime, 1.5*slotTime
		spec.Profile.ReduceAvg, spec.Profile.ReduceMax = 0.2, 0.3
		sj.Reduces, sj.Reduce, sj.ShuffleMB = j.reduces, sim.Dist{Mean: 0.1}, mktShuffleMB
	}
	return spec, sj
}

// linMarketRun runs one trace through the market with job order order:
// each job's response in units, and how many jobs finished after their
// plan had ended (a best-effort plan runs ten predicted runs, at least an
// hour; after it the job bids nothing and runs on what is idle).
func linMarketRun(seed uint64, hosts int, jobs []linMarketJob, order string) ([]float64, int, error) {
	w, err := newMktWorld(seed, hosts, len(jobs), order)
	if err != nil {
		return nil, 0, err
	}
	ctx := context.Background()
	ends := make([]time.Time, len(jobs))
	for k, j := range jobs {
		at := start.Add(time.Duration(j.arrive * mktUnit * float64(time.Second)))
		if err := w.s.RunUntil(at); err != nil {
			return nil, 0, err
		}
		spec, sj := linMarketSpecs(k, hosts, j)
		rep, err := w.b.Submit(ctx, &wire.SubmitRequest{ID: fmt.Sprint("plan-", k), User: "u", Job: spec,
			Budget: 10_000 * money.PerCredit, BestEffort: true})
		if err != nil {
			return nil, 0, fmt.Errorf("job %d: %w", k, err)
		}
		ends[k] = rep.Plan.End
		sj.Submit = w.s.Now().Sub(start)
		if err := w.s.Submit(sj); err != nil {
			return nil, 0, err
		}
	}
	res, err := w.s.Run(10_000 * time.Hour)
	if err != nil {
		return nil, 0, err
	}
	out, over := make([]float64, len(res)), 0
	for i, r := range res {
		out[i] = r.Duration().Seconds() / mktUnit
		if r.Finish.After(ends[i]) {
			over++
		}
	}
	return out, over, nil
}

// meanOf is MeanSD's mean.
func meanOf(xs []float64) float64 {
	m, _ := MeanSD(xs)
	return m
}

func runLinMarket(ctx context.Context, cfg Config, step func() error) (Result, error) {
	var res Result
	par := paramsOf[linMarketParams](cfg)
	nan := math.NaN()
	type key struct {
		load   float64
		engine string
		policy string
	}
	got := map[key][]float64{}
	var minutes []float64
	for k := range cfg.Runs {
		for _, load := range par.Loads {
			rng := rand.New(rand.NewPCG(cfg.Seed+uint64(k)*7919, uint64(load*100)))
			jobs, model := linMarketTrace(linJobs(rng, par.Jobs, load), par.Hosts)
			for _, p := range par.Policies {
				done, err := strategies.SimulateOverlap(model, p)
				if err != nil {
					return res, err
				}
				sum := 0.0
				for i, d := range done {
					sum += d - model[i].Release
				}
				got[key{load, "model", p}] = append(got[key{load, "model", p}], sum/float64(len(model)))
				resp, over, err := linMarketRun(cfg.Seed+uint64(k)*7919, par.Hosts, jobs, p)
				if err != nil {
					return res, fmt.Errorf("%s at load %g: %w", p, load, err)
				}
				got[key{load, "market", p}] = append(got[key{load, "market", p}], meanOf(resp))
				got[key{load, "past plan", p}] = append(got[key{load, "past plan", p}], float64(over)/float64(len(resp)))
				if err := ctx.Err(); err != nil {
					return res, err
				}
			}
			minutes = append(minutes, jobs[len(jobs)-1].arrive)
		}
		if err := step(); err != nil {
			return res, err
		}
	}
	for _, load := range par.Loads {
		for _, p := range par.Policies {
			res.Rows = append(res.Rows,
				row(fmt.Sprintf("mean response, %s, load %g, market", p, load), nan, "", "", got[key{load, "market", p}]),
				row(fmt.Sprintf("mean response, %s, load %g, model on the same trace", p, load), nan, "", "", got[key{load, "model", p}]))
		}
		for _, p := range par.Policies {
			metric := fmt.Sprintf("jobs finishing after their plan ended, %s, load %g, market (no model counterpart)", p, load)
			res.Rows = append(res.Rows, row(metric, nan, "", "%", got[key{load, "past plan", p}]))
		}
		ratio := func(engine, p string) []float64 {
			var out []float64
			for i, v := range got[key{load, engine, p}] {
				out = append(out, v/got[key{load, engine, strategies.PolicyKLPS}][i])
			}
			return out
		}
		for _, p := range []string{strategies.PolicyMaxSRPT, strategies.PolicySplitSRPT, strategies.PolicyFIFO} {
			if !slices.Contains(par.Policies, p) || !slices.Contains(par.Policies, strategies.PolicyKLPS) {
				continue
			}
			res.Rows = append(res.Rows,
				row(fmt.Sprintf("%s / k-LPS, load %g, market", p, load), nan, "", "", ratio("market", p)),
				row(fmt.Sprintf("%s / k-LPS, load %g, model on the same trace", p, load), nan, "", "", ratio("model", p)))
		}
	}
	span, _ := MeanSD(minutes)
	res.Notes = notes("lin-market", map[string]any{"Jobs": par.Jobs, "Span": span, "Hosts": par.Hosts, "Unit": mktUnit,
		"PerUnit": mktPerUnit(par.Hosts), "Task": mktTask, "ShuffleMB": mktShuffleMB, "Net": mktNet, "Slots": mktSlots, "Tick": mktTick,
		"Background": mktBackground, "BgRate": mktBgRate})
	return res, nil
}

// ---- mrm-market ----

// mrmMarketParams are mrm-market's settings.
type mrmMarketParams struct {
	Gaps  []float64 `json:"gap" doc:"mean inter-arrival times in s (mrm-pricing's loads H, M, L: 50, 100, 200)"`
	Alpha float64   `json:"alpha" doc:"a delay-sensitive job's budget: α × the cheapest point of its quote (mrm's DS budget α·p̂; DT jobs pay the cheapest point)"`
	Jobs  int       `json:"jobs" doc:"jobs per trace"`
	Hosts int       `json:"hosts" doc:"simulated 2-core hosts; every job has a 2-slot VM on each"`
}

func (p *mrmMarketParams) check() error {
	pr := mrmPricingParams{Alphas: []float64{p.Alpha}, Gaps: p.Gaps, Jobs: p.Jobs}
	if err := pr.check(); err != nil {
		return err
	}
	return mktCheckSize(p.Jobs, p.Hosts)
}

// mrmMarketOutcome is one trace through the market.
type mrmMarketOutcome struct {
	admitted, late, paidOverPrice, premium, wait float64
	over                                         float64 // mean s a late job finished after its deadline (0: none late)
	// margin is the median factor admission planned a job's estimate
	// with (its work over the estimate's upper bound), credits the mean
	// price held per admitted job.
	margin, credits float64
	// beyond is the % of admitted jobs with more maps than any job done
	// when they were quoted (the estimate extrapolates), lateBeyond and
	// lateWithin the % late of those and of the others.
	beyond, lateBeyond, lateWithin float64
}

// mrmMarketSpecs is the broker's and the simulator's view of job k of true
// processing time p s (at the whole cluster): map-only, max(1, p·cores/30)
// tasks of 30 core-seconds [recon].
func mrmMarketSpecs(k, hosts int, p float64) (wire.JobSpec, sim.JobSpec) {
	vms := mktVMs(k, hosts)
	name := fmt.Sprint("job-", k)
	maps := max(1, int(math.Round(p*mktCores*float64(hosts)/mktTask)))
	slotTime := mktTask * mktSlots / mktCores
	spec := wire.JobSpec{Name: name, VMs: vms, Maps: maps, MapSlots: mktSlots * hosts,
		Profile: strategies.JobProfile{MapAvg: slotTime, MapMax: 1.5 * slotTime}}
	return spec, sim.JobSpec{ID: name, User: "u", Name: name, VMs: vms, Maps: maps, Map: sim.Dist{Mean: mktTask, CV: 0.2}}
}

func mrmMarketRun(seed uint64, hosts int, jobs []mrmJob, alpha float64) (mrmMarketOutcome, error) {
	var out mrmMarketOutcome
	w, err := newMktWorld(seed, hosts, len(jobs), "")
	if err != nil {
		return out, err
	}
	ctx := context.Background()
	type adm struct {
		deadline time.Time
		price    money.Micro
		cheapest money.Micro
		beyond   bool // more maps than any job done when it was quoted
	}
	admitted := map[string]adm{}
	var waits, margins, credits []float64
	mapsOf := map[string]int{}
	for k, j := range jobs {
		if err := w.s.RunUntil(start.Add(time.Duration(j.arrive * float64(time.Second)))); err != nil {
			return out, err
		}
		spec, sj := mrmMarketSpecs(k, hosts, j.p)
		mapsOf[spec.Name] = spec.Maps
		seen := 0
		for _, d := range w.b.Jobs(&wire.JobsRequest{User: "u"}).Jobs {
			if d.Status == wire.JobDone || d.Status == wire.JobLate && !d.Finished.IsZero() {
				seen = max(seen, mapsOf[d.Name])
			}
		}
		q, err := w.b.Quote(ctx, &wire.QuoteRequest{User: "u", Job: spec})
		if err != nil {
			return out, fmt.Errorf("quote %d: %w", k, err)
		}
		if len(q.Curve) == 0 {
			continue
		}
		cheapest := q.Curve[len(q.Curve)-1].Price
		budget := cheapest
		if j.ds {
			budget = money.Micro(math.Floor(alpha * float64(cheapest)))
		}
		rep, err := w.b.Submit(ctx, &wire.SubmitRequest{ID: fmt.Sprint("plan-", k), User: "u", Job: spec, Budget: budget})
		if err != nil {
			if errors.Is(err, broker.ErrUnaffordable) || errors.Is(err, broker.ErrDeadline) {
				continue // refused: not admitted
			}
			return out, fmt.Errorf("submit %d: %w", k, err)
		}
		admitted[spec.Name] = adm{rep.Job.Deadline, rep.Job.Price, cheapest, seen > 0 && spec.Maps > seen}
		waits = append(waits, rep.Job.Deadline.Sub(w.s.Now()).Seconds())
		// A map-only job's upper bound is its map estimate's, mean + 1.64 sd
		// (broker.estimate), so what the work adds to it is the margin.
		margins = append(margins, q.Work/(q.Mean+1.64*q.SD))
		credits = append(credits, rep.Job.Price.Credits())
		sj.Submit = w.s.Now().Sub(start)
		if err := w.s.Submit(sj); err != nil {
			return out, err
		}
	}
	res, err := w.s.Run(10_000 * time.Hour)
	if err != nil {
		return out, err
	}
	if err := w.s.RunUntil(w.s.Now().Add(time.Minute)); err != nil { // the plans settle
		return out, err
	}
	spent := map[string]money.Micro{}
	for _, j := range w.b.Jobs(&wire.JobsRequest{User: "u"}).Jobs {
		spent[j.Name] = j.Spent
	}
	var late int
	var paid, prem, over []float64
	var n, l [2]int // admitted and late, within [0] and beyond [1] what was done when quoted
	for _, r := range res {
		a := admitted[r.ID]
		b := 0
		if a.beyond {
			b = 1
		}
		n[b]++
		if r.Finish.After(a.deadline) {
			l[b]++
			late++
			over = append(over, r.Finish.Sub(a.deadline).Seconds())
		}
		if a.price > 0 {
			paid = append(paid, float64(spent[r.ID])/float64(a.price))
			prem = append(prem, float64(a.price)/float64(a.cheapest))
		}
	}
	out.admitted = 100 * float64(len(admitted)) / float64(len(jobs))
	if len(admitted) > 0 {
		out.late = 100 * float64(late) / float64(len(admitted))
		out.paidOverPrice = meanOf(paid)
		out.premium = mrmMedian(prem)
		out.wait = mrmMedian(waits)
		out.margin = mrmMedian(margins)
		out.credits = meanOf(credits)
	}
	if len(over) > 0 {
		out.over = meanOf(over)
	}
	if len(admitted) > 0 {
		out.beyond = 100 * float64(n[1]) / float64(len(admitted))
	}
	if n[0] > 0 {
		out.lateWithin = 100 * float64(l[0]) / float64(n[0])
	}
	if n[1] > 0 {
		out.lateBeyond = 100 * float64(l[1]) / float64(n[1])
	}
	return out, nil
}

func runMRMMarket(ctx context.Context, cfg Config, step func() error) (Result, error) {
	var res Result
	par := paramsOf[mrmMarketParams](cfg)
	nan := math.NaN()
	got := map[string][]float64{}
	add := func(gap float64, name string, v float64) {
		k := fmt.Sprint(gap, name)
		got[k] = append(got[k], v)
	}
	for k := range cfg.Runs {
		for gi, gap := range par.Gaps {
			jobs := mrmTrace(mrmRNG(cfg.Seed, k, 200+uint64(gi)), par.Jobs, gap)
			o, err := mrmMarketRun(cfg.Seed+uint64(k)*7919, par.Hosts, jobs, par.Alpha)
			if err != nil {
				return res, fmt.Errorf("gap %g: %w", gap, err)
			}
			add(gap, "admitted", o.admitted/100)
			add(gap, "late", o.late/100)
			add(gap, "over", o.over)
			add(gap, "beyond", o.beyond/100)
			add(gap, "late beyond", o.lateBeyond/100)
			add(gap, "late within", o.lateWithin/100)
			add(gap, "paid", o.paidOverPrice)
			add(gap, "premium", o.premium)
			add(gap, "window", o.wait)
			add(gap, "margin", o.margin)
			add(gap, "credits", o.credits)
			m, err := mrmSimulate(jobs, par.Alpha, mrmGammaBar(jobs))
			if err != nil {
				return res, err
			}
			add(gap, "model late", mrmLate(jobs, m, func(mrmJob) bool { return true })/100)
			var win, prem, over []float64
			for i, j := range jobs {
				win = append(win, m.deadline[i]-j.arrive)
				prem = append(prem, m.price[i]/j.est)
				if m.finish[i] > m.deadline[i]+1e-6 {
					over = append(over, m.finish[i]-m.deadline[i])
				}
			}
			mo := 0.0
			if len(over) > 0 {
				mo = meanOf(over)
			}
			add(gap, "model over", mo)
			add(gap, "model window", mrmMedian(win))
			add(gap, "model premium", mrmMedian(prem))
		}
		if err := step(); err != nil {
			return res, err
		}
	}
	for _, gap := range par.Gaps {
		tag := fmt.Sprintf("gap %g s, α=%g", gap, par.Alpha)
		g := func(name string) []float64 { return got[fmt.Sprint(gap, name)] }
		res.Rows = append(res.Rows,
			row("admitted jobs, market (each budget pays its quote's cheapest point, so a refusal would be the broker's; "+
				"the model admits every job: no counterpart), "+tag, nan, "", "%", g("admitted")),
			row("admitted jobs finishing after their deadline, market, "+tag, nan, "", "%", g("late")),
			row("jobs finishing after their deadline, model on the same trace, "+tag, nan, "", "%", g("model late")),
			row("admitted jobs with more maps than every job done when quoted (some done), market, "+tag, nan, "", "%", g("beyond")),
			row("… of those, finishing after their deadline, market (0 if none), "+tag, nan, "", "%", g("late beyond")),
			row("… of the others, finishing after their deadline, market, "+tag, nan, "", "%", g("late within")),
			row("mean s a late job is late, market (0: none late), "+tag, nan, "", "", g("over")),
			row("mean s a late job is late, model on the same trace (0: none late), "+tag, nan, "", "", g("model over")),
			row("median deadline − arrival, s, market, "+tag, nan, "", "", g("window")),
			row("median deadline − arrival, s, model on the same trace, "+tag, nan, "", "", g("model window")),
			row("median safety margin admission planned with (work over the estimate's upper bound), market, "+tag, nan, "", "", g("margin")),
			row("mean price held per admitted job, credits, market, "+tag, nan, "", "", g("credits")),
			row("mean paid / price held, market (the model pays its price: no counterpart), "+tag, nan, "", "", g("paid")),
			row("median price / the quote's cheapest point, market, "+tag, nan, "", "", g("premium")),
			row("median price / p̂, model (a different base from the market's row), "+tag, nan, "", "", g("model premium")))
	}
	res.Notes = notes("mrm-market", map[string]any{"Jobs": par.Jobs, "MeanP": mrmMeanP, "Hosts": par.Hosts, "Alpha": par.Alpha,
		"Task": mktTask, "Slots": mktSlots, "Background": mktBackground, "BgRate": mktBgRate, "Tick": mktTick})
	return res, nil
}

// ---- aria-market ----

// ariaMarketParams are aria-market's settings.
type ariaMarketParams struct {
	Gaps  []float64 `json:"gap" doc:"mean inter-arrival times in s (Poisson; aria spawns by a load threshold instead)"`
	Jobs  int       `json:"jobs" doc:"jobs per run (aria: 100)"`
	Hosts int       `json:"hosts" doc:"simulated 2-core hosts; every job has a 2-slot VM on each"`
}

func (p *ariaMarketParams) check() error {
	for _, g := range p.Gaps {
		if !(g > 0 && g <= 1e6) {
			return fmt.Errorf("gap %g: want 0 < gap ≤ 1e6 s", g)
		}
	}
	if len(p.Gaps) == 0 {
		return fmt.Errorf("gap needs at least one value")
	}
	return mktCheckSize(p.Jobs, p.Hosts)
}

// ariaMarketJob is one of aria's W2 jobs scaled to the market's cluster
// [recon]: its task counts divided by the slot ratio (aria's 256 map
// slots over the market's), at least one each; its deadline the same
// multiple of its time alone as the unscaled job's.
type ariaMarketJob struct {
	arrive, rel   float64
	slack         float64 // the deadline over the time alone: U[1, 3]
	maps, reduces int
}

// ariaMarketTask are W2's task means and sds (s): maps N(100, 20), reduces N(300, 30).
const (
	ariaMarketMap, ariaMarketMapSD       = 100.0, 20.0
	ariaMarketReduce, ariaMarketReduceSD = 300.0, 30.0
)

func ariaMarketTrace(rng *rand.Rand, jobs []ariaJob, gap float64, hosts, ariaSlots int) []ariaMarketJob {
	slots := mktSlots * hosts
	ratio := float64(ariaSlots) / float64(slots)
	out := make([]ariaMarketJob, len(jobs))
	t := 0.0
	for i, j := range jobs {
		t += rng.ExpFloat64() * gap
		m := max(1, int(math.Round(float64(len(j.maps))/ratio)))
		r := max(1, int(math.Round(float64(len(j.reds))/ratio)))
		alone := math.Ceil(float64(m)/float64(slots))*ariaMarketMap + math.Ceil(float64(r)/float64(slots))*ariaMarketReduce
		out[i] = ariaMarketJob{arrive: t, rel: alone * j.rel / j.alone, slack: j.rel / j.alone, maps: m, reduces: r}
	}
	return out
}

// ariaMarketSpecs is job k: map tasks of 100 core-seconds, reduces of 300
// (one core per slot), reduces after the maps (aria §7.2), and the
// profile's averages and maxima at mean + 2 sd [recon].
func ariaMarketSpecs(k, hosts int, j ariaMarketJob) (wire.JobSpec, sim.JobSpec) {
	vms := mktVMs(k, hosts)
	name := fmt.Sprint("job-", k)
	per := mktSlots / mktCores // seconds of a slot per core-second
	spec := wire.JobSpec{Name: name, VMs: vms, Maps: j.maps, Reduces: j.reduces, MapSlots: mktSlots * hosts, ReduceSlots: mktSlots * hosts,
		Profile: strategies.JobProfile{MapAvg: ariaMarketMap * per, MapMax: (ariaMarketMap + 2*ariaMarketMapSD) * per,
			ReduceAvg: ariaMarketReduce * per, ReduceMax: (ariaMarketReduce + 2*ariaMarketReduceSD) * per}}
	return spec, sim.JobSpec{ID: name, User: "u", Name: name, VMs: vms, Maps: j.maps, Reduces: j.reduces,
		Map: sim.Dist{Mean: ariaMarketMap, CV: ariaMarketMapSD / ariaMarketMap}, Reduce: sim.Dist{Mean: ariaMarketReduce, CV: ariaMarketReduceSD / ariaMarketReduce}}
}

// ariaMarketOutcome is one run through the market: % admitted, % of the
// admitted that missed, and aria's relative deadline exceeded over them (%).
// slackIn and slackOut are the median deadline / time alone of the jobs
// admitted and refused (NaN: none).
type ariaMarketOutcome struct{ admitted, missed, exceeded, slackIn, slackOut float64 }

func ariaMarketRun(seed uint64, hosts int, jobs []ariaMarketJob) (ariaMarketOutcome, error) {
	var out ariaMarketOutcome
	w, err := newMktWorld(seed, hosts, len(jobs), "")
	if err != nil {
		return out, err
	}
	ctx := context.Background()
	deadline := map[string]time.Time{}
	rel := map[string]float64{}
	var in, refused []float64
	for k, j := range jobs {
		if err := w.s.RunUntil(start.Add(time.Duration(j.arrive * float64(time.Second)))); err != nil {
			return out, err
		}
		spec, sj := ariaMarketSpecs(k, hosts, j)
		d := w.s.Now().Add(time.Duration(j.rel * float64(time.Second))).Truncate(time.Second)
		if _, err := w.b.Submit(ctx, &wire.SubmitRequest{ID: fmt.Sprint("plan-", k), User: "u", Job: spec, Deadline: d}); err != nil {
			if errors.Is(err, broker.ErrUnaffordable) || errors.Is(err, broker.ErrDeadline) {
				refused = append(refused, j.slack)
				continue // refused: not admitted
			}
			return out, fmt.Errorf("submit %d: %w", k, err)
		}
		in = append(in, j.slack)
		deadline[spec.Name], rel[spec.Name] = d, d.Sub(w.s.Now()).Seconds()
		sj.Submit = w.s.Now().Sub(start)
		if err := w.s.Submit(sj); err != nil {
			return out, err
		}
	}
	res, err := w.s.Run(10_000 * time.Hour)
	if err != nil {
		return out, err
	}
	missed := 0
	for _, r := range res {
		if r.Finish.After(deadline[r.ID]) {
			missed++
			out.exceeded += 100 * (r.Finish.Sub(deadline[r.ID]).Seconds()) / rel[r.ID]
		}
	}
	out.admitted = 100 * float64(len(deadline)) / float64(len(jobs))
	if len(deadline) > 0 {
		out.missed = 100 * float64(missed) / float64(len(deadline))
	}
	out.slackIn, out.slackOut = math.NaN(), math.NaN()
	if len(in) > 0 {
		out.slackIn = mrmMedian(in)
	}
	if len(refused) > 0 {
		out.slackOut = mrmMedian(refused)
	}
	return out, nil
}

func runARIAMarket(ctx context.Context, cfg Config, step func() error) (Result, error) {
	var res Result
	par := paramsOf[ariaMarketParams](cfg)
	nan := math.NaN()
	got := map[string][]float64{}
	add := func(name string, v float64) {
		if !math.IsNaN(v) {
			got[name] = append(got[name], v)
		}
	}
	aria := ariaDefaults()
	model := ariaVariants(aria)[0]
	for k := range cfg.Runs {
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(k)<<4|2)) // aria's W2 jobs of run k
		raw := ariaJobs(rng, 2, par.Jobs, model.slots)
		for gi, gap := range par.Gaps {
			jobs := ariaMarketTrace(rand.New(rand.NewPCG(cfg.Seed+uint64(k)*7919, 0x61726961+uint64(gi))), raw, gap, par.Hosts, model.slots)
			o, err := ariaMarketRun(cfg.Seed+uint64(k)*7919, par.Hosts, jobs)
			if err != nil {
				return res, fmt.Errorf("gap %g: %w", gap, err)
			}
			g := fmt.Sprint(gap)
			add(g+"admitted", o.admitted/100)
			add(g+"missed", o.missed/100)
			add(g+"exceeded", o.exceeded/100)
			add(g+"slack in", o.slackIn)
			add(g+"slack out", o.slackOut)
		}
		m, err := ariaSimulate(raw, 1, model)
		if err != nil {
			return res, err
		}
		add("model missed", float64(m.missed)/float64(len(raw)))
		add("model exceeded", m.exceeded/100)
		if err := step(); err != nil {
			return res, err
		}
	}
	for _, gap := range par.Gaps {
		tag, g := fmt.Sprintf("W2, gap %g s", gap), fmt.Sprint(gap)
		res.Rows = append(res.Rows,
			row("admitted jobs, market (aria admits every job: no counterpart), "+tag, nan, "", "%", got[g+"admitted"]),
			row("median deadline / time alone of the admitted jobs, market, "+tag, nan, "", "", got[g+"slack in"]),
			row("median deadline / time alone of the refused jobs, market (runs with none refused left out), "+tag, nan, "", "", got[g+"slack out"]),
			row("admitted jobs missing their deadline, market, "+tag, nan, "", "%", got[g+"missed"]),
			row("relative deadline exceeded, market, "+tag, nan, "", "%", got[g+"exceeded"]))
	}
	res.Rows = append(res.Rows,
		row("jobs missing their deadline, aria's model on the same jobs unscaled (its cluster, threshold arrivals at 100 %), W2", nan, "", "%", got["model missed"]),
		row("relative deadline exceeded, aria's model on the same jobs unscaled (threshold 100 %), W2", nan, "", "%", got["model exceeded"]))
	res.Notes = notes("aria-market", map[string]any{"Jobs": par.Jobs, "Hosts": par.Hosts, "Slots": mktSlots * par.Hosts})
	return res, nil
}

func init() {
	register(Experiment{Name: "lin-market",
		Title: "Lin's policies through the market: mean response of FIFO, k-LPS, MaxSRPT and SplitSRPT as the broker's job order " +
			"on simulated hosts, beside the model on the same trace",
		Source: "seed 001 §5.3", Engine: EngineMarket, DefaultRuns: 2, Steps: func(n int) int { return n }, run: runLinMarket,
		params: func() any {
			return &linMarketParams{Loads: []float64{0.75, 0.9}, Jobs: 150, Hosts: 4, Policies: linMarketPolicies}
		},
		quick: map[string]string{"jobs": "30", "load": "0.9"}})
	register(Experiment{Name: "mrm-market",
		Title: "MRM pricing through the market: deadline jobs quoted, admitted and run by the broker on simulated hosts, " +
			"beside the model on the same trace",
		Source: "seed 000 §6.3", Engine: EngineMarket, DefaultRuns: 3, Steps: func(n int) int { return n }, run: runMRMMarket,
		params: func() any { return &mrmMarketParams{Gaps: []float64{50, 100}, Alpha: 2, Jobs: 100, Hosts: 4} },
		quick:  map[string]string{"jobs": "40", "gap": "100"}})
	register(Experiment{Name: "aria-market",
		Title:  "ARIA's deadline jobs through the market: admitted by MRM, run by EDF and ARIA's control loop on simulated hosts",
		Source: "seed 004 §7.2", Engine: EngineMarket, DefaultRuns: 5, Steps: func(n int) int { return n }, run: runARIAMarket,
		params: func() any { return &ariaMarketParams{Gaps: []float64{150, 300, 600}, Jobs: 100, Hosts: 4} },
		quick:  map[string]string{"jobs": "30", "gap": "300"}})
}

// ariaDefaults are the aria experiment's settings at their defaults: the
// jobs, cluster and model aria-market sets beside the market.
func ariaDefaults() *ariaParams {
	e, err := Get("aria")
	if err != nil {
		panic(err)
	}
	return e.params().(*ariaParams)
}
