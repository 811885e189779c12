package strategies

import (
	"time"
)

// Shape is what a plan's caps depend on, as its user signs it: its VMs,
// or its workflows (each stage with its VMs; only their names are read),
// and its boost.
type Shape struct {
	VMs       []string
	Workflows []Workflow
	Boost     float64
}

// Caps bound how fast a strategy spends a plan's budget B over its
// duration D, for the user to sign (wire.SpendRequest's Pace and VMShare,
// package mandate): the plan never spends faster than Speedup times
// evenly, so that by time t it has spent at most Speedup·B·t/D (its pace
// is D/Speedup), and one VM never more than VMShare of that rate.
//
// Each round spends what is left over the time left, so the bounds hold
// while the plan keeps to its schedule: a plan that fell behind (its
// hosts did not answer for a while) catches up only as fast as they
// allow, and leaves the rest to be released at its end.
type Caps struct {
	Speedup float64 // ≥ 1
	VMShare float64 // in (0, 1]
}

// Pace is the shortest time d's budget may be spent over under c.
func (c Caps) Pace(d time.Duration) time.Duration {
	return time.Duration(float64(d) / max(c.Speedup, 1))
}

// PlanCaps is the caps of strategy's plans of shape s.
func PlanCaps(strategy string, s Shape) (Caps, error) {
	st, err := ByName(strategy)
	if err != nil {
		return Caps{}, err
	}
	c := st.Caps(s)
	c.Speedup = max(c.Speedup, 1)
	c.VMShare = min(max(c.VMShare, 0), 1)
	return c, nil
}

// DeadlinePace is the pace of a deadline job of low seconds of work at a
// full share (its ARIA lower bound, or less): the shortest its run can be
// at MaxDeadlineShare, the most DeadlineEDF ever buys. DeadlineEDF spends
// what is left over the job's predicted rest, work·(1 − progress)/q with
// q ≤ MaxDeadlineShare and work the estimate's upper bound, so while the
// estimate is no lower than low and progress comes no faster than the
// share it buys, it never spends ahead of this pace.
func DeadlinePace(low float64) time.Duration {
	return time.Duration(max(low, 0) / MaxDeadlineShare * float64(time.Second))
}

// Caps of the fair share: evenly over the n VMs.
func (FairShare) Caps(s Shape) Caps { return Caps{Speedup: 1, VMShare: 1 / float64(max(s.vms(), 1))} }

// Caps of workflow priority: each workflow's part evenly over its VMs.
func (WorkflowPriority) Caps(s Shape) Caps {
	share := vmRates(s.Workflows, func(w Workflow, _ int) float64 { return 1 / float64(max(len(w.vms()), 1)) })
	return Caps{Speedup: 1, VMShare: share}
}

// Caps of stage priority: the active stage k of n spends its part at n·w_k/Σw
// times the flat rate (fixed), or (n−k)·w_k/Σ_{j≥k} w_j times what is left
// over the time left (Carry); boosted, one of its VMs takes up to
// (1 + (m−1)·f)/m of the stage's m VMs' rate.
func (p StagePriority) Caps(s Shape) Caps {
	speed := func(w Workflow, k int) float64 {
		var total float64
		from := 0
		if p.Carry || p.Boosted {
			from = k
		}
		for _, st := range w.Stages[from:] {
			total += st.Weight
		}
		if total <= 0 {
			return 0
		}
		return float64(len(w.Stages)-from) * w.Stages[k].Weight / total
	}
	perVM := func(w Workflow, k int) float64 {
		m := float64(max(len(w.Stages[k].VMs), 1))
		if p.Boosted {
			return speed(w, k) * (1 + (m-1)*s.Boost) / m
		}
		return speed(w, k) / m
	}
	var c float64
	parts := workflowShares(s.Workflows)
	for i, w := range s.Workflows {
		var most float64
		for k := range w.Stages {
			most = max(most, speed(w, k))
		}
		c += parts[i] * most
	}
	c = max(c, 1)
	return Caps{Speedup: c, VMShare: vmRates(s.Workflows, perVM) / c}
}

// Caps of bottleneck elimination: an active VM spends up to
// 1 + (n−1)·f times the flat rate of n (its boost f capped system-wide,
// never above the signed one).
func (BottleneckElimination) Caps(s Shape) Caps {
	n := float64(max(s.vms(), 1))
	return Caps{Speedup: 1, VMShare: (1 + (n-1)*s.Boost) / n}
}

// Caps of best response: the plan's rate, all of it on one host when the
// others' prices say so.
func (BestResponse) Caps(Shape) Caps { return Caps{Speedup: 1, VMShare: 1} }

// Caps of the deadline service: its pace is its job's (DeadlinePace), and
// all of its rate may go to one host.
func (DeadlineEDF) Caps(Shape) Caps { return Caps{Speedup: 1, VMShare: 1} }

// vms is how many VMs the plan has.
func (s Shape) vms() int {
	if len(s.Workflows) == 0 {
		return len(s.VMs)
	}
	seen := map[string]bool{}
	for _, w := range s.Workflows {
		for _, v := range w.vms() {
			seen[v.Name] = true
		}
	}
	return len(seen)
}

// workflowShares are the workflows' parts of the plan by weight (Eq. 8).
func workflowShares(ws []Workflow) []float64 {
	var total float64
	for _, w := range ws {
		total += w.Weight
	}
	out := make([]float64, len(ws))
	for i, w := range ws {
		if total > 0 {
			out[i] = w.Weight / total
		}
	}
	return out
}

// vmRates is the largest rate one VM of ws may spend, in flat rates of the
// plan: over the workflows it is in, its workflow's part times, of the
// stages it is in, the most one VM of stage k of workflow w spends
// (perVM; one stage of a workflow is active at a time).
func vmRates(ws []Workflow, perVM func(w Workflow, k int) float64) float64 {
	parts := workflowShares(ws)
	rate := map[string]float64{}
	for i, w := range ws {
		most := map[string]float64{}
		for k, st := range w.Stages {
			for _, v := range st.VMs {
				most[v.Name] = max(most[v.Name], perVM(w, k))
			}
		}
		for vm, r := range most {
			rate[vm] += parts[i] * r
		}
	}
	var top float64
	for _, r := range rate {
		top = max(top, r)
	}
	return top
}
