package experiments_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/mrmarket/mrmarket/hadoopvm/sim/experiments"
)

// TestARIA: a short run of the ARIA experiment is deterministic for its
// seed, takes the steps it announces, and is sane: no negative misses or
// excess, loads are shares of the cluster (the map share plus the reduce
// share, twice that with as many map as reduce slots), a job run alone
// (threshold 0) on the default's upper-bound pair never misses its deadline
// of at least T_J, and Table 3's figures sit beside ours.
func TestARIA(t *testing.T) {
	e, err := experiments.Get("aria")
	if err != nil {
		t.Fatal(err)
	}
	steps := 0
	cfg := experiments.Config{Seed: 7, Runs: 2, Progress: func(done, total int) { steps = done }}
	a, err := e.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if steps != e.Steps(2) {
		t.Fatalf("%d steps, Steps(2) = %d", steps, e.Steps(2))
	}
	cfg.Progress = nil
	b, err := e.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Rows) != len(b.Rows) || len(a.Rows) == 0 {
		t.Fatalf("%d and %d rows", len(a.Rows), len(b.Rows))
	}
	alone, paper := 0, 0
	byName := map[string]float64{}
	for _, r := range a.Rows {
		byName[r.Metric] = r.Mean
	}
	for i, r := range a.Rows {
		if o := b.Rows[i]; r.Metric != o.Metric || r.Mean != o.Mean || r.SD != o.SD {
			t.Errorf("not deterministic: %+v vs %+v", r, b.Rows[i])
		}
		if r.N != 2 || math.IsNaN(r.Mean) || r.Mean < 0 {
			t.Errorf("%s = %v over %d runs", r.Metric, r.Mean, r.N)
		}
		if rest, ok := strings.CutPrefix(r.Metric, "average load as map % + reduce %"); ok {
			if all, ok := byName["average load"+rest]; !ok || math.Abs(r.Mean-2*all) > 1e-9 {
				t.Errorf("%s = %v, not twice the share of all slots (%v, %v)", r.Metric, r.Mean, all, ok)
			}
		} else if strings.HasPrefix(r.Metric, "average load") && (r.Mean <= 0 || r.Mean > 1) {
			t.Errorf("%s = %v, not a share of the slots", r.Metric, r.Mean)
		}
		if strings.Contains(r.Metric, "one job at a time") {
			alone++
			if strings.HasSuffix(r.Metric, "one job at a time") && r.Mean != 0 {
				t.Errorf("%s = %v: a job alone on the cluster has T_J ≤ its deadline", r.Metric, r.Mean)
			}
		}
		if !math.IsNaN(r.Paper) {
			paper++
		}
	}
	if alone != 4 || paper < 12 {
		t.Errorf("%d one-job rows, %d rows with a paper figure", alone, paper)
	}
	if len(a.Notes) == 0 {
		t.Error("no notes")
	}
}

// TestARIAAloneMeetsDeadline: a job alone on an idle cluster (threshold 0)
// with the default's upper-bound pair meets its deadline of at least T_J,
// on the testbed's 4 + 4 slots a worker and on 1 + 1, where a W2 job's
// unconstrained pair often wants more reduce slots than there are: the
// pair must then take all the reduce slots and more map slots, not just
// be clamped (clamped, 3.7 W2 jobs a run missed alone).
func TestARIAAloneMeetsDeadline(t *testing.T) {
	e, err := experiments.Get("aria")
	if err != nil {
		t.Fatal(err)
	}
	for _, slots := range []string{"1", "4"} {
		res, err := e.Run(context.Background(), experiments.Config{Seed: 1, Runs: 3,
			Set: map[string]string{"slots_per_node": slots, "threshold": "0.95"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{"W1", "W2"} {
			if got := metric(t, res, "missed deadlines per run, "+w+", one job at a time"); got != 0 {
				t.Errorf("%s slots a worker: %s jobs alone miss %v a run, want 0", slots, w, got)
			}
		}
	}
}

// TestARIAMissesMonotone holds Table 3's shape on five seeds at the
// default 25 runs: with the load threshold at Table 3's 85–105 %, missed
// deadlines per run never fall as the threshold rises, in W1 and in W2, and
// W1 misses none (Table 3: 0.43 and 0.54 at 100 and 105 %, none below).
// W2's none below 100 % is not held: a job in its map stage holds no reduce
// slots, so its reduce pair is not in the load the threshold sees, and on
// one of the five seeds a W2 job misses at every threshold (notes/aria.md
// has the run). Per seed the order rests on a few jobs.
func TestARIAMissesMonotone(t *testing.T) {
	ths := []string{"85", "90", "95", "100", "105"}
	perSeed(t, "aria", 25, map[string]string{"threshold": "0.85,0.9,0.95,1,1.05", "variants": "false"}, func(seed uint64, res experiments.Result) {
		for _, w := range []string{"W1", "W2"} {
			prev := 0.0
			for _, th := range ths {
				got := metric(t, res, "missed deadlines per run, "+w+", threshold "+th+" %")
				if got < prev {
					t.Errorf("seed %d, %s: %v missed a run at %s %%, fewer than %v below it", seed, w, got, th, prev)
				}
				if w == "W1" && got != 0 {
					t.Errorf("seed %d, W1: %v missed a run at %s %%, want none", seed, got, th)
				}
				prev = got
			}
		}
	})
}
