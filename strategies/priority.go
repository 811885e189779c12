package strategies

import (
	"slices"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
)

// Workflow is a group of a plan's VMs that workflow priority weighs as one
// (Sandholm and Lai §5.1), with its stages for stage priority (§5.2).
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

// StagePriority is Sandholm and Lai's stage priority (§5.2): a workflow's part of
// the budget (Eq. 8) split over its n stages by weight, SP_i = b·w_i/Σw
// (Eq. 9). [recon] The paper does not say when a stage's part is spent;
// §7.3 reads it as rates ("all stages with weight 1 received the same
// budget", the fair-share rate): stage i is given an equal slice of the
// plan's period, d/n, so while it is active it spends at SP_i/(d/n) =
// n·w_i/Σw times the flat rate b/d, evenly over its VMs. The split is
// fixed: a stage that ends early leaves its part unspent (it is released
// with the rest at the end), and a stage that runs long keeps its rate
// while the plan has money.
//
// With Carry it is our variant, stage-carry: each round re-splits what is
// left over the stages left, the active stage's part spent over an equal
// share of the time left — so what an early stage did not spend carries
// forward to the later ones, and the whole budget is spent by d. With
// Boosted (always carrying) it is our stage-bottleneck: the active stage's
// idle VMs give to its busy ones by bottleneck elimination at the plan's
// capped boost.
//
// A stage whose VMs are all idle is done once the next stage's are not (its
// job has started), and the workflow moves on to it (the broker also moves
// it on when a later stage is reported started), one stage at a time,
// never back; until then the active stage keeps its funds. The next
// stage's VMs are idle until its job starts, and a later stage's may still
// be busy from an earlier run: a workflow moved past the next stage then
// left it unfunded when it started, starved beside busy guests (make e2e:
// stage 2 ran 146 s at a share of 0.038 in run 31, and made no progress in
// 8 minutes in run 34, while stage 3 was funded). A stage the broker was
// told started is held (Snapshot.Held) until its VMs are seen busy: its
// job may take a while to compute, and its VMs, idle since before it, are
// not a stage that ended (in run 42 of make e2e the plan moved from a
// just-started stage 2 to stage 3, whose unfunded guest looked busy). The
// last stage spends even when idle.
type StagePriority struct {
	Boosted bool
	Carry   bool
}

// Name is "stage", "stage-carry", or "stage-bottleneck" when Boosted.
func (s StagePriority) Name() string {
	switch {
	case s.Boosted:
		return "stage-bottleneck"
	case s.Carry:
		return "stage-carry"
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
	var whole []money.Micro // each workflow's part of the whole budget
	if !p.Carry && !p.Boosted {
		if s.Budget <= 0 || s.Duration <= 0 {
			return s.nothing()
		}
		if whole, err = workflowParts(s.Budget, s.Workflows); err != nil {
			return s.nothing()
		}
	}
	stage := slices.Clone(s.Stage)
	var held []bool
	if s.Held != nil {
		held = make([]bool, len(s.Workflows))
		copy(held, s.Held)
	}
	var out []Allocation
	for i, w := range s.Workflows {
		k := stage[i]
		if held != nil && held[i] && !allIdle(w.Stages[k].VMs) {
			held[i] = false // its job computes: from now on idle means done
		}
		for (held == nil || !held[i]) && k < len(w.Stages)-1 && allIdle(w.Stages[k].VMs) && !allIdle(w.Stages[k+1].VMs) {
			k++
		}
		stage[i] = k
		vms := w.Stages[k].VMs
		if whole != nil {
			out = fixedStage(out, w, k, whole[i], parts[i], s.Duration, s.Left)
			continue
		}
		weights := make([]float64, 0, len(w.Stages)-k)
		for _, st := range w.Stages[k:] {
			weights = append(weights, st.Weight)
		}
		stageParts, err := WeightSplit(parts[i], weights)
		if err != nil {
			continue
		}
		slice := s.Left / time.Duration(len(weights))
		if p.Boosted && !allIdle(vms) {
			// The stage's idle VMs (stragglers' neighbours) give to its
			// busy ones; all idle means the stage moved on above.
			out = BottleneckElimination{Boost: s.Boost}.budgets(out, vms, stageParts[0], slice)
			continue
		}
		out = even(out, vms, stageParts[0], slice)
	}
	return Decision{Allocs: out, Stage: stage, Held: held}
}

// fixedStage funds stage k of w at Eq. 9's fixed rate: its part of the
// workflow's whole budget over its slice of the period, n·w_k/Σw·whole/d,
// from now until the plan ends or the money runs out — the workflow's
// part of what is left (left) less the later stages' parts, which stay
// theirs: a stage never spends what Eq. 9 gave a later one, and a later
// one never gets what an earlier one left.
func fixedStage(out []Allocation, w Workflow, k int, whole, left money.Micro, period, remaining time.Duration) []Allocation {
	weights := make([]float64, len(w.Stages))
	for j, st := range w.Stages {
		weights[j] = st.Weight
	}
	parts, err := WeightSplit(whole, weights) // refuses weights summing to nothing
	if err != nil {
		return out
	}
	for _, later := range parts[k+1:] {
		left -= later
	}
	rate := float64(parts[k]) * float64(len(w.Stages)) / period.Seconds() // micro-credits per second
	if !(rate > 0) || left <= 0 {
		return out
	}
	d := remaining
	commit := rate * remaining.Seconds()
	if commit > float64(left) {
		commit = float64(left)
		d = time.Duration(commit / rate * float64(time.Second))
	}
	if d <= 0 || commit < 1 {
		return out
	}
	return even(out, w.Stages[k].VMs, money.Micro(commit), d)
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
