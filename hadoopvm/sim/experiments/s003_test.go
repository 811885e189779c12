package experiments_test

import (
	"testing"

	"github.com/mrmarket/mrmarket/hadoopvm/sim/experiments"
)

// TestBottleneckConclusionsPerSeed: seed 003 §7.4's conclusions on each of
// five seeds (three runs each): a user eliminating bottlenecks against a
// fair-share one finishes sooner and more efficiently than when both spend
// fairly, and two such users coexist, both better off than two fair-share
// ones. Bottleneck elimination broken into the fair split would gain
// nothing and fail.
func TestBottleneckConclusionsPerSeed(t *testing.T) {
	perSeed(t, "s003-bottleneck", 3, nil, func(seed uint64, res experiments.Result) {
		ci, gain := metric(t, res, "CI (1S+1FS, strategic user)"), metric(t, res, "efficiency gain (1S+1FS, strategic user)")
		both := metric(t, res, "efficiency gain (2S, both users)")
		if !(ci > 0.05 && gain > 0.2) {
			t.Errorf("seed %d: the strategic user's CI %.1f %%, efficiency gain %.1f %% (the paper: 20 %%, 62 %%)", seed, 100*ci, 100*gain)
		}
		if !(both > 0) {
			t.Errorf("seed %d: two strategic users' efficiency gain %.1f %%, want above two fair-share users", seed, 100*both)
		}
	})
}
