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
// (threshold 0) under the default (its pair, then spare slots) never misses
// its deadline of at least T_J, and Table 3's figures sit beside ours.
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
// with the upper bound's pair under Algorithm 1 alone (no spare slots: the
// pair is all it gets) meets its deadline of at least T_J, on the
// testbed's 4 + 4 slots a worker and on 1 + 1, where a W2 job's
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
			Set: map[string]string{"slots_per_node": slots, "threshold": "0.95", "bound": "upper", "scheduler": "strict", "reduce_start": "maps-done"}})
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

// TestARIATable3ShapePerSeed holds what of Table 3's shape (ARIA §7.2)
// the default reproduces, on each test seed at the default 25 runs with
// the load threshold from 85 to 110 %: W1 misses none below 100 %, W2
// misses at every threshold from 100 % (more than W1), and W2 misses more
// at 110 % than at 85 % — misses grow with the load. What Table 3 has
// and this does not (W2 none below 100 %, W1 some at 100 and 105 %) is in
// notes/conclusions.md. Mutation that fails it: Eq. 15's allocation
// halved (ARIASlots solving for half the slots): W1 misses below 100 %.
func TestARIATable3ShapePerSeed(t *testing.T) {
	ths := []string{"85", "90", "95", "100", "105", "110"}
	perSeed(t, "aria", 25, map[string]string{"threshold": "0.85,0.9,0.95,1,1.05,1.1", "variants": "false"}, func(seed uint64, res experiments.Result) {
		miss := map[string]float64{}
		for _, w := range []string{"W1", "W2"} {
			for _, th := range ths {
				miss[w+th] = metric(t, res, "missed deadlines per run, "+w+", threshold "+th+" %")
			}
		}
		t.Logf("seed %d: W1 %v, W2 %v", seed, []float64{miss["W185"], miss["W190"], miss["W195"], miss["W1100"], miss["W1105"], miss["W1110"]},
			[]float64{miss["W285"], miss["W290"], miss["W295"], miss["W2100"], miss["W2105"], miss["W2110"]})
		for _, th := range ths[:3] {
			if miss["W1"+th] != 0 {
				t.Errorf("seed %d: W1 misses %v a run at %s %%, want none below 100 %%", seed, miss["W1"+th], th)
			}
		}
		for _, th := range ths[3:] {
			if !(miss["W2"+th] > miss["W1"+th]) {
				t.Errorf("seed %d: at %s %% W2 misses %v a run, W1 %v: want W2 above W1", seed, th, miss["W2"+th], miss["W1"+th])
			}
		}
		if !(miss["W2110"] > miss["W285"]) {
			t.Errorf("seed %d: W2 misses %v a run at 110 %%, %v at 85 %%: want more at the higher load", seed, miss["W2110"], miss["W285"])
		}
	})
}
