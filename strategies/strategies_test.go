package strategies_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/strategies"
)

func vms(n int) []strategies.VM {
	out := make([]strategies.VM, n)
	for i := range out {
		out[i] = strategies.VM{Name: fmt.Sprintf("vm-%d", i), Host: fmt.Sprintf("host-%d", i%3)}
	}
	return out
}

func fair(s strategies.Snapshot) strategies.Decision { return strategies.FairShare{}.Allocate(s) }

func TestFairShareSpendsExactlyTheBudgetEvenly(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for range 1000 {
		n := 1 + rng.IntN(50)
		b := money.Micro(n) + money.Micro(rng.Int64N(int64(money.Max)-int64(n)))
		allocs := fair(strategies.Snapshot{Remaining: b, Left: time.Hour, VMs: vms(n)}).Allocs
		if len(allocs) != n {
			t.Fatalf("%d VMs, %d allocations", n, len(allocs))
		}
		var sum money.Micro
		lo, hi := allocs[0].Budget, allocs[0].Budget
		for i, a := range allocs {
			if a.VM != fmt.Sprintf("vm-%d", i) || a.Host != fmt.Sprintf("host-%d", i%3) || a.Duration != time.Hour {
				t.Fatalf("allocation %d is %+v", i, a)
			}
			sum += a.Budget
			lo, hi = min(lo, a.Budget), max(hi, a.Budget)
		}
		if sum != b || hi-lo > 1 || lo < 1 {
			t.Fatalf("budget %s over %d VMs: sum %s, spread %d", b, n, sum, hi-lo)
		}
	}
}

// TestFairShareFundsOnlyWhatItCan: a plan with no VMs known, no time or no
// money left gets nothing; a budget too small for every VM funds the first
// ones with a micro-credit each and never spends more than it has.
func TestFairShareFundsOnlyWhatItCan(t *testing.T) {
	cases := []struct {
		s    strategies.Snapshot
		want int // VMs funded
	}{
		{strategies.Snapshot{Remaining: 10, Left: time.Hour}, 0},
		{strategies.Snapshot{Remaining: 10, Left: 0, VMs: vms(1)}, 0},
		{strategies.Snapshot{Remaining: 0, Left: time.Hour, VMs: vms(1)}, 0},
		{strategies.Snapshot{Remaining: 2, Left: time.Hour, VMs: vms(3)}, 2},
	}
	for _, c := range cases {
		d := fair(c.s)
		var sum money.Micro
		for _, a := range d.Allocs {
			if a.Budget != 1 && c.want == 2 {
				t.Errorf("%+v: allocation %+v", c.s, a)
			}
			sum += a.Budget
		}
		if len(d.Allocs) != c.want || sum > c.s.Remaining {
			t.Errorf("%+v: got %+v, want %d VMs funded", c.s, d.Allocs, c.want)
		}
	}
}

func TestByName(t *testing.T) {
	if s, err := strategies.ByName("fair"); err != nil || s.Name() != "fair" {
		t.Fatalf("fair: %v %v", s, err)
	}
	if _, err := strategies.ByName("greedy"); !errors.Is(err, strategies.ErrUnknown) {
		t.Fatalf("greedy: %v", err)
	}
	want := []string{"best-response", "bottleneck", "deadline", "fair", "stage", "stage-bottleneck", "stage-carry", "workflow"}
	if got := strategies.Names(); !slices.Equal(got, want) {
		t.Fatalf("registered %v, want %v", got, want)
	}
	for _, name := range want {
		if s, err := strategies.ByName(name); err != nil || s.Name() != name {
			t.Fatalf("%s: %v %v", name, s, err)
		}
	}
}

func ExampleFairShare() {
	d := strategies.FairShare{}.Allocate(strategies.Snapshot{
		Remaining: 10_000_001, Left: time.Hour,
		VMs: []strategies.VM{{Name: "a1", Host: "host-1"}, {Name: "a2", Host: "host-2"}},
	})
	for _, a := range d.Allocs {
		fmt.Println(a.VM, a.Host, a.Budget, a.Duration)
	}
	// Output:
	// a1 host-1 5.000001 1h0m0s
	// a2 host-2 5 1h0m0s
}
