package strategies

import (
	"slices"
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
	Name   string
	Weight float64
	VMs    []VM
}

// vms lists the workflow's VMs, all stages, each once (where it first
// appears).
func (w Workflow) vms() []VM {
	var all []VM
	for _, s := range w.Stages {
		all = append(all, s.VMs...)
	}
	seen := make(map[string]bool, len(all))
	return slices.DeleteFunc(all, func(v VM) bool {
		dup := seen[v.Name]
		seen[v.Name] = true
		return dup
	})
}

// workflowParts splits total over the workflows by weight (Eq. 8).
func workflowParts(total money.Micro, ws []Workflow) ([]money.Micro, error) {
	weights := make([]float64, len(ws))
	for i, w := range ws {
		weights[i] = w.Weight
	}
	return WeightSplit(total, weights)
}

// WorkflowPriority splits a plan's budget left over its workflows by
// weight (Eq. 8), and each workflow's part evenly over its VMs (all
// stages), spent at a constant rate. With weights {1, 0.5} the first
// workflow spends twice the second's rate, as in §7.2.
type WorkflowPriority struct{}

// Name is "workflow".
func (WorkflowPriority) Name() string { return "workflow" }

// Reads the plan's workflows.
func (WorkflowPriority) Reads() Reads { return ReadsWorkflows }

// Allocate splits s.Remaining over s.Workflows.
func (WorkflowPriority) Allocate(s Snapshot) Decision {
	if !s.spendable() {
		return s.nothing()
	}
	parts, err := workflowParts(s.Remaining, s.Workflows)
	if err != nil {
		return s.nothing()
	}
	var out []Allocation
	for i, w := range s.Workflows {
		out = even(out, w.vms(), parts[i], s.Left)
	}
	return Decision{Allocs: out, Stage: s.Stage}
}

// StagePriority splits each workflow's part (Eq. 8) over its stages by
// weight (Eq. 9). [recon] Seed 003 does not say when a stage's part is
// spent; here each of the n stages left has an equal slice of the time
// left, d/n, and the active stage's part is spent evenly over its VMs
// during that slice, so stage i spends at n·w_i/Σw times the flat rate b/d
// and the whole budget is spent by d. Each round re-splits what is left
// over the stages left.
//
// A stage whose VMs are all idle is done and the workflow moves on (the
// broker also moves it on when a later stage is reported started), never
// back; the last stage spends even when idle. With Boosted it is our
// stage-bottleneck: the active stage's idle VMs give to its busy ones by
// bottleneck elimination at the plan's capped boost.
type StagePriority struct {
	Boosted bool
}

// Name is "stage", or "stage-bottleneck" when Boosted.
func (s StagePriority) Name() string {
	if s.Boosted {
		return "stage-bottleneck"
	}
	return "stage"
}

// Reads the plan's workflows, and with Boosted its boost.
func (s StagePriority) Reads() Reads {
	if s.Boosted {
		return ReadsWorkflows | ReadsBoost
	}
	return ReadsWorkflows
}

// Allocate moves each workflow past its finished stages and funds the
// active one.
func (p StagePriority) Allocate(s Snapshot) Decision {
	if !s.spendable() {
		return s.nothing()
	}
	parts, err := workflowParts(s.Remaining, s.Workflows)
	if err != nil {
		return s.nothing()
	}
	stage := slices.Clone(s.Stage)
	var out []Allocation
	for i, w := range s.Workflows {
		k := stage[i]
		for k < len(w.Stages)-1 && allIdle(w.Stages[k].VMs) {
			k++
		}
		stage[i] = k
		weights := make([]float64, 0, len(w.Stages)-k)
		for _, st := range w.Stages[k:] {
			weights = append(weights, st.Weight)
		}
		stageParts, err := WeightSplit(parts[i], weights)
		if err != nil {
			continue
		}
		slice := s.Left / time.Duration(len(weights))
		vms := w.Stages[k].VMs
		if p.Boosted && !allIdle(vms) {
			// The stage's idle VMs (stragglers' neighbours) give to its
			// busy ones; all idle means the stage moved on above.
			out = BottleneckElimination{Boost: s.Boost}.budgets(out, vms, stageParts[0], slice)
			continue
		}
		out = even(out, vms, stageParts[0], slice)
	}
	return Decision{Allocs: out, Stage: stage}
}

// allIdle reports whether vms are all idle; no VMs are not.
func allIdle(vms []VM) bool {
	if len(vms) == 0 {
		return false
	}
	for _, v := range vms {
		if !v.Idle {
			return false
		}
	}
	return true
}
