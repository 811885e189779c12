package strategies_test

import (
	"math"
	"testing"

	"github.com/mrmarket/mrmarket/strategies"
)

// TestEarliestFinishFig7 is MRM's Fig. 7: A (10 s, due 70) and B (20 s, due
// 110) leave [0,60], [70,90] and [110,∞) free; an 80 s job finishes at 90,
// a 100 s one at 130.
func TestEarliestFinishFig7(t *testing.T) {
	q := []strategies.Queued{{Work: 10, Deadline: 70}, {Work: 20, Deadline: 110}}
	for _, c := range []struct{ work, want float64 }{{80, 90}, {100, 130}, {50, 50}, {60, 60}, {61, 71}} {
		got, err := strategies.EarliestFinish(0, q, c.work)
		if err != nil || math.Abs(got-c.want) > 1e-9 {
			t.Errorf("C = %v s: finishes at %v (%v), want %v", c.work, got, err, c.want)
		}
	}
	if _, err := strategies.EarliestFinish(65, q, 1); err == nil {
		t.Fatal("a queue that no longer fits was accepted")
	}
}

func TestMRMPrice(t *testing.T) {
	q := []strategies.Queued{{Work: 10, Deadline: 70}, {Work: 20, Deadline: 110}}
	const kappa, gamma = 2.0, 43.87
	// A deadline after all queued ones takes no slack from them: the
	// price is the first term alone.
	d := 200.0
	with := append(append([]strategies.Queued(nil), q...), strategies.Queued{Work: 30, Deadline: d})
	first := kappa * 30 / (strategies.Slack(0, with, 2, gamma) + 1)
	if got := strategies.MRMPrice(0, q, 30, d, kappa, gamma); math.Abs(got-first) > 1e-12 {
		t.Fatalf("price %v, want the first term %v", got, first)
	}
	// Jumping ahead of B costs B's lost slack on top.
	if strategies.MRMPrice(0, q, 30, 100, kappa, gamma) <= kappa*30/(strategies.Slack(0, append(append([]strategies.Queued(nil), q...), strategies.Queued{Work: 30, Deadline: 100}), 2, gamma)+1) {
		t.Fatal("jumping over a queued job is free")
	}
	// Empty queue: a delay-sensitive user paying α·p picks δ = κ/α − 1.
	for _, alpha := range []float64{1.1, 1.5, 2} {
		p := 40.0
		curve, err := strategies.PriceCurve(0, nil, p, kappa, gamma, 0.01, 20000)
		if err != nil {
			t.Fatal(err)
		}
		pick, ok := strategies.Cheapest(curve, alpha*p)
		if !ok {
			t.Fatalf("α = %v: nothing affordable", alpha)
		}
		delta := (pick.Deadline - p) / gamma
		if math.Abs(delta-(kappa/alpha-1)) > 0.01/gamma+1e-9 {
			t.Fatalf("α = %v: slack %v, want κ/α − 1 = %v", alpha, delta, kappa/alpha-1)
		}
	}
}
