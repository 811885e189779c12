package experiments

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"github.com/mrmarket/mrmarket/strategies"
)

// MRM §6.3: its trace simulation on a single server. Reconstructions
// where the paper is silent are marked [recon] and repeated in the Notes.

const (
	mrmKappa   = 2.0  // κ, §6.3
	mrmSigma   = 4.8  // estimation noise sd (s), §6.3
	mrmZ       = 1.64 // one-sided 95 % PI, §6.3 ("95 % PI upper limit")
	mrmMeanP   = 48.0 // mean true processing time (s): σ = 4.8 s is "10 % of the average job duration"
	mrmJobs    = 1000 // jobs per configuration and run
	mrmSlotsPW = 80.0 // map (and reduce) slots of the 40-server cluster: 2 per server
)

// mrmBins is Table 1: share of jobs, map range, reduces.
var mrmBins = []struct {
	share        float64
	mapLo, mapHi int
	reduces      int
}{
	{0.38, 1, 1, 0}, {0.16, 2, 6, 0}, {0.14, 7, 30, 0}, {0.08, 31, 60, 6}, {0.06, 61, 120, 12},
	{0.06, 121, 180, 15}, {0.04, 181, 240, 18}, {0.04, 241, 360, 24}, {0.04, 361, 480, 30},
}

// mrmWork is a job's size in "waves" [recon]: the paper gives no map→seconds
// rule, so a job costs one wave of fixed overhead plus its maps and reduces
// spread over the cluster's 80 map and 80 reduce slots (fractional waves).
func mrmWork(maps, reduces int) float64 {
	return 1 + float64(maps)/mrmSlotsPW + float64(reduces)/mrmSlotsPW
}

// mrmSecPerWave scales waves to seconds so the mean true processing time is
// mrmMeanP (the expectation over Table 1, computed exactly).
var mrmSecPerWave = func() float64 {
	m := 0.0
	for _, b := range mrmBins {
		mm := float64(b.mapLo+b.mapHi) / 2
		m += b.share * (1 + mm/mrmSlotsPW + float64(b.reduces)/mrmSlotsPW)
	}
	return mrmMeanP / m
}()

// mrmJob is one job of the trace.
type mrmJob struct {
	arrive, p, est float64 // true and estimated (PI upper bound) processing time
	ds             bool    // delay-sensitive
}

// mrmTrace draws n jobs: Poisson arrivals with mean gap, sizes from Table 1,
// half delay-sensitive (a fair coin per job [recon]), estimate p̂ = p + ε +
// 1.64σ with ε ~ N(0, σ²) [recon: the paper's "negative error for ≈95 % of
// jobs" read as the one-sided 95 % upper bound of a noisy estimate].
func mrmTrace(rng *rand.Rand, n int, gap float64) []mrmJob {
	jobs := make([]mrmJob, n)
	t := 0.0
	for i := range jobs {
		t += rng.ExpFloat64() * gap
		u, b := rng.Float64(), mrmBins[len(mrmBins)-1]
		for _, x := range mrmBins {
			if u < x.share {
				b = x
				break
			}
			u -= x.share
		}
		maps := b.mapLo + rng.IntN(b.mapHi-b.mapLo+1)
		p := mrmSecPerWave * mrmWork(maps, b.reduces)
		est := math.Max(p+mrmSigma*rng.NormFloat64()+mrmZ*mrmSigma, 1)
		jobs[i] = mrmJob{arrive: t, p: p, est: est, ds: rng.IntN(2) == 0}
	}
	return jobs
}

// mrmActive is an admitted, unfinished job.
type mrmActive struct {
	idx           int
	left, estLeft float64 // true and estimated remaining work
	deadline      float64
}

// mrmOutcome is one simulated trace's per-job results.
type mrmOutcome struct {
	finish, deadline, slack, price []float64
	sawDT                          []bool // a DT job was unfinished when it arrived
}

