package experiments_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/mrmarket/mrmarket/hadoopvm/sim/experiments"
)

// TestJockeyShortRun: one run of the Jockey experiment is deterministic for
// its seed and sane: every policy's SLOs met is a fraction, the max
// allocation meets at least as many as the static allocation and is above
// the oracle by more than Jockey.
func TestJockeyShortRun(t *testing.T) {
	e, err := experiments.Get("jockey")
	if err != nil {
		t.Fatal(err)
	}
	run := func() experiments.Result {
		steps := 0
		res, err := e.Run(context.Background(), experiments.Config{Seed: 3, Runs: 1, Progress: func(done, _ int) { steps = done }})
		if err != nil {
			t.Fatal(err)
		}
		if steps != e.Steps(1) {
			t.Fatalf("%d steps, Steps(1) = %d", steps, e.Steps(1))
		}
		return res
	}
	a, b := run(), run()
	if len(a.Rows) != len(b.Rows) {
		t.Fatalf("%d rows then %d", len(a.Rows), len(b.Rows))
	}
	got := map[string]float64{}
	for i, r := range a.Rows {
		if r.Mean != b.Rows[i].Mean || r.SD != b.Rows[i].SD {
			t.Errorf("%s: %v then %v", r.Metric, r.Mean, b.Rows[i].Mean)
		}
		got[r.Metric] = r.Mean
		t.Logf("%s: %s (paper %s)", r.Metric, r.OursString(), r.PaperString())
	}
	n := 0
	for m, v := range got {
		if strings.HasPrefix(m, "SLOs met, ") {
			n++
			if v < 0 || v > 1 {
				t.Errorf("%s = %v, not a fraction", m, v)
			}
		}
	}
	if n != 4 {
		t.Fatalf("%d SLO rows, want 4", n)
	}
	if got["SLOs met, max allocation"] < got["SLOs met, Jockey w/o adaptation"] {
		t.Errorf("max allocation met %v of the SLOs, the static allocation %v", got["SLOs met, max allocation"], got["SLOs met, Jockey w/o adaptation"])
	}
	if got["allocation above the oracle, max allocation"] <= got["allocation above the oracle, Jockey"] {
		t.Errorf("max allocation %v above the oracle, Jockey %v", got["allocation above the oracle, max allocation"], got["allocation above the oracle, Jockey"])
	}
}

// jockeyMargin is the fewest SLOs (of 160: 20 runs of eight jobs) by which
// Jockey must beat each ablation on a seed. It was chosen on the tuning
// seeds (experiments.TuningSeeds), where the smallest lead was 4: half of
// that.
const jockeyMargin = 2

// TestJockeyBeatsBothAblationsPerSeed: Jockey §5's conclusion that
// neither the model nor control is enough without the other, on each test
// seed (20 runs of eight jobs): Jockey meets at least jockeyMargin more
// SLOs than Jockey w/o adaptation (the simulator's allocation at the
// start, held) and than Jockey w/o simulator (the same controller on
// Amdahl's law). Mutations that fail it: a controller that keeps its
// first allocation (Step returning the allocation it started with) ties
// w/o adaptation; C(p, a) the fastest of its simulations rather than the
// slowest loses to w/o simulator.
func TestJockeyBeatsBothAblationsPerSeed(t *testing.T) {
	perSeed(t, "jockey", 20, nil, func(seed uint64, res experiments.Result) {
		jobs := 20.0 * 8
		met := func(policy string) float64 { return math.Round(metric(t, res, "SLOs met, "+policy) * jobs) }
		jockey := met("Jockey")
		t.Logf("seed %d: Jockey %.0f of %.0f, w/o adaptation %.0f, w/o simulator %.0f", seed, jockey, jobs,
			met("Jockey w/o adaptation"), met("Jockey w/o simulator"))
		for _, ablation := range []string{"Jockey w/o adaptation", "Jockey w/o simulator"} {
			if got := met(ablation); !(jockey >= got+jockeyMargin) {
				t.Errorf("seed %d: Jockey met %.0f SLOs of %.0f, %s %.0f: want a lead of at least %d", seed, jockey, jobs, ablation, got, jockeyMargin)
			}
		}
	})
}
