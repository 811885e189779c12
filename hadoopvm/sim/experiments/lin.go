package experiments

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/mrmarket/mrmarket/strategies"
)

// linJobs is Lin et al. §6's synthetic workload: map sizes lognormal with
// mean 1 and sd 3.65, shuffle = map × a lognormal ratio with mean 1 and sd
// 3.28, Poisson arrivals at rate load (mean map size 1) [recon].
func linJobs(rng *rand.Rand, n int, load float64) []strategies.OverlapJob {
	logn := func(mean, sd float64) float64 {
		s2 := math.Log(1 + sd*sd/(mean*mean))
		return math.Exp(math.Log(mean) - s2/2 + math.Sqrt(s2)*rng.NormFloat64())
	}
	jobs := make([]strategies.OverlapJob, n)
	t := 0.0
	for i := range jobs {
		t += rng.ExpFloat64() / load
		x := logn(1, 3.65)
		jobs[i] = strategies.OverlapJob{Release: t, Map: x, Shuffle: x * logn(1, 3.28)}
	}
	return jobs
}

// linParams are lin's settings. The paper averages traces of 5·10^7
// jobs (§5.3); the heavy tails make the mean of a short trace low and
// noisy, approaching the paper's only over 100,000 jobs or so
// (docs/MEASUREMENTS.md), so the default trace is 100,000 jobs and the
// rows "over N jobs" show the mean against the trace length.
type linParams struct {
	Loads   []float64 `json:"load" doc:"offered loads: arrival rate × mean map size (the paper: 0.75, 0.9)"`
	Jobs    int       `json:"jobs" doc:"jobs per trace for the main rows (the paper: 5·10^7)"`
	Lengths []int     `json:"lengths" doc:"shorter trace lengths also reported, to show the mean converging (empty: none)"`
}

func (p *linParams) check() error {
	if len(p.Loads) == 0 {
		return fmt.Errorf("load needs at least one value")
	}
	for _, l := range p.Loads {
		if !(l > 0 && l < 1) {
			return fmt.Errorf("load %g: want 0 < load < 1 (the queue is unstable at 1)", l)
		}
	}
	for _, n := range append([]int{p.Jobs}, p.Lengths...) {
		if n < 10 || n > 2_000_000 {
			return fmt.Errorf("trace of %d jobs: want 10 … 2000000", n)
		}
	}
	return nil
}

// linPolicies are the policies compared, in the report's order.
var linPolicies = []string{strategies.PolicyKLPS, strategies.PolicyMaxSRPT, strategies.PolicySplitSRPT}

// linRun is the mean response of each policy (and the lower bound) over
// one trace.
func linRun(jobs []strategies.OverlapJob) (map[string]float64, error) {
	out := map[string]float64{}
	for _, p := range linPolicies {
		done, err := strategies.SimulateOverlap(jobs, p)
		if err != nil {
			return nil, err
		}
		sum := 0.0
		for i, d := range done {
			sum += d - jobs[i].Release
		}
		out[p] = sum / float64(len(jobs))
	}
	lb, err := strategies.OverlapLowerBound(jobs)
	if err != nil {
		return nil, err
	}
	out["lower bound"] = lb
	return out, nil
}

func init() {
	register(Experiment{Name: "lin", Title: "Mean response of k-LPS, MaxSRPT, SplitSRPT and the lower bound, overlapping map and shuffle",
		Source: "Lin et al. §5.3", Engine: EngineModel, DefaultRuns: 10, Steps: func(n int) int { return 2 * n },
		params: func() any {
			return &linParams{Loads: []float64{0.75, 0.9}, Jobs: 100_000, Lengths: []int{2_000, 20_000}}
		},
		quick: map[string]string{"jobs": "2000", "lengths": "500"},
		run: func(ctx context.Context, cfg Config, step func() error) (Result, error) {
			var res Result
			par := paramsOf[linParams](cfg)
			paper := map[float64]map[string]float64{
				0.75: {strategies.PolicyKLPS: 6.50, strategies.PolicyMaxSRPT: 3.32, strategies.PolicySplitSRPT: 3.55},
				0.9:  {strategies.PolicyKLPS: 16.28, strategies.PolicyMaxSRPT: 5.58, strategies.PolicySplitSRPT: 5.66},
			}
			for _, load := range par.Loads {
				lengths := append([]int{par.Jobs}, par.Lengths...)
				got := make([]map[string][]float64, len(lengths))
				for k := range cfg.Runs {
					for n, length := range lengths {
						// The same seed for every length: a shorter trace is
						// the start of the longer one.
						rng := rand.New(rand.NewPCG(cfg.Seed+uint64(k)*7919, uint64(load*100)))
						m, err := linRun(linJobs(rng, length, load))
						if err != nil {
							return res, err
						}
						if got[n] == nil {
							got[n] = map[string][]float64{}
						}
						for p, v := range m {
							got[n][p] = append(got[n][p], v)
						}
					}
					if err := step(); err != nil {
						return res, err
					}
				}
				for n, length := range lengths {
					for _, p := range append(linPolicies, "lower bound") {
						want, text := math.NaN(), ""
						if v, ok := paper[load][p]; ok && n == 0 {
							want, text = v, fmt.Sprintf("%.2f", v)
						}
						metric := fmt.Sprintf("mean response, %s, load %g", p, load)
						if n > 0 {
							metric += fmt.Sprintf(", over %d jobs", length)
						}
						res.Rows = append(res.Rows, row(metric, want, text, "", got[n][p]).At("§5.3"))
					}
				}
			}
			res.Notes = notes("lin", map[string]any{"Jobs": par.Jobs})
			return res, nil
		}})
}
