package strategies_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mrmarket/mrmarket/strategies"
)

// TestARIASlotsAgainstBruteForce: Eq. 15's rounded allocation is feasible
// and at most one slot above the integer optimum of min m + r subject to
// a/m + b/r ≤ D, found by brute force, over random profiles.
func TestARIASlotsAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 15))
	for range 500 {
		p := strategies.JobProfile{MapAvg: 5 + rng.Float64()*50, ShTypAvg: 1 + rng.Float64()*20, ReduceAvg: 5 + rng.Float64()*60, Sh1Avg: rng.Float64() * 30}
		p.MapMax, p.ShTypMax, p.ReduceMax, p.Sh1Max = 1.5*p.MapAvg, 1.5*p.ShTypAvg, 1.5*p.ReduceAvg, 1.5*p.Sh1Avg
		nM, nR := 1+rng.IntN(400), 1+rng.IntN(60)
		a, b := p.MapAvg*float64(nM), (p.ShTypAvg+p.ReduceAvg)*float64(nR)
		c := p.Sh1Avg - p.ShTypAvg
		// A deadline between 10 % and 2× the single-slot-free time.
		deadline := c + (a/50+b/10)*(0.5+rng.Float64()*2)
		m, r, err := strategies.ARIASlots(p, nM, nR, deadline, 100_000, 100_000)
		if err != nil {
			t.Fatal(err)
		}
		d := deadline - c
		if a/float64(m)+b/float64(r) > d*(1+1e-12) {
			t.Fatalf("(%d, %d) misses the deadline: %v > %v", m, r, a/float64(m)+b/float64(r), d)
		}
		best := math.MaxInt
		for mm := 1; mm <= m; mm++ {
			rest := d - a/float64(mm)
			if rest <= 0 {
				continue
			}
			rr := int(math.Ceil(b/rest - 1e-9))
			if a/float64(mm)+b/float64(rr) > d*(1+1e-12) {
				rr++
			}
			best = min(best, mm+max(rr, 1))
		}
		if m+r > best+1 {
			t.Fatalf("Eq. 15 gives %d + %d = %d slots, the optimum is %d", m, r, m+r, best)
		}
		// The bounds bracket the estimate the allocation was made for.
		low, up, avg := strategies.ARIABounds(p, nM, nR, m, r)
		if !(low <= avg && avg <= up) || low > deadline*(1+1e-9) {
			t.Fatalf("bounds %v %v %v for deadline %v", low, avg, up, deadline)
		}
	}
	if _, _, err := strategies.ARIASlots(strategies.JobProfile{MapAvg: 10, Sh1Avg: 50}, 10, 1, 20, 10, 10); !errors.Is(err, strategies.ErrInfeasible) {
		t.Fatalf("a deadline before the first shuffle ends: %v", err)
	}
	if _, _, err := strategies.ARIASlots(strategies.JobProfile{MapAvg: 10, ReduceAvg: 10}, 1000, 10, 20, 10, 10); !errors.Is(err, strategies.ErrInfeasible) {
		t.Fatalf("beyond capacity: %v", err)
	}
}

func TestRateForShare(t *testing.T) {
	r, err := strategies.RateForShare(2.0/3, 100)
	if err != nil || math.Abs(r-200) > 1e-9 {
		t.Fatalf("2/3 of a host the others pay 100 for: %v %v", r, err)
	}
	if _, err := strategies.RateForShare(1, 100); err == nil {
		t.Fatal("the whole host was priced")
	}
}
