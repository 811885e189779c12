package experiments

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/mrmarket/mrmarket/hadoopvm/sim"
	"github.com/mrmarket/mrmarket/hadoopvm/sim/workload"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Sandholm and Lai's spending: every plan runs four hours; the fair-share rate is
// budget/4h.
const (
	planBudget   = money.Micro(1_000) * money.PerCredit
	planDuration = 4 * time.Hour
	decay        = 2.0 // r of Eq. 4 (§7)
)

// Fair spends a constant rate (the fair-share baseline).
func Fair(user string, vms []string, _ []sim.JobSpec) *wire.SpendRequest {
	return &wire.SpendRequest{ID: "p-" + user, User: user, Budget: planBudget, Duration: wire.Duration(planDuration), VMs: vms, Strategy: wire.StrategyFair}
}

// Series is stage priority over a user's chain of jobs, one stage per job
// with weights (cycled); budgetScale multiplies the budget (for §7.3's
// normalisation: weight-1 stages spend at the fair-share rate).
func Series(weights []float64, budgetScale float64) func(string, []string, []sim.JobSpec) *wire.SpendRequest {
	return seriesWith(wire.StrategyStage, 0, weights, budgetScale)
}

// SeriesCarry is Series under our stage-carry: what a stage leaves unspent
// carries forward to the later stages.
func SeriesCarry(weights []float64, budgetScale float64) func(string, []string, []sim.JobSpec) *wire.SpendRequest {
	return seriesWith(wire.StrategyStageCarry, 0, weights, budgetScale)
}

// StageBottleneck is our combined strategy over a chain of jobs: Series's
// stage weights, and bottleneck elimination with boost f within the
// active stage.
func StageBottleneck(weights []float64, budgetScale, f float64) func(string, []string, []sim.JobSpec) *wire.SpendRequest {
	return seriesWith(wire.StrategyStageBottleneck, f, weights, budgetScale)
}

func seriesWith(strategy string, boost float64, weights []float64, budgetScale float64) func(string, []string, []sim.JobSpec) *wire.SpendRequest {
	return func(user string, vms []string, jobs []sim.JobSpec) *wire.SpendRequest {
		wfName, _, _ := strings.Cut(jobs[0].Name, ":")
		wf := wire.WorkflowSpec{Name: wfName, Weight: 1}
		for i, j := range jobs {
			_, stage, _ := strings.Cut(j.Name, ":")
			wf.Stages = append(wf.Stages, wire.StageSpec{Name: stage, Weight: weights[i%len(weights)], VMs: vms})
		}
		return &wire.SpendRequest{ID: "p-" + user, User: user, Budget: money.Micro(float64(planBudget) * budgetScale),
			Duration: wire.Duration(planDuration), Workflows: []wire.WorkflowSpec{wf}, Strategy: strategy, Boost: boost}
	}
}

// Bottleneck is bottleneck elimination with boost f.
func Bottleneck(f float64) func(string, []string, []sim.JobSpec) *wire.SpendRequest {
	return func(user string, vms []string, _ []sim.JobSpec) *wire.SpendRequest {
		r := Fair(user, vms, nil)
		r.Strategy, r.Boost = wire.StrategyBottleneck, f
		return r
	}
}

// scored is a run's workflows as Sandholm and Lai score them.
type scored struct {
	t    []float64 // completion times, s
	cost []float64 // dollars
	jobs map[string]time.Duration
}

// score turns the outcome of users (indexes into the two users) into
// completion times and costs in dollars: $1 is a fair-share plan's budget.
func score(o Outcome, users []int, _ time.Duration) scored {
	dollar := float64(planBudget)
	s := scored{jobs: o.Jobs}
	for _, i := range users {
		s.t = append(s.t, o.T[i].Seconds())
		s.cost = append(s.cost, float64(o.Paid[i])/dollar)
	}
	return s
}

// efficiency is Eq. 7 over runs' workflows at decay r and risk γ.
func efficiency(runs []scored, tmin time.Duration, r, gamma float64) float64 {
	uopt := Utility(1, 0, tmin.Seconds(), tmin.Seconds(), r)
	var us []float64
	for _, s := range runs {
		for k := range s.t {
			us = append(us, Utility(1, s.cost[k], s.t[k], tmin.Seconds(), r))
		}
	}
	return Efficiency(us, uopt, gamma)
}