// mrmQueue is the committed jobs as MRM sees them: estimated remaining work
// and deadlines, a late job's deadline pushed to when EDF on the estimates
// would finish it [recon: the paper does not say how MRM quotes behind an
// overrun job; strategies.EarliestFinish refuses an infeasible queue].
func mrmQueue(now float64, act []*mrmActive) []strategies.Queued {
	q := make([]strategies.Queued, len(act))
	for i, a := range act {
		q[i] = strategies.Queued{Work: a.estLeft, Deadline: a.deadline}
	}
	sort.SliceStable(q, func(i, j int) bool { return q[i].Deadline < q[j].Deadline })
	cum := 0.0
	for i := range q {
		cum += q[i].Work
		q[i].Deadline = math.Max(q[i].Deadline, now+cum)
	}
	return q
}

// mrmQuote is the earliest deadline whose MRM price (Eq. 13) fits budget.
// Between consecutive queued deadlines the price falls with the deadline, so
// each such piece's earliest affordable point is found by bisection; the
// candidates form a price curve from which strategies.Cheapest picks.
func mrmQuote(now float64, q []strategies.Queued, p, budget, gammaBar float64) (strategies.Quote, error) {
	first, err := strategies.PriceCurve(now, q, p, mrmKappa, gammaBar, 1, 1)
	if err != nil {
		return strategies.Quote{}, err
	}
	budget *= 1 + 1e-9
	if first[0].Price <= budget {
		return first[0], nil
	}
	price := func(d float64) float64 { return strategies.MRMPrice(now, q, p, d, mrmKappa, gammaBar) }
	work, last := 0.0, first[0].Deadline
	for _, j := range q {
		work += j.Work
		last = math.Max(last, j.Deadline)
	}
	// At or after every queued deadline nothing is jumped: price κp/(δ+1).
	far := math.Max(last, now+work+p) + gammaBar*math.Max(mrmKappa*p/budget-1, 0) + 1
	cuts := []float64{first[0].Deadline}
	for _, j := range q {
		if j.Deadline > first[0].Deadline {
			cuts = append(cuts, j.Deadline)
		}
	}
	sort.Float64s(cuts)
	cuts = append(cuts, far)
	var curve []strategies.Quote
	for i := 0; i+1 < len(cuts); i++ {
		lo, hi := cuts[i], cuts[i+1]
		if hi-lo < 1e-6 {
			continue
		}
		end := hi - 1e-6
		if i+2 == len(cuts) {
			end = hi
		}
		if price(end) > budget {
			continue
		}
		for hi-lo > 1e-3 {
			mid := (lo + hi) / 2
			if price(mid) <= budget {
				hi = mid
			} else {
				lo = mid
			}
		}
		if hi > end {
			hi = end
		}
		curve = append(curve, strategies.Quote{Deadline: hi, Price: price(hi)})
		break
	}
	if c, ok := strategies.Cheapest(curve, budget); ok {
		return c, nil
	}
	return strategies.Quote{Deadline: far, Price: price(far)}, nil
}

// mrmSimulate runs MRM on one trace: each arrival is quoted against the
// committed queue (estimates), buys the earliest deadline it can afford
// (DS: α·p̂, DT: p̂), and the server runs preemptive EDF on the committed
// deadlines with the true processing times.
func mrmSimulate(jobs []mrmJob, alpha, gammaBar float64) (mrmOutcome, error) {
	n := len(jobs)
	out := mrmOutcome{finish: make([]float64, n), deadline: make([]float64, n), slack: make([]float64, n),
		price: make([]float64, n), sawDT: make([]bool, n)}
	var act []*mrmActive
	now := 0.0
	advance := func(until float64) {
		for len(act) > 0 && now < until {
			k := 0
			for i, a := range act {
				if a.deadline < act[k].deadline || (a.deadline == act[k].deadline && a.idx < act[k].idx) {
					k = i
				}
			}
			a := act[k]
			run := math.Min(a.left, until-now)
			now += run
			a.left -= run
			a.estLeft = math.Max(a.estLeft-run, 0)
			if a.left <= 1e-9 {
				out.finish[a.idx] = now
				act = append(act[:k], act[k+1:]...)
			}
		}
		now = math.Max(now, until)
	}
	for i, j := range jobs {
		advance(j.arrive)
		q := mrmQueue(now, act)
		budget := j.est
		if j.ds {
			budget = alpha * j.est
		}
		qt, err := mrmQuote(now, q, j.est, budget, gammaBar)
		if err != nil {
			return out, err
		}
		with := append(q, strategies.Queued{Work: j.est, Deadline: qt.Deadline})
		out.slack[i] = math.Max(strategies.Slack(now, with, len(with)-1, gammaBar)*gammaBar, 0)
		out.deadline[i], out.price[i] = qt.Deadline, qt.Price
		for _, a := range act {
			if !jobs[a.idx].ds {
				out.sawDT[i] = true
			}
		}
		act = append(act, &mrmActive{idx: i, left: j.p, estLeft: j.est, deadline: qt.Deadline})
	}
	advance(math.Inf(1))
	return out, nil
}

