// Package experiments reproduces the papers' headline results on the
// simulator, with the product's own broker, strategies and agents (one
// code path): each experiment runs its scenario for several seeds and
// reports, metric by metric, the paper's figure beside ours (mean ± sd over
// the runs) and their ratio. `mrmarket sim list|run` is its front end.
//
// The papers are cited by short forms; docs/PAPERS.md has them in full,
// with the seed numbers the experiments' sources and notes call them by:
// Sandholm and Lai, "MapReduce Optimization Using Regulated Dynamic
// Prioritization"; MRM, Moshref et al.'s "MRM: Delivering Predictability
// and Service Differentiation in Shared Compute Clusters"; ARIA, Verma,
// Cherkasova and Campbell's "ARIA: Automatic Resource Inference and
// Allocation for MapReduce Environments"; Jockey, Ferguson et al.'s
// "Jockey: Guaranteed Job Latency in Data Parallel Clusters"; Lin et al.,
// Lin, Wierman, Zhang and Tan's "Joint Optimization of Overlapping Phases
// in MapReduce". What an experiment prints beside its table, and the
// conclusions, are in notes/ (notes.go).
//
// Decisions where the papers are silent, all marked [recon]:
//   - Sandholm and Lai's cost c (Eq. 4) is in "dollars" with v = $1 per workflow:
//     one dollar is a fair-share user's plan budget (what it is willing to
//     pay over the four-hour plan the workflow runs in), so a workflow's
//     cost is the part of that budget spent until it finished. min(T) is
//     the workflow alone on the hosts (no background, no other user), run
//     by the same simulator.
//   - Efficiency gain is E(strategy)/E(baseline) − 1 over the same users'
//     workflows in the same seeds, the baseline being fair share for every
//     user (for stage priority: weights {1, 1, 1}).
//   - Lin et al.'s load is the arrival rate times the mean map size (both
//     sizes have mean 1).
package experiments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// ErrUnknown means no experiment has that name.
var ErrUnknown = errors.New("experiments: unknown experiment")

// Config is how an experiment is run.
type Config struct {
	Seed uint64
	Runs int // 0: the experiment's default
	// Progress, when set, is told after every simulated run.
	Progress func(done, total int)
	// Set changes the experiment's parameters (Experiment.Params) by name:
	// `sim run NAME --set name=value`.
	Set map[string]string

	params any // the experiment's parameters, Set applied (see paramsOf)
}

// paramsOf is the parameters an experiment registered as *T, with
// Config.Set applied.
func paramsOf[T any](cfg Config) *T {
	p, _ := cfg.params.(*T)
	if p == nil {
		panic(fmt.Sprintf("experiments: no %T parameters in the config", p))
	}
	return p
}

// Row is one metric: the paper's figure (NaN where it gives none) and ours.
type Row struct {
	Metric    string  `json:"metric"`
	Paper     float64 `json:"paper"`
	PaperText string  `json:"paper_text,omitempty"`
	Mean      float64 `json:"mean"`
	SD        float64 `json:"sd"`
	N         int     `json:"n"`
	Unit      string  `json:"unit,omitempty"` // "%" for fractions shown as percentages
	// Where is where the paper states its figure (a table, figure or
	// section), so that a reader can check it.
	Where string `json:"where,omitempty"`
}

// At is r with the place the paper states its figure.
func (r Row) At(where string) Row {
	r.Where = where
	return r
}

