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
// excess, loads are shares of the cluster, a job run alone (threshold 0)
// never misses its deadline of at least T_J, and Table 3's figures sit
// beside ours.
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
	for i, r := range a.Rows {
		if o := b.Rows[i]; r.Metric != o.Metric || r.Mean != o.Mean || r.SD != o.SD {
			t.Errorf("not deterministic: %+v vs %+v", r, b.Rows[i])
		}
		if r.N != 2 || math.IsNaN(r.Mean) || r.Mean < 0 {
			t.Errorf("%s = %v over %d runs", r.Metric, r.Mean, r.N)
		}
		if strings.HasPrefix(r.Metric, "average load") && (r.Mean <= 0 || r.Mean > 1) {
			t.Errorf("%s = %v, not a share of the slots", r.Metric, r.Mean)
		}
		if strings.Contains(r.Metric, "one job at a time") {
			alone++
			if r.Mean != 0 {
				t.Errorf("%s = %v: a job alone on the cluster has T_J ≤ its deadline", r.Metric, r.Mean)
			}
		}
		if !math.IsNaN(r.Paper) {
			paper++
		}
	}
	if alone != 2 || paper < 12 {
		t.Errorf("%d one-job rows, %d rows with a paper figure", alone, paper)
	}
	if len(a.Notes) == 0 {
		t.Error("no notes")
	}
}
