package strategies_test

import (
	"math"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/strategies"
)

// TestPlanCaps: what each strategy signs — fair: evenly, a VM 1/n;
// bottleneck: a busy VM up to (1 + (n−1)·f)/n; workflow: a VM its
// workflow's part over its VMs; stage: the plan up to Σ_w p_w·max_k
// n·w_k/Σw times evenly (1/Speedup the pace) and a VM its stage's part;
// best response and deadline: one VM may take it all.
func TestPlanCaps(t *testing.T) {
	vm := func(names ...string) []strategies.VM {
		out := make([]strategies.VM, len(names))
		for i, n := range names {
			out[i] = strategies.VM{Name: n}
		}
		return out
	}
	// stage.txt's plan: digg (2) join 20 [a1 a3], dist 1 [a5], pearson 1
	// [a1 a3]; other (1) one 1 [a2], two 3 [a4].
	digg := []strategies.Workflow{
		{Name: "digg", Weight: 2, Stages: []strategies.Stage{{Weight: 20, VMs: vm("a1", "a3")}, {Weight: 1, VMs: vm("a5")}, {Weight: 1, VMs: vm("a1", "a3")}}},
		{Name: "other", Weight: 1, Stages: []strategies.Stage{{Weight: 1, VMs: vm("a2")}, {Weight: 3, VMs: vm("a4")}}},
	}
	fixed := 2.0/3*(3*20.0/22) + 1.0/3*(2*3.0/4) // Σ_w p_w·max_k n·w_k/Σw
	carry := 2.0/3*(3*20.0/22) + 1.0/3*1         // stage two is the last: 1·3/3
	for _, c := range []struct {
		strategy string
		shape    strategies.Shape
		want     strategies.Caps
	}{
		{"fair", strategies.Shape{VMs: []string{"a1", "a2", "a3", "a4"}}, strategies.Caps{Speedup: 1, VMShare: 0.25}},
		{"bottleneck", strategies.Shape{VMs: []string{"a1", "a2", "a3", "a4"}, Boost: 0.5}, strategies.Caps{Speedup: 1, VMShare: 2.5 / 4}},
		{"workflow", strategies.Shape{Workflows: digg}, strategies.Caps{Speedup: 1, VMShare: 2.0 / 3 / 3}},
		{"stage", strategies.Shape{Workflows: digg}, strategies.Caps{Speedup: fixed, VMShare: 2.0 / 3 * (3 * 20.0 / 22) / 2 / fixed}},
		{"stage-carry", strategies.Shape{Workflows: digg}, strategies.Caps{Speedup: carry, VMShare: 2.0 / 3 * (3 * 20.0 / 22) / 2 / carry}},
		{"stage-bottleneck", strategies.Shape{Workflows: digg, Boost: 0.5}, strategies.Caps{Speedup: carry, VMShare: 2.0 / 3 * (3 * 20.0 / 22) * 1.5 / 2 / carry}},
		{"best-response", strategies.Shape{VMs: []string{"a1", "a2"}}, strategies.Caps{Speedup: 1, VMShare: 1}},
		{"deadline", strategies.Shape{VMs: []string{"a1", "a2"}}, strategies.Caps{Speedup: 1, VMShare: 1}},
	} {
		got, err := strategies.PlanCaps(c.strategy, c.shape)
		if err != nil || math.Abs(got.Speedup-c.want.Speedup) > 1e-9 || math.Abs(got.VMShare-c.want.VMShare) > 1e-9 {
			t.Errorf("%s: %+v %v, want %+v", c.strategy, got, err, c.want)
		}
	}
	if p := (strategies.Caps{Speedup: 2}).Pace(time.Hour); p != 30*time.Minute {
		t.Errorf("pace at twice the even rate: %s", p)
	}
	if d := strategies.DeadlinePace(95); d != 100*time.Second {
		t.Errorf("a job of 95 s at full share: %s", d)
	}
	if _, err := strategies.PlanCaps("greedy", strategies.Shape{}); err == nil {
		t.Error("an unknown strategy has caps")
	}
}