// MarshalJSON writes a missing paper figure (NaN) as null.
func (r Row) MarshalJSON() ([]byte, error) {
	type plain Row
	out := struct {
		plain
		Paper *float64 `json:"paper"`
		Ratio *float64 `json:"ratio"`
	}{plain: plain(r)}
	if !math.IsNaN(r.Paper) {
		out.Paper = &r.Paper
	}
	if q := r.Ratio(); !math.IsNaN(q) {
		out.Ratio = &q
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON writes: a missing paper figure
// (null) is NaN again, not 0.
func (r *Row) UnmarshalJSON(b []byte) error {
	type plain Row
	in := struct {
		*plain
		Paper *float64 `json:"paper"`
	}{plain: (*plain)(r)}
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	r.Paper = math.NaN()
	if in.Paper != nil {
		r.Paper = *in.Paper
	}
	return nil
}

// Load reads the results Save wrote into dir, by experiment name.
func Load(dir string) (map[string]Result, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	out := map[string]Result{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var res Result
		if err := json.Unmarshal(b, &res); err != nil {
			return nil, fmt.Errorf("experiments: %s: %w", f, err)
		}
		out[res.Experiment] = res
	}
	return out, nil
}

// Ratio is ours over the paper's (NaN without a paper figure).
func (r Row) Ratio() float64 {
	if math.IsNaN(r.Paper) || r.Paper == 0 {
		return math.NaN()
	}
	return r.Mean / r.Paper
}

// Result is an experiment's outcome.
type Result struct {
	Experiment string            `json:"experiment"`
	Title      string            `json:"title"`
	Source     string            `json:"source"`
	Engine     Engine            `json:"engine"`
	Seed       uint64            `json:"seed"`
	Runs       int               `json:"runs"`
	Wall       time.Duration     `json:"wall_ns"`
	Set        map[string]string `json:"set,omitempty"` // parameters changed from their defaults
	Rows       []Row             `json:"rows"`
	Notes      []string          `json:"notes,omitempty"`
}

// Engine is which of the product's code an experiment's numbers come from.
type Engine string

// The engines. The market is the whole product on the simulator's virtual
// clock; the simulator alone drives the agents' share rule and the
// simulated hosts with a strategy's decisions but no broker; a model is a
// stand-alone loop over strategies/ (the paper's own abstraction of a
// cluster: slots, a single server or a tandem queue), no simulator at all.
const (
	EngineMarket    Engine = "market"
	EngineSimulator Engine = "simulator"
	EngineModel     Engine = "model"
)

// Describe says what e runs, for a reader of the results.
func (e Engine) Describe() string {
	switch e {
	case EngineMarket:
		return "the broker, its strategies and the agents on the simulator's hosts (the whole product on a virtual clock)"
	case EngineSimulator:
		return "the simulator's hosts and agents (the share rule, charging) driven by the strategy's decisions, without the broker"
	case EngineModel:
		return "a stand-alone model of the paper's cluster calling strategies/ (no simulator, no broker)"
	}
	return "unstated"
}

// Experiment is one reproducible result.
type Experiment struct {
	Name, Title, Source string
	// Engine is the code its numbers come from.
	Engine      Engine
	DefaultRuns int
	// Steps is how many simulated runs Run makes for runs seeds.
	Steps func(runs int) int
	run   func(ctx context.Context, cfg Config, step func() error) (Result, error)
	// params, when set, gives a pointer to the experiment's parameters at
	// their defaults (see Params).
	params func() any
	// quick are parameters that make one run take a second or so (tests,
	// smoke runs) where the defaults take longer.
	quick map[string]string
}

// Quick are the parameters that make a run of e quick (nil: its defaults
// are): what its tests and a smoke run use.
func (e Experiment) Quick() map[string]string { return e.quick }

// Run runs the experiment.
func (e Experiment) Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Runs <= 0 {
		cfg.Runs = e.DefaultRuns
	}
	if cfg.Runs > 10_000 {
		return Result{}, fmt.Errorf("experiments: %d runs is too many (at most 10000)", cfg.Runs)
	}
	p, err := e.withParams(cfg.Set)
	if err != nil {
		return Result{}, err
	}
	cfg.params = p
	total, done := e.Steps(cfg.Runs), 0
	step := func() error {
		done++
		if cfg.Progress != nil {
			cfg.Progress(done, total)
		}
		return ctx.Err()
	}
	began := time.Now()
	res, err := e.run(ctx, cfg, step)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", e.Name, err)
	}
	res.Experiment, res.Title, res.Source, res.Seed, res.Runs, res.Wall = e.Name, e.Title, e.Source, cfg.Seed, cfg.Runs, time.Since(began)
	res.Engine = e.Engine
	if len(cfg.Set) > 0 {
		res.Set = cfg.Set
	}
	return res, nil
}

var registry = map[string]Experiment{}

func register(e Experiment) { registry[e.Name] = e }

// List is every experiment, by name.
func List() []Experiment {
	out := make([]Experiment, 0, len(registry))
	for _, e := range registry {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Get finds an experiment by name.
func Get(name string) (Experiment, error) {
	e, ok := registry[name]
	if !ok {
		names := ""
		for _, x := range List() {
			names += " " + x.Name
		}
		return Experiment{}, fmt.Errorf("%w %q (known:%s)", ErrUnknown, name, names)
	}
	return e, nil
}

// atPaperSetting is the paper's figure (v, text) when the run is at the
// setting the paper measured it at (ok), none otherwise: a figure beside a
// run with other parameters would compare unlike things.
func atPaperSetting(ok bool, v float64, text string) (float64, string) {
	if !ok {
		return math.NaN(), ""
	}
	return v, text
}

// row summarises per-run values of one metric.
func row(metric string, paper float64, paperText, unit string, xs []float64) Row {
	m, sd := MeanSD(xs)
	return Row{Metric: metric, Paper: paper, PaperText: paperText, Mean: m, SD: sd, N: len(xs), Unit: unit}
}
