package experiments_test

import (
	"testing"

	"github.com/mrmarket/mrmarket/hadoopvm/sim/experiments"
)

// TestLinConclusionsPerSeed: Lin et al. §5's conclusion on each test
// seed, over 20,000-job traces at loads 0.75 and 0.9: MaxSRPT and
// SplitSRPT both have a far lower mean response than k-LPS (Hadoop's Fair
// Scheduler), and the lower bound is below every policy. Mutation that
// fails it: MaxSRPT serving the jobs in arrival order (allocate without
// its order by the least work left).
func TestLinConclusionsPerSeed(t *testing.T) {
	perSeed(t, "lin", 1, map[string]string{"jobs": "20000", "lengths": ""}, func(seed uint64, res experiments.Result) {
		for _, load := range []string{"0.75", "0.9"} {
			at := func(p string) float64 { return metric(t, res, "mean response, "+p+", load "+load) }
			klps, maxs, split, lb := at("klps"), at("maxsrpt"), at("splitsrpt"), at("lower bound")
			if !(maxs < 0.8*klps && split < 0.8*klps) {
				t.Errorf("seed %d, load %s: MaxSRPT %.2f and SplitSRPT %.2f are not well below k-LPS %.2f", seed, load, maxs, split, klps)
			}
			if !(lb <= maxs && lb <= split && lb <= klps) {
				t.Errorf("seed %d, load %s: the lower bound %.2f is above a policy (%.2f, %.2f, %.2f)", seed, load, lb, klps, maxs, split)
			}
		}
	})
}
