package experiments

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/mrmarket/mrmarket/strategies"
)

// linJobs is seed 001 §6's synthetic workload: map sizes lognormal with
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

// linJobsPerRun is how many jobs one run simulates.
const linJobsPerRun = 2000

func init() {
	register(Experiment{Name: "lin", Title: "Mean response of k-LPS, MaxSRPT, SplitSRPT and the lower bound, overlapping map and shuffle",
		Source: "seed 001 §6, Fig. 6", DefaultRuns: 10, Steps: func(n int) int { return 2 * n },
		run: func(ctx context.Context, cfg Config, step func() error) (Result, error) {
			var res Result
			paper := map[float64]map[string]float64{
				0.75: {strategies.PolicyKLPS: 6.50, strategies.PolicyMaxSRPT: 3.32, strategies.PolicySplitSRPT: 3.55},
				0.9:  {strategies.PolicyKLPS: 16.28, strategies.PolicyMaxSRPT: 5.58, strategies.PolicySplitSRPT: 5.66},
			}
			for _, load := range []float64{0.75, 0.9} {
				got := map[string][]float64{}
				for k := range cfg.Runs {
					rng := rand.New(rand.NewPCG(cfg.Seed+uint64(k)*7919, uint64(load*100)))
					jobs := linJobs(rng, linJobsPerRun, load)
					for _, p := range []string{strategies.PolicyKLPS, strategies.PolicyMaxSRPT, strategies.PolicySplitSRPT} {
						done, err := strategies.SimulateOverlap(jobs, p)
						if err != nil {
							return res, err
						}
						sum := 0.0
						for i, d := range done {
							sum += d - jobs[i].Release
						}
						got[p] = append(got[p], sum/float64(len(jobs)))
					}
					lb, err := strategies.OverlapLowerBound(jobs)
					if err != nil {
						return res, err
					}
					got["lower bound"] = append(got["lower bound"], lb)
					if err := step(); err != nil {
						return res, err
					}
				}
				for _, p := range []string{strategies.PolicyKLPS, strategies.PolicyMaxSRPT, strategies.PolicySplitSRPT, "lower bound"} {
					want, text := math.NaN(), ""
					if v, ok := paper[load][p]; ok {
						want, text = v, fmt.Sprintf("%.2f", v)
					}
					res.Rows = append(res.Rows, row(fmt.Sprintf("mean response, %s, load %g", p, load), want, text, "", got[p]))
				}
			}
			res.Notes = append(res.Notes, fmt.Sprintf("%d jobs per run; sizes and arrivals as §6's synthetic workload", linJobsPerRun))
			return res, nil
		}})
}