// mrmNonPreemptive runs FCFS (priority false) or non-preemptive priority
// with DS jobs first (FCFS within a class). Each job is promised the finish
// the scheduler predicts at its arrival from the estimates [recon: the paper
// does not say how baseline jobs get deadlines; §3 has FCFS promise its
// predicted sojourn]: the running job's estimated remainder plus the queued
// jobs served before it.
func mrmNonPreemptive(jobs []mrmJob, priority bool) mrmOutcome {
	n := len(jobs)
	out := mrmOutcome{finish: make([]float64, n), deadline: make([]float64, n), sawDT: make([]bool, n)}
	var waiting []int
	busyUntil, estUntil := 0.0, 0.0 // true and estimated end of the running job
	next, running := 0, -1
	start := func(t float64) {
		k := 0
		if priority {
			for i, w := range waiting {
				if jobs[w].ds && !jobs[waiting[k]].ds {
					k = i
				}
			}
		}
		w := waiting[k]
		waiting = append(waiting[:k], waiting[k+1:]...)
		busyUntil, estUntil, running = t+jobs[w].p, t+jobs[w].est, w
		out.finish[w] = busyUntil
	}
	for next < n || len(waiting) > 0 {
		if next < n && (len(waiting) == 0 || jobs[next].arrive < busyUntil) {
			j := jobs[next]
			now := j.arrive
			pred := 0.0
			if now < busyUntil {
				pred = math.Max(estUntil-now, 0)
				out.sawDT[next] = !jobs[running].ds
			}
			for _, w := range waiting {
				if !jobs[w].ds {
					out.sawDT[next] = true
				}
				if !priority || jobs[w].ds || !j.ds {
					pred += jobs[w].est
				}
			}
			out.deadline[next] = now + pred + j.est
			waiting = append(waiting, next)
			next++
			if now >= busyUntil {
				start(now)
			}
			continue
		}
		start(busyUntil)
	}
	return out
}

// mrmMedian is the median of xs (0 for none).
func mrmMedian(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// mrmGammaBar is γ̄: the mean estimated processing time of the trace.
func mrmGammaBar(jobs []mrmJob) float64 {
	s := 0.0
	for _, j := range jobs {
		s += j.est
	}
	return s / float64(len(jobs))
}

// mrmRNG is the generator of run k, trace salt.
func mrmRNG(seed uint64, k int, salt uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed+uint64(k)*7919, 0x6d726d00+salt))
}

// mrmLate is the percentage of the selected jobs that finished after their deadline.
func mrmLate(jobs []mrmJob, o mrmOutcome, keep func(mrmJob) bool) float64 {
	late, all := 0, 0
	for i, j := range jobs {
		if keep(j) {
			all++
			if o.finish[i] > o.deadline[i]+1e-6 {
				late++
			}
		}
	}
	if all == 0 {
		return 0
	}
	return 100 * float64(late) / float64(all)
}

func mrmNaN(v float64) (float64, string) {
	if math.IsNaN(v) {
		return v, ""
	}
	return v, fmt.Sprintf("%g", v)
}