// compare runs a baseline and a strategic world for each seed and gives the
// per-run CI and efficiency gain of users' workflows, with the scored runs.
func compare(ctx context.Context, cfg Config, step func() error, base, strat TwoUsers, users []int) (ci, gain []float64, b, s []scored, tmin time.Duration, err error) {
	if tmin, err = base.Dedicated(cfg.Seed); err != nil {
		return
	}
	if err = step(); err != nil {
		return
	}
	for k := range cfg.Runs {
		seed := cfg.Seed + uint64(k)*7919
		var ob, os Outcome
		if ob, err = base.Run(seed); err != nil {
			return
		}
		if err = step(); err != nil {
			return
		}
		if os, err = strat.Run(seed); err != nil {
			return
		}
		if err = step(); err != nil {
			return
		}
		sb, ss := score(ob, users, tmin), score(os, users, tmin)
		b, s = append(b, sb), append(s, ss)
		ci = append(ci, CompletionImprovement(sb.t, ss.t))
		gain = append(gain, efficiency([]scored{ss}, tmin, decay, 0)/efficiency([]scored{sb}, tmin, decay, 0)-1)
	}
	return
}

func init() {
	register(Experiment{Name: "s003-workflow", Title: "Workflow priority on GridMix (weights 1 vs 0.5), 40 hosts",
		Source: "seed 003 §7.2, Fig. 6", Engine: EngineMarket, DefaultRuns: 25, Steps: func(n int) int { return 3 * (1 + 2*n) },
		run: runS003Workflow, params: func() any { return &workflowParams{Low: 0.5, IO: workload.IOPaper} }})
	register(Experiment{Name: "s003-stage", Title: "Stage priority on Digg (one stage ×20) against a fair-share user, 23 hosts",
		Source: "seed 003 §7.3, Fig. 7", Engine: EngineMarket, DefaultRuns: 25, Steps: func(n int) int { return 6 * (1 + 2*n) },
		run: runS003Stage, params: func() any { return &stageParams{Factor: 20, IO: workload.IOPaper, Size: []float64{1, 1, 1}} }})
	register(Experiment{Name: "s003-bottleneck", Title: "Bottleneck elimination on VideoToon (1S+1FS, 2S, 2FS), 18 hosts, extra load on half",
		Source: "seed 003 §7.4, Fig. 8", Engine: EngineMarket, DefaultRuns: 25, Steps: func(n int) int { return 2 * (1 + 2*n) },
		run: runS003Bottleneck, params: func() any { return &bottleneckParams{Boost: 0.9} }})
	register(Experiment{Name: "s003-sensitivity", Title: "Efficiency gain against decay rate r and risk aversion γ (Digg stage 2, VideoToon 1S+1FS)",
		Source: "seed 003 §8, Fig. 9", Engine: EngineMarket, DefaultRuns: 25, Steps: func(n int) int { return 2 * (1 + 2*n) },
		run: runS003Sensitivity, params: func() any {
			return &sensitivityParams{Rates: []float64{0.5, 1, 2, 4, 8}, Gamma: 3, IO: workload.IOPaper}
		}})
}

// runS003Workflow is §7.2: each GridMix program, both users fair against
// the two users weighting their own workflow 1 and the other's 0.5.
func runS003Workflow(ctx context.Context, cfg Config, step func() error) (Result, error) {
	var res Result
	p := paramsOf[workflowParams](cfg)
	low := p.Low
	for _, prog := range []string{workload.Queries, workload.Web, workload.Text} {
		jobs := func(u string, vms []string) []sim.JobSpec {
			j, _ := workload.GridMix(prog, u, u, vms, 0, p.IO)
			return j
		}
		base := TwoUsers{Hosts: 40, IO: p.IO, Users: [2]User{{jobs, Fair}, {jobs, Fair}}}
		strat := TwoUsers{Hosts: 40, IO: p.IO, Users: [2]User{{jobs, Series([]float64{1, low}, 1)}, {jobs, Series([]float64{low, 1}, 1)}}}
		ci, gain, b, s, _, err := compare(ctx, cfg, step, base, strat, []int{0, 1})
		if err != nil {
			return res, err
		}
		// Eq. 6 over the workflows whose rate was doubled: Series weighs
		// a chain's jobs by their place in it, 1 on the first user's
		// even ones, on the second's odd ones.
		var high []float64
		for k := range b {
			var tf, ts []float64
			for i, u := range [2]string{"u1", "u2"} {
				for n, j := range jobs(u, nil) {
					if n%2 == i {
						tf, ts = append(tf, b[k].jobs[j.ID].Seconds()), append(ts, s[k].jobs[j.ID].Seconds())
					}
				}
			}
			high = append(high, CompletionImprovement(tf, ts))
		}
		paperGain := 0.10
		if prog == workload.Text {
			paperGain = 0.04
		}
		paperCI, textCI := atPaperSetting(low == 0.5 && p.IO == workload.IOPaper, 0.115, "11–12 %")
		paperGain, textGain := atPaperSetting(low == 0.5 && p.IO == workload.IOPaper, paperGain, fmt.Sprintf("≈%.0f %%", 100*paperGain))
		res.Rows = append(res.Rows, row("CI ("+prog+")", paperCI, textCI, "%", ci).At("Fig. 6(a)"),
			row("CI, high-priority workflows only ("+prog+")", paperCI, textCI, "%", high).At("Fig. 6(a)"),
			row("efficiency gain ("+prog+")", paperGain, textGain, "%", gain).At("Fig. 6(b)"))
	}
	res.Notes = notes("s003-workflow", map[string]any{"Low": low, "IO": p.IO})
	return res, nil
}

