package strategies_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/strategies"
)

func targets(n int) []strategies.Target {
	ts := make([]strategies.Target, n)
	for i := range ts {
		ts[i] = strategies.Target{VM: fmt.Sprintf("vm-%d", i), Host: fmt.Sprintf("host-%d", i%3)}
	}
	return ts
}

func TestFairShareSpendsExactlyTheBudgetEvenly(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for range 1000 {
		n := 1 + rng.IntN(50)
		b := money.Micro(n) + money.Micro(rng.Int64N(int64(money.Max)-int64(n)))
		allocs, err := strategies.FairShare{}.Plan(strategies.Input{Budget: b, Duration: time.Hour, Targets: targets(n)})
		if err != nil {
			t.Fatal(err)
		}
		var sum money.Micro
		lo, hi := allocs[0].Budget, allocs[0].Budget
		for i, a := range allocs {
			if a.VM != fmt.Sprintf("vm-%d", i) || a.Host != fmt.Sprintf("host-%d", i%3) {
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

func TestFairShareRefusesWhatCannotBeFunded(t *testing.T) {
	cases := []struct {
		in   strategies.Input
		want error
	}{
		{strategies.Input{Budget: 10, Duration: time.Hour}, strategies.ErrNoTargets},
		{strategies.Input{Budget: 10, Duration: 0, Targets: targets(1)}, strategies.ErrDuration},
		{strategies.Input{Budget: 2, Duration: time.Hour, Targets: targets(3)}, strategies.ErrBudget},
	}
	for _, c := range cases {
		if _, err := (strategies.FairShare{}).Plan(c.in); !errors.Is(err, c.want) {
			t.Errorf("%+v: got %v, want %v", c.in, err, c.want)
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
}

func ExampleFairShare() {
	allocs, _ := strategies.FairShare{}.Plan(strategies.Input{
		Budget: 10_000_001, Duration: time.Hour,
		Targets: []strategies.Target{{VM: "a1", Host: "host-1"}, {VM: "a2", Host: "host-2"}},
	})
	for _, a := range allocs {
		fmt.Println(a.VM, a.Host, a.Budget)
	}
	// Output:
	// a1 host-1 5.000001
	// a2 host-2 5
}