func init() {
	register(Experiment{Name: "mrm-pricing", Title: "MRM pricing: tardy jobs, slack and premium vs α and load",
		Source: "Moshref et al. §6.3, Tables 5–8", Engine: EngineModel, DefaultRuns: 10, Steps: func(n int) int { return n }, run: runMRMPricing,
		params: func() any {
			return &mrmPricingParams{Alphas: []float64{2, 1.5, 1.1}, Gaps: []float64{50, 100, 200}, Jobs: mrmJobs}
		}})
	register(Experiment{Name: "mrm-baselines", Title: "MRM vs FCFS and priority scheduling: deadline violations and DS jobs jumping ahead",
		Source: "Moshref et al. §6.3", Engine: EngineModel, DefaultRuns: 10, Steps: func(n int) int { return n }, run: runMRMBaselines,
		params: func() any { return &mrmBaselinesParams{Gaps: []float64{40, 50}, Alpha: 2, Jobs: mrmJobs} }})
}

// mrmPricingParams are mrm-pricing's settings (`sim run mrm-pricing --set
// alpha=1.2,3`). The paper's figures are shown where α and the gap are
// the paper's own.
type mrmPricingParams struct {
	Alphas []float64 `json:"alpha" doc:"DS budget multipliers α: a DS job's budget is α·p̂ (the paper: 2, 1.5, 1.1)"`
	Gaps   []float64 `json:"gap" doc:"mean inter-arrival times in s (the paper's loads H, M, L: 50, 100, 200)"`
	Jobs   int       `json:"jobs" doc:"jobs per trace (configuration and run)"`
}

func (p *mrmPricingParams) check() error {
	for _, a := range p.Alphas {
		if !(a >= 1 && a <= 100) {
			return fmt.Errorf("alpha %g: want 1 ≤ α ≤ 100 (a DS job pays at least its estimate)", a)
		}
	}
	for _, g := range p.Gaps {
		if !(g > 0 && g <= 1e6) {
			return fmt.Errorf("gap %g: want 0 < gap ≤ 1e6 s", g)
		}
	}
	switch {
	case len(p.Alphas) == 0 || len(p.Gaps) == 0:
		return fmt.Errorf("alpha and gap need at least one value each")
	case p.Jobs < 10 || p.Jobs > 100_000:
		return fmt.Errorf("jobs %d: want 10 … 100000", p.Jobs)
	}
	return nil
}

// mrmBaselinesParams are mrm-baselines' settings. The paper's figures are
// shown for its own setting (α = 2; 40 s for the jumps).
type mrmBaselinesParams struct {
	Gaps  []float64 `json:"gap" doc:"mean inter-arrival times in s; jumps ahead are counted at the first (the paper: 40, 50)"`
	Alpha float64   `json:"alpha" doc:"MRM's DS budget multiplier α (the paper: 2)"`
	Jobs  int       `json:"jobs" doc:"jobs per trace (configuration and run)"`
}

func (p *mrmBaselinesParams) check() error {
	pricing := mrmPricingParams{Alphas: []float64{p.Alpha}, Gaps: p.Gaps, Jobs: p.Jobs}
	return pricing.check()
}

// mrmLoadNames are the paper's loads by mean inter-arrival time.
var mrmLoadNames = map[float64]string{50: "H", 100: "M", 200: "L"}

// mrmPaperLoad is the index of the paper's load with that gap (H, M, L), or −1.
func mrmPaperLoad(gap float64) int {
	switch gap {
	case 50:
		return 0
	case 100:
		return 1
	case 200:
		return 2
	}
	return -1
}