// workflowParams are s003-workflow's settings.
type workflowParams struct {
	Low float64     `json:"low" doc:"the low-priority workflows' weight, the high ones' 1 (the paper: 0.5, so high spends twice the rate)"`
	IO  workload.IO `json:"io"` // documented by ioDoc
}

// ioDoc documents the io parameter of the experiments that describe the
// I/O models in full; the others point to s003-stage's.
const ioDoc = "I/O model: paper (network governed by the shares, disk shared equally: seed 003's testbed), " +
	"governed (disk too, by ideal weights), throttled (disk and network divided equally by the device under the agents' " +
	"per-VM throttles, as mrmarket's libvirt agent delivers them), none (CPU only)"

func (*workflowParams) longDocs() map[string]string { return map[string]string{"io": ioDoc} }

func (p *workflowParams) check() error {
	if !(p.Low > 0 && p.Low <= 1) {
		return fmt.Errorf("low %g: want 0 < low ≤ 1", p.Low)
	}
	return p.IO.Check()
}

// diggStage is §7.3's world: the first user weights Digg's stages by w
// under series (its budget scaled so weight-1 stages spend the fair-share
// rate), the second spends fairly.
func diggStage(series func([]float64, float64) func(string, []string, []sim.JobSpec) *wire.SpendRequest, w []float64, io workload.IO, size [3]float64) TwoUsers {
	sum := 0.0
	for _, x := range w {
		sum += x
	}
	jobs := func(u string, vms []string) []sim.JobSpec { return workload.DiggSized(u, u, vms, 0, io, size) }
	return TwoUsers{Hosts: 23, IO: io, Users: [2]User{{jobs, series(w, sum/float64(len(w)))}, {jobs, Fair}}}
}

// stageParams are s003-stage's settings.
type stageParams struct {
	Factor float64     `json:"factor" doc:"the boosted stage's weight, the others 1 (the paper: 20)"`
	IO     workload.IO `json:"io"` // documented by ioDoc
	Size   []float64   `json:"size" doc:"Digg's stages' task times (join, distribution, Pearson) as multiples of ours [recon: the paper gives none]"`
}

func (*stageParams) longDocs() map[string]string { return map[string]string{"io": ioDoc} }

func (p *stageParams) check() error {
	if !(p.Factor > 0 && p.Factor <= 1000) {
		return fmt.Errorf("factor %g: want 0 < factor ≤ 1000", p.Factor)
	}
	if len(p.Size) != 3 {
		return fmt.Errorf("size %v: want three multiples (join, distribution, Pearson)", p.Size)
	}
	for _, x := range p.Size {
		if !(x >= 0.05 && x <= 20) {
			return fmt.Errorf("size %v: want multiples in [0.05, 20]", p.Size)
		}
	}
	return p.IO.Check()
}

// sizes is the stages' size multiples as an array.
func (p *stageParams) sizes() [3]float64 { return [3]float64(p.Size) }

