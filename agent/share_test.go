package agent_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mrmarket/mrmarket/agent"
)

func TestSharesFollowTheRule(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n := 1 + rng.IntN(40)
		vms := make([]string, n)
		rates := map[string]float64{}
		var total float64
		funded := 0
		for i := range vms {
			vms[i] = fmt.Sprintf("vm%d", i)
			if rng.IntN(3) > 0 {
				r := rng.Float64() * 1e6
				rates[vms[i]] = r
				total += r
				funded++
			} else if rng.IntN(2) == 0 {
				rates[vms[i]] = 0
			}
		}
		q := agent.Shares(vms, rates)
		var sum float64
		for _, vm := range vms {
			sum += q[vm]
		}
		if math.Abs(sum-1) > 1e-9 || len(q) != n {
			t.Fatalf("%d VMs: shares sum to %v (%v)", n, sum, q)
		}
		if funded == 0 {
			for _, vm := range vms {
				if math.Abs(q[vm]-1/float64(n)) > 1e-12 {
					t.Fatalf("no funded bids: %s gets %v, want 1/%d", vm, q[vm], n)
				}
			}
			continue
		}
		unfunded := n - funded
		floorTotal := 0.0
		for _, vm := range vms {
			if rates[vm] <= 0 {
				if q[vm] > agent.FloorShare {
					t.Fatalf("unfunded %s gets %v, above the floor", vm, q[vm])
				}
				floorTotal += q[vm]
			}
		}
		if floorTotal > 0.1+1e-12 {
			t.Fatalf("%d unfunded VMs take %v of the host", unfunded, floorTotal)
		}
		// Funded shares are proportional to rates: q_i / r_i is the same for all.
		k := -1.0
		for _, vm := range vms {
			if r := rates[vm]; r > 0 {
				if k < 0 {
					k = q[vm] / r
				} else if math.Abs(q[vm]/r-k) > 1e-9*k {
					t.Fatalf("q/r differs: %v vs %v", q[vm]/r, k)
				}
			}
		}
	}
}

func TestFloorsAreCappedForManyIdleVMs(t *testing.T) {
	vms := []string{"busy"}
	for i := range 1000 {
		vms = append(vms, fmt.Sprintf("idle%d", i))
	}
	q := agent.Shares(vms, map[string]float64{"busy": 5})
	if math.Abs(q["busy"]-0.9) > 1e-12 || math.Abs(q["idle7"]-0.0001) > 1e-15 {
		t.Fatalf("busy %v, idle %v", q["busy"], q["idle7"])
	}
}

func ExampleShares() {
	q := agent.Shares([]string{"alice-1", "bob-1"}, map[string]float64{"alice-1": 2, "bob-1": 1})
	fmt.Printf("alice %.3f bob %.3f\n", q["alice-1"], q["bob-1"])
	q = agent.Shares([]string{"alice-1", "bob-1", "idle-1"}, map[string]float64{"alice-1": 2, "bob-1": 1})
	fmt.Printf("alice %.4f bob %.4f idle %.4f\n", q["alice-1"], q["bob-1"], q["idle-1"])
	// Output:
	// alice 0.667 bob 0.333
	// alice 0.6665 bob 0.3333 idle 0.0002
}