func runMRMPricing(ctx context.Context, cfg Config, step func() error) (Result, error) {
	var res Result
	par := paramsOf[mrmPricingParams](cfg)
	nan := math.NaN()
	// Paper figures: Table 5 (tardy %), 6 (DS median slack), 7 (DT median slack), 8 (median premium).
	tardy := map[float64][3]float64{2: {1.3, 2.2, 2.5}, 1.5: {0.01, 0.01, 0.01}, 1.1: {0, 0, 0}}
	dsSlack := map[float64]float64{2: 0, 1.5: 14.7, 1.1: 35.9}
	dtSlack := [3]float64{43.9, 43.87, 43.87}
	dsPrem := map[float64]float64{2: 2.4, 1.5: 1.8, 1.1: 1.31}
	type key struct {
		a float64
		l int
	}
	got := map[key]map[string][]float64{}
	var gammas []float64
	for k := range cfg.Runs {
		for li, gap := range par.Gaps {
			jobs := mrmTrace(mrmRNG(cfg.Seed, k, uint64(li)), par.Jobs, gap)
			g := mrmGammaBar(jobs)
			gammas = append(gammas, g)
			for _, a := range par.Alphas {
				o, err := mrmSimulate(jobs, a, g)
				if err != nil {
					return res, err
				}
				var sDS, sDT, pDS, pDT []float64
				for i, j := range jobs {
					if j.ds {
						sDS, pDS = append(sDS, o.slack[i]), append(pDS, o.price[i]/j.p)
					} else {
						sDT, pDT = append(sDT, o.slack[i]), append(pDT, o.price[i]/j.p)
					}
				}
				m := got[key{a, li}]
				if m == nil {
					m = map[string][]float64{}
					got[key{a, li}] = m
				}
				m["tardy"] = append(m["tardy"], mrmLate(jobs, o, func(mrmJob) bool { return true }))
				m["sDS"] = append(m["sDS"], mrmMedian(sDS))
				m["sDT"] = append(m["sDT"], mrmMedian(sDT))
				m["pDS"] = append(m["pDS"], mrmMedian(pDS))
				m["pDT"] = append(m["pDT"], mrmMedian(pDT))
			}
		}
		if err := step(); err != nil {
			return res, err
		}
	}
	for _, a := range par.Alphas {
		for li, gap := range par.Gaps {
			m := got[key{a, li}]
			tag := fmt.Sprintf("α=%g, %g s", a, gap)
			if name := mrmLoadNames[gap]; name != "" {
				tag = fmt.Sprintf("α=%g, %s (%g s)", a, name, gap)
			}
			// The paper's figure, where α and the load are the paper's.
			paper := func(v float64, ok bool) (float64, string) {
				if !ok {
					return nan, ""
				}
				return mrmNaN(v)
			}
			pl := mrmPaperLoad(gap)
			ta, okA := tardy[a]
			v, t := paper(ta[max(pl, 0)], okA && pl >= 0)
			res.Rows = append(res.Rows, row("tardy jobs, "+tag, v, t, "", m["tardy"]).At("Table 5"))
			ds, okS := dsSlack[a]
			v, t = paper(ds, okS && pl >= 0)
			res.Rows = append(res.Rows, row("median DS slack, "+tag, v, t, "s", m["sDS"]).At("Table 6"))
			v, t = paper(dtSlack[max(pl, 0)], pl >= 0)
			res.Rows = append(res.Rows, row("median DT slack, "+tag, v, t, "s", m["sDT"]).At("Table 7"))
			prem, okP := dsPrem[a]
			v, t = paper(prem, okP && pl == 0)
			res.Rows = append(res.Rows, row("median DS premium (price/p), "+tag, v, t, "", m["pDS"]).At("Table 8"))
			v, t = paper(1.2, pl == 0)
			res.Rows = append(res.Rows, row("median DT premium (price/p), "+tag, v, t, "", m["pDT"]).At("Table 8"))
		}
	}
	gm, _ := MeanSD(gammas)
	res.Notes = append(mrmNotes(par.Jobs), notes("mrm-pricing", map[string]any{"Gamma": gm})...)
	return res, nil
}

// mrmNotes are the model's notes both MRM experiments print (notes/mrm.md).
func mrmNotes(jobs int) []string {
	return notes("mrm", map[string]any{"Jobs": jobs, "Kappa": mrmKappa, "SecPerWave": mrmSecPerWave, "MeanP": mrmMeanP,
		"Sigma": mrmSigma, "Z": mrmZ})
}

