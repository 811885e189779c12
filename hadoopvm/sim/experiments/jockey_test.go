package experiments_test

import (
	"context"
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

// TestJockeyAdaptsBetterThanAStaticAllocationPerSeed: Jockey §5's
// conclusion that adapting matters, on each of five seeds (six runs of
// eight jobs each): Jockey meets more SLOs than the allocation it picks
// at the start held all along. A Jockey that never changed its allocation
// would tie and fail.
func TestJockeyAdaptsBetterThanAStaticAllocationPerSeed(t *testing.T) {
	perSeed(t, "jockey", 6, nil, func(seed uint64, res experiments.Result) {
		jockey, static := metric(t, res, "SLOs met, Jockey"), metric(t, res, "SLOs met, Jockey w/o adaptation")
		t.Logf("seed %d: Jockey %.1f %%, w/o adaptation %.1f %%, w/o simulator %.1f %%", seed, 100*jockey, 100*static,
			100*metric(t, res, "SLOs met, Jockey w/o simulator"))
		if !(jockey > static) {
			t.Errorf("seed %d: Jockey met %.1f %% of SLOs, its static allocation %.1f %%", seed, 100*jockey, 100*static)
		}
	})
}

// TestJockeyBeatsBothAblationsPerSeed: Jockey §5's conclusion that
// neither the model nor control is enough without the other, on each of
// five seeds (four runs of eight jobs each): Jockey meets more SLOs than
// Jockey w/o adaptation (the simulator's allocation at the start, held)
// and than Jockey w/o simulator (the same controller on Amdahl's law).
// With C(p, a) the slowest of 4 simulations, not 16, Jockey tied or lost
// to w/o simulator on some seeds (see jockeyTableRuns).
func TestJockeyBeatsBothAblationsPerSeed(t *testing.T) {
	perSeed(t, "jockey", 4, nil, func(seed uint64, res experiments.Result) {
		jockey := metric(t, res, "SLOs met, Jockey")
		for _, ablation := range []string{"Jockey w/o adaptation", "Jockey w/o simulator"} {
			if got := metric(t, res, "SLOs met, "+ablation); !(jockey > got) {
				t.Errorf("seed %d: Jockey met %.1f %% of SLOs, %s %.1f %%", seed, 100*jockey, ablation, 100*got)
			}
		}
	})
}