// runS003Stage is §7.3: each Digg stage in turn weighted ×20 against
// equal weights, under Eq. 9's fixed split (the paper's stage priority)
// and under our stage-carry.
func runS003Stage(ctx context.Context, cfg Config, step func() error) (Result, error) {
	var res Result
	p := paramsOf[stageParams](cfg)
	f := p.Factor
	for _, v := range []struct {
		tag    string
		series func([]float64, float64) func(string, []string, []sim.JobSpec) *wire.SpendRequest
	}{{"", Series}, {", stage-carry", SeriesCarry}} {
		base := diggStage(v.series, []float64{1, 1, 1}, p.IO, p.sizes())
		for stage, w := range [][]float64{{f, 1, 1}, {1, f, 1}, {1, 1, f}} {
			ci, gain, _, _, _, err := compare(ctx, cfg, step, base, diggStage(v.series, w, p.IO, p.sizes()), []int{0})
			if err != nil {
				return res, err
			}
			paperCI, paperGain, textCI, textGain := math.NaN(), math.NaN(), "", ""
			if stage == 1 && v.tag == "" && f == 20 && p.IO == workload.IOPaper {
				paperCI, paperGain, textCI, textGain = 0.31, 1.87, "31 %", "187 %"
			}
			res.Rows = append(res.Rows, row(fmt.Sprintf("CI (stage %d ×%g%s)", stage+1, f, v.tag), paperCI, textCI, "%", ci).At("Fig. 7(a)"),
				row(fmt.Sprintf("efficiency gain (stage %d ×%g%s)", stage+1, f, v.tag), paperGain, textGain, "%", gain).At("Fig. 7(b)"))
		}
	}
	alone, err := diggAlone(p.IO, p.sizes(), cfg.Seed)
	if err != nil {
		return res, err
	}
	var total time.Duration
	for _, d := range alone {
		total += d
	}
	pct := func(d time.Duration) float64 { return 100 * d.Seconds() / total.Seconds() }
	res.Notes = notes("s003-stage", map[string]any{"Size": p.Size, "IO": p.IO,
		"Alone": []time.Duration{alone[0].Round(time.Second), alone[1].Round(time.Second), alone[2].Round(time.Second)},
		"Pct":   []float64{pct(alone[0]), pct(alone[1]), pct(alone[2])}})
	return res, nil
}

// diggAlone is each of Digg's stages' time alone on §7.3's 23 hosts,
// without background load, under io.
func diggAlone(io workload.IO, size [3]float64, seed uint64) ([3]time.Duration, error) {
	var out [3]time.Duration
	var hosts []sim.HostSpec
	var vms []sim.VMSpec
	var ids []string
	for h := range 23 {
		hosts = append(hosts, io.Host(fmt.Sprint("h", h)))
		id := fmt.Sprint("vm", h)
		vms = append(vms, sim.VMSpec{ID: id, Owner: "u", Host: fmt.Sprint("h", h), Slots: 2})
		ids = append(ids, id)
	}
	s, err := sim.New(sim.Config{Seed: seed, Start: start}, hosts, vms)
	if err != nil {
		return out, err
	}
	jobs := workload.DiggSized("alone", "u", ids, 0, io, size)
	for _, j := range jobs {
		if err := s.Submit(j); err != nil {
			return out, err
		}
	}
	res, err := s.Run(48 * time.Hour)
	if err != nil {
		return out, err
	}
	for _, r := range res {
		for i, j := range jobs {
			if r.ID == j.ID {
				out[i] = r.Duration()
			}
		}
	}
	return out, nil
}

// videoToon is §7.4's world: both users run VideoToon on heterogeneous
// hosts, spending as a and b.
func videoToon(a, b func(string, []string, []sim.JobSpec) *wire.SpendRequest) TwoUsers {
	jobs := func(u string, vms []string) []sim.JobSpec { return workload.VideoToon(u, u, vms, 0, 16) }
	return TwoUsers{Hosts: 18, Heterogeneous: true, Users: [2]User{{jobs, a}, {jobs, b}}}
}

// runS003Bottleneck is §7.4: one, then both users eliminating bottlenecks
// against both spending fairly.
func runS003Bottleneck(ctx context.Context, cfg Config, step func() error) (Result, error) {
	var res Result
	f := paramsOf[bottleneckParams](cfg).Boost
	fs := videoToon(Fair, Fair)
	ci, gain, _, _, _, err := compare(ctx, cfg, step, fs, videoToon(Bottleneck(f), Fair), []int{0})
	if err != nil {
		return res, err
	}
	ci2, gain2, _, _, _, err := compare(ctx, cfg, step, fs, videoToon(Bottleneck(f), Bottleneck(f)), []int{0, 1})
	if err != nil {
		return res, err
	}
	p1, t1 := atPaperSetting(f == 0.9, 0.20, "20 %")
	p2, t2 := atPaperSetting(f == 0.9, 0.62, "62 %")
	_, t3 := atPaperSetting(f == 0.9, math.NaN(), "slightly above 2FS")
	res.Rows = append(res.Rows, row("CI (1S+1FS, strategic user)", p1, t1, "%", ci).At("Fig. 8(a)"),
		row("efficiency gain (1S+1FS, strategic user)", p2, t2, "%", gain).At("Fig. 8(b)"),
		row("CI (2S, both users)", math.NaN(), "", "%", ci2),
		row("efficiency gain (2S, both users)", math.NaN(), t3, "%", gain2).At("§7.4"))
	res.Notes = notes("s003-bottleneck", map[string]any{"Boost": f})
	return res, nil
}