func runMRMBaselines(ctx context.Context, cfg Config, step func() error) (Result, error) {
	var res Result
	nan := math.NaN()
	par := paramsOf[mrmBaselinesParams](cfg)
	gaps := par.Gaps
	paperSetting := par.Alpha == 2
	got := map[string][]float64{}
	for k := range cfg.Runs {
		for gi, gap := range gaps {
			jobs := mrmTrace(mrmRNG(cfg.Seed, k, 100+uint64(gi)), par.Jobs, gap)
			g := mrmGammaBar(jobs)
			m, err := mrmSimulate(jobs, par.Alpha, g)
			if err != nil {
				return res, err
			}
			ds := func(j mrmJob) bool { return j.ds }
			dt := func(j mrmJob) bool { return !j.ds }
			for _, s := range []struct {
				name string
				o    mrmOutcome
			}{{"MRM", m}, {"FCFS", mrmNonPreemptive(jobs, false)}, {"priority", mrmNonPreemptive(jobs, true)}} {
				tag := fmt.Sprintf("%s, %g s", s.name, gap)
				got["DS "+tag] = append(got["DS "+tag], mrmLate(jobs, s.o, ds))
				got["DT "+tag] = append(got["DT "+tag], mrmLate(jobs, s.o, dt))
				if gi == 0 && s.name != "FCFS" {
					all, saw := mrmJumps(jobs, s.o)
					got["jump "+s.name] = append(got["jump "+s.name], all)
					got["jumpDT "+s.name] = append(got["jumpDT "+s.name], saw)
				}
			}
		}
		if err := step(); err != nil {
			return res, err
		}
	}
	for _, gap := range gaps {
		for _, s := range []string{"MRM", "FCFS", "priority"} {
			tag := fmt.Sprintf("%s, %g s", s, gap)
			res.Rows = append(res.Rows, row("deadline violations, DS jobs, "+tag, nan, "", "", got["DS "+tag]))
			v, t := nan, ""
			if s == "priority" && paperSetting && (gap == 40 || gap == 50) {
				v, t = 30, "> 30"
			}
			res.Rows = append(res.Rows, row("deadline violations, DT jobs, "+tag, v, t, "", got["DT "+tag]).At("§1, §6.3"))
		}
	}
	for _, s := range []string{"MRM", "priority"} {
		atPaper := s == "MRM" && paperSetting && gaps[0] == 40
		v, t := nan, ""
		if atPaper {
			v, t = 35.4, "35.4"
		}
		at := fmt.Sprintf(", %g s", gaps[0])
		res.Rows = append(res.Rows, row("DS jobs finishing ahead of an earlier job, "+s+at, v, t, "", got["jump "+s]).At("§6.3"))
		v, t = nan, ""
		if atPaper {
			v, t = 47.7, "47.7"
		}
		res.Rows = append(res.Rows, row("… of DS jobs that found a DT job unfinished, "+s+at, v, t, "", got["jumpDT "+s]).At("§6.3"))
	}
	res.Notes = append(mrmNotes(par.Jobs), notes("mrm-baselines", map[string]any{"Alpha": par.Alpha, "MeanP": mrmMeanP,
		"Jobs": par.Jobs, "Util40": mrmMeanP / 40, "Util50": mrmMeanP / 50})...)
	return res, nil
}

// mrmJumps is the percentage of DS jobs that finish before some job that
// arrived earlier: of all DS jobs, and of those that found a DT job unfinished.
func mrmJumps(jobs []mrmJob, o mrmOutcome) (all, saw float64) {
	maxFin := math.Inf(-1)
	var nDS, nJ, nSaw, nSawJ int
	for i, j := range jobs {
		jumped := maxFin > o.finish[i]+1e-9
		if j.ds {
			nDS++
			if jumped {
				nJ++
			}
			if o.sawDT != nil && o.sawDT[i] {
				nSaw++
				if jumped {
					nSawJ++
				}
			}
		}
		maxFin = math.Max(maxFin, o.finish[i])
	}
	if nDS > 0 {
		all = 100 * float64(nJ) / float64(nDS)
	}
	if nSaw > 0 {
		saw = 100 * float64(nSawJ) / float64(nSaw)
	}
	return all, saw
}
