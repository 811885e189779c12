package strategies

import (
	"fmt"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
)

// Workflow is a group of a plan's VMs that workflow priority weighs as one
// (seed 003 §5.1), with its stages for stage priority (§5.2).
type Workflow struct {
	Name   string
	Weight float64
	Stages []Stage
}

// Stage is one stage of a workflow: its weight and its VMs.
type Stage struct {
	Name    string
	Weight  float64
	Targets []Target
}

// WorkflowPriority splits a series' budget over its workflows by weight
// (Eq. 8), and each workflow's part evenly over its VMs (all stages), spent
// at a constant rate. With weights {1, 0.5} the first workflow spends twice
// the second's rate, as in §7.2.
type WorkflowPriority struct{}

// Name is "workflow".
func (WorkflowPriority) Name() string { return "workflow" }

// PlanWorkflows allocates budget over workflows.
func (WorkflowPriority) PlanWorkflows(budget money.Micro, workflows []Workflow) ([]Allocation, error) {
	if len(workflows) == 0 {
		return nil, ErrNoTargets
	}
	weights := make([]float64, len(workflows))
	for i, w := range workflows {
		weights[i] = w.Weight
	}
	parts, err := WeightSplit(budget, weights)
	if err != nil {
		return nil, err
	}
	var out []Allocation
	for i, w := range workflows {
		var targets []Target
		for _, s := range w.Stages {
			targets = append(targets, s.Targets...)
		}
		if len(targets) == 0 {
			return nil, fmt.Errorf("%w: workflow %q", ErrNoTargets, w.Name)
		}
		if parts[i] < money.Micro(len(targets)) {
			return nil, fmt.Errorf("%w: workflow %q gets %s for %d VMs", ErrBudget, w.Name, parts[i], len(targets))
		}
		for j, p := range money.Split(parts[i], len(targets)) {
			out = append(out, Allocation{VM: targets[j].VM, Host: targets[j].Host, Budget: p})
		}
	}
	return out, nil
}

// StagePriority splits a workflow's budget over its stages by weight
// (Eq. 9). [recon] Seed 003 does not say when a stage's part is spent; here
// each stage has an equal slice of the plan's duration, d/n, and its part is
// spent evenly over its VMs during that slice, so stage i spends at
// n·w_i/Σw times the flat rate b/d and the whole budget is spent by d. The
// broker moves to the next stage when the workflow's progress says so and
// re-plans the rest with Rates.
type StagePriority struct{}

// Name is "stage".
func (StagePriority) Name() string { return "stage" }

// Rates gives the spending rate (micro-credits per second) of each VM of
// the active stage, for a workflow with remaining budget over remaining
// time, the active stage being stage active of stages (earlier ones are
// done). Only the remaining stages share what is left.
func (StagePriority) Rates(remaining money.Micro, left time.Duration, stages []Stage, active int) (map[string]float64, error) {
	if active < 0 || active >= len(stages) {
		return nil, fmt.Errorf("strategies: active stage %d of %d", active, len(stages))
	}
	if left <= 0 {
		return nil, ErrDuration
	}
	rest := stages[active:]
	weights := make([]float64, len(rest))
	for i, s := range rest {
		weights[i] = s.Weight
	}
	parts, err := WeightSplit(remaining, weights)
	if err != nil {
		return nil, err
	}
	slice := left.Seconds() / float64(len(rest))
	vms := rest[0].Targets
	if len(vms) == 0 {
		return nil, fmt.Errorf("%w: stage %q", ErrNoTargets, rest[0].Name)
	}
	out := make(map[string]float64, len(vms))
	for _, t := range vms {
		out[t.VM] = float64(parts[0]) / slice / float64(len(vms))
	}
	return out, nil
}