// bottleneckParams are s003-bottleneck's settings.
type bottleneckParams struct {
	Boost float64 `json:"boost" doc:"bottleneck elimination's boost factor f in [0, 1) (the paper: 0.9; the aggregate of all users is capped at 0.9)"`
}

func (p *bottleneckParams) check() error {
	if !(p.Boost >= 0 && p.Boost < 1) {
		return fmt.Errorf("boost %g: want 0 ≤ f < 1", p.Boost)
	}
	return nil
}

// runS003Sensitivity is §8: the gains of §7.3's stage 2 and §7.4's 1S+1FS
// rescored at other decay rates r and risk attitudes γ.
func runS003Sensitivity(ctx context.Context, cfg Config, step func() error) (Result, error) {
	var res Result
	p := paramsOf[sensitivityParams](cfg)
	same := [3]float64{1, 1, 1}
	for _, c := range []struct {
		name        string
		base, strat TwoUsers
		riskAverse  float64
		riskSeeking float64
	}{
		{"Digg", diggStage(Series, []float64{1, 1, 1}, p.IO, same), diggStage(Series, []float64{1, 20, 1}, p.IO, same), 0.65, 5.0},
		{"VideoToon", videoToon(Fair, Fair), videoToon(Bottleneck(0.9), Fair), 0.30, math.NaN()},
	} {
		_, _, b, s, tmin, err := compare(ctx, cfg, step, c.base, c.strat, []int{0})
		if err != nil {
			return res, err
		}
		gainAt := func(r, gamma float64) []float64 {
			var out []float64
			for k := range b {
				out = append(out, efficiency(s[k:k+1], tmin, r, gamma)/efficiency(b[k:k+1], tmin, r, gamma)-1)
			}
			return out
		}
		for _, r := range p.Rates {
			res.Rows = append(res.Rows, row(fmt.Sprintf("%s gain, r = %g", c.name, r), math.NaN(), "grows with r", "%", gainAt(r, 0)).At("§8, Fig. 9"))
		}
		seekText := ""
		if !math.IsNaN(c.riskSeeking) {
			seekText = "≈6×"
		}
		paper := p.Gamma == 3 && p.IO == workload.IOPaper
		averse, averseText := atPaperSetting(paper, c.riskAverse, fmt.Sprintf("%.0f %%", 100*c.riskAverse))
		seeking, seekText := atPaperSetting(paper, c.riskSeeking, seekText)
		res.Rows = append(res.Rows,
			row(fmt.Sprintf("%s gain, γ = %g (risk averse)", c.name, p.Gamma), averse, averseText, "%", gainAt(decay, p.Gamma)).At("§8, Fig. 9"),
			row(fmt.Sprintf("%s gain, γ = −%g (risk seeking)", c.name, p.Gamma), seeking, seekText, "%", gainAt(decay, -p.Gamma)).At("§8, Fig. 9"))
	}
	return res, nil
}

// sensitivityParams are s003-sensitivity's settings.
type sensitivityParams struct {
	Rates []float64   `json:"rates" doc:"the decay rates r the gains are rescored at (the paper's runs: 2)"`
	Gamma float64     `json:"gamma" doc:"the risk attitude |γ|: rows at γ (risk averse) and −γ (risk seeking) (the paper: 3)"`
	IO    workload.IO `json:"io" doc:"Digg's I/O model: paper, governed, throttled or none (see s003-stage)"`
}

func (p *sensitivityParams) check() error {
	if len(p.Rates) == 0 || len(p.Rates) > 20 {
		return fmt.Errorf("rates %v: want 1 to 20 decay rates", p.Rates)
	}
	for _, r := range p.Rates {
		if !(r > 0 && r <= 100) {
			return fmt.Errorf("rate %g: want 0 < r ≤ 100", r)
		}
	}
	if !(p.Gamma > 0 && p.Gamma <= 50) {
		return fmt.Errorf("gamma %g: want 0 < γ ≤ 50", p.Gamma)
	}
	return p.IO.Check()
}
