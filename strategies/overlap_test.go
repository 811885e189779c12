package strategies_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mrmarket/mrmarket/strategies"
)

// TestOverlapFig2 is Lin et al.'s Fig. 2: jobs (1,2), (3,1), (2,2) served
// first come first served finish at 2, 4 and 6.
func TestOverlapFig2(t *testing.T) {
	jobs := []strategies.OverlapJob{{Map: 1, Shuffle: 2}, {Map: 3, Shuffle: 1}, {Map: 2, Shuffle: 2}}
	got, err := strategies.SimulateOverlap(jobs, strategies.PolicyFIFO)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{2, 4, 6} {
		if math.Abs(got[i]-want) > 1e-9 {
			t.Fatalf("completions %v, want 2, 4, 6", got)
		}
	}
}

// TestOverlapPolicies: on random batches every policy finishes every job no
// earlier than its own work allows, and the SRPT-based policies beat
// k-LPS's mean response time, as in seed 001 §6.
func TestOverlapPolicies(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	mean := map[string]float64{}
	for range 50 {
		var jobs []strategies.OverlapJob
		at := 0.0
		for range 30 {
			at += rng.ExpFloat64() * 1.3
			x := math.Exp(rng.NormFloat64())
			jobs = append(jobs, strategies.OverlapJob{Release: at, Map: x, Shuffle: x * math.Exp(rng.NormFloat64())})
		}
		for _, p := range []string{strategies.PolicyFIFO, strategies.PolicyMaxSRPT, strategies.PolicySplitSRPT, strategies.PolicyKLPS} {
			done, err := strategies.SimulateOverlap(jobs, p)
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			for i, j := range jobs {
				if done[i] < j.Release+math.Max(j.Map, j.Shuffle)-1e-9 {
					t.Fatalf("%s: job %d done at %v, before its work allows", p, i, done[i])
				}
				mean[p] += done[i] - j.Release
			}
		}
	}
	t.Logf("mean response (sum over runs): %v", mean)
	if !(mean[strategies.PolicyMaxSRPT] < mean[strategies.PolicyKLPS] && mean[strategies.PolicySplitSRPT] < mean[strategies.PolicyKLPS]) {
		t.Fatalf("SRPT policies do not beat k-LPS: %v", mean)
	}
	if _, err := strategies.SimulateOverlap(nil, "lifo"); err == nil {
		t.Fatal("unknown policy accepted")
	}
}
