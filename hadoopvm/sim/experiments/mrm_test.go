package experiments_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/mrmarket/mrmarket/hadoopvm/sim/experiments"
)

// TestMRMDeterministicAndSane: one run of each MRM experiment twice gives
// the same means, and the figures are in range.
func TestMRMDeterministicAndSane(t *testing.T) {
	for _, name := range []string{"mrm-pricing", "mrm-baselines"} {
		e, err := experiments.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		if e.Steps(3) != 3 {
			t.Errorf("%s: Steps(3) = %d", name, e.Steps(3))
		}
		var res [2]experiments.Result
		for i := range res {
			steps := 0
			res[i], err = e.Run(context.Background(), experiments.Config{Seed: 7, Runs: 1, Progress: func(d, _ int) { steps = d }})
			if err != nil {
				t.Fatal(err)
			}
			if steps != e.Steps(1) {
				t.Errorf("%s: %d steps, want %d", name, steps, e.Steps(1))
			}
		}
		if len(res[0].Rows) == 0 || len(res[0].Rows) != len(res[1].Rows) {
			t.Fatalf("%s: %d and %d rows", name, len(res[0].Rows), len(res[1].Rows))
		}
		for i, r := range res[0].Rows {
			if r.Mean != res[1].Rows[i].Mean {
				t.Errorf("%s: %s: %v then %v", name, r.Metric, r.Mean, res[1].Rows[i].Mean)
			}
			if math.IsNaN(r.Mean) || math.IsInf(r.Mean, 0) {
				t.Errorf("%s: %s = %v", name, r.Metric, r.Mean)
			}
			switch {
			case strings.Contains(r.Metric, "tardy") || strings.Contains(r.Metric, "violations") || strings.Contains(r.Metric, "DS jobs"):
				if r.Mean < 0 || r.Mean > 100 {
					t.Errorf("%s: %s = %v, not a percentage", name, r.Metric, r.Mean)
				}
			case strings.Contains(r.Metric, "slack"):
				if r.Mean < 0 {
					t.Errorf("%s: %s = %v < 0", name, r.Metric, r.Mean)
				}
			case strings.Contains(r.Metric, "premium"):
				if r.Mean <= 0 {
					t.Errorf("%s: %s = %v ≤ 0", name, r.Metric, r.Mean)
				}
			}
		}
		t.Logf("%s: %d rows in %s", name, len(res[0].Rows), res[0].Wall)
	}
}
