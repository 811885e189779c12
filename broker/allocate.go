package broker

import (
	"math"
	"slices"
	"time"

	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/strategies"
)

// rateTolerance is how far a VM's new rate may differ from its current bid
// before the broker re-bids: rounding noise is not worth a message.
const rateTolerance = 0.01

// remaining is what a plan has not spent by now: its budget less what its
// past bids charged and what its current bids have charged so far.
func remaining(rec *planRecord, now time.Time) money.Micro {
	r := rec.Plan.Budget - rec.Plan.Spent
	for _, bid := range rec.Bids {
		r -= bid.charged(now)
	}
	return max(r, 0)
}

// allocate runs the plan's registered strategy on a snapshot of the plan:
// what to spend over the time left, and the active stages. The budgets
// never sum above the remainder, nor spend faster on a VM than the plan's
// mandate allows (rateCap). It does not change rec: stored records are
// shared.
func (b *Broker) allocate(rec *planRecord, now time.Time, v roundView) strategies.Decision {
	left, rest := rec.Plan.End.Sub(now), remaining(rec, now)
	st, err := strategies.ByName(rec.Plan.Strategy)
	if err != nil || left <= 0 || rest <= 0 {
		return strategies.Decision{Stage: slices.Clone(rec.Plan.Stage), Held: slices.Clone(rec.Held)}
	}
	d := st.Allocate(b.snapshot(rec, now, st.Reads(), v, rest, left))
	if rc, ok := b.rateCap(rec); ok {
		for i := range d.Allocs {
			d.Allocs[i].Budget = mandate.Clamp(rc, d.Allocs[i].Budget, d.Allocs[i].Duration)
		}
		d.Allocs = slices.DeleteFunc(d.Allocs, func(a strategies.Allocation) bool { return a.Budget <= 0 })
	}
	return d
}

// snapshot gathers what a strategy reads of a plan at now: the plan's VMs
// and workflows as the hosts last reported them, its capped boost, its
// hosts' prices and its own rates there, its job and what EDF decided.
func (b *Broker) snapshot(rec *planRecord, now time.Time, reads strategies.Reads, v roundView, rest money.Micro, left time.Duration) strategies.Snapshot {
	s := strategies.Snapshot{Remaining: rest, Left: left, Budget: rec.Plan.Budget, Duration: rec.Plan.Duration.D(),
		Stage: slices.Clone(rec.Plan.Stage), Held: slices.Clone(rec.Held), HostWeights: rec.Plan.HostWeights}
	b.mu.Lock()
	defer b.mu.Unlock()
	if reads&strategies.ReadsVMs != 0 {
		s.VMs = b.planVMs(rec, reads&strategies.ReadsJob != 0)
	}
	if reads&strategies.ReadsWorkflows != 0 {
		s.Workflows = b.workflows(rec)
	}
	if reads&strategies.ReadsBoost != 0 {
		s.Boost = countedBoost(&rec.Plan) * v.boostScale
	}
	if reads&strategies.ReadsPrices != 0 {
		s.Prices, s.OwnRates = b.prices(rec, s.VMs, now)
	}
	if reads&strategies.ReadsJob != 0 {
		s.Job = b.jobInput(rec, v.jobs, s.VMs)
	}
	return s
}

// planVMs are the plan's VMs the broker knows, in the plan's order, where
// the hosts last reported them — or, for a job, where it was admitted,
// since its price and queue were for those hosts; b.mu must be held.
func (b *Broker) planVMs(rec *planRecord, admitted bool) []strategies.VM {
	out := make([]strategies.VM, 0, len(rec.Plan.VMs))
	for _, pv := range rec.Plan.VMs {
		host, st, ok := b.vmInfo(pv.VM)
		if !ok {
			continue
		}
		if admitted {
			host = pv.Host
		}
		out = append(out, strategies.VM{Name: pv.VM, Host: host, Idle: st.Idle})
	}
	return out
}

// known are those of vms the broker knows; b.mu must be held.
func (b *Broker) known(vms []string) []strategies.VM {
	var out []strategies.VM
	for _, vm := range vms {
		if host, st, ok := b.vmInfo(vm); ok {
			out = append(out, strategies.VM{Name: vm, Host: host, Idle: st.Idle})
		}
	}
	return out
}

// workflows are the plan's workflows, each stage with its known VMs; b.mu
// must be held.
func (b *Broker) workflows(rec *planRecord) []strategies.Workflow {
	out := make([]strategies.Workflow, len(rec.Plan.Workflows))
	for i, w := range rec.Plan.Workflows {
		out[i] = strategies.Workflow{Name: w.Name, Weight: w.Weight, Stages: make([]strategies.Stage, len(w.Stages))}
		for k, s := range w.Stages {
			out[i].Stages[k] = strategies.Stage{Name: s.Name, Weight: s.Weight, VMs: b.known(s.VMs)}
		}
	}
	return out
}

// prices are the prices of the hosts of vms, and the rates of the plan's
// bids running on them; b.mu must be held.
func (b *Broker) prices(rec *planRecord, vms []strategies.VM, now time.Time) (prices, own map[string]float64) {
	prices, own = map[string]float64{}, map[string]float64{}
	for _, v := range vms {
		prices[v.Host] = b.hosts[v.Host].Price
		if bid, ok := rec.Bids[v.Name]; ok && !bid.ended(now) {
			own[v.Name] = bid.rate()
		}
	}
	return prices, own
}

// needsChange reports whether a round would change anything of a plan:
// a stage moved, a bid ended, or a VM's wanted rate left the tolerance.
// Strategies fund a VM at most once, so the wanted VMs all kept and as
// many as the bids means no bid is dropped.
func needsChange(rec *planRecord, want strategies.Decision, now time.Time) bool {
	if !slices.Equal(want.Stage, rec.Plan.Stage) || !sameHeld(want.Held, rec.Held) {
		return true
	}
	for _, cur := range rec.Bids {
		if cur.ended(now) {
			return true
		}
	}
	for _, a := range want.Allocs {
		cur, ok := rec.Bids[a.VM]
		if !ok || !keeps(cur, a, now) {
			return true
		}
	}
	return len(want.Allocs) != len(rec.Bids) || overCommits(rec, want.Allocs, now)
}

// keeps reports whether the bid in force is close enough to what a round
// wants (same host, rate within the tolerance) to leave it alone.
func keeps(cur bidRec, a strategies.Allocation, now time.Time) bool {
	if cur.ended(now) || cur.Host != a.Host {
		return false
	}
	r0, r1 := cur.rate(), money.Rate(a.Budget, a.Duration)
	return math.Abs(r1-r0) <= rateTolerance*max(r0, r1)
}

// overCommits reports whether the bids a round would keep, with what is
// left of their budgets, and the ones it would send, together commit more
// than the plan has left: a kept bid may be up to the tolerance above what
// is wanted, and the plan must never commit more than its budget.
func overCommits(rec *planRecord, want []strategies.Allocation, now time.Time) bool {
	var commit money.Micro
	for _, a := range want {
		if cur, ok := rec.Bids[a.VM]; ok && keeps(cur, a, now) {
			commit += cur.Budget - cur.charged(now)
		} else {
			commit += a.Budget
		}
	}
	return commit > remaining(rec, now)
}

// sameHeld reports whether two Held lists hold the same workflows (nil
// and all false alike).
func sameHeld(a, b []bool) bool {
	for i := range max(len(a), len(b)) {
		if (i < len(a) && a[i]) != (i < len(b) && b[i]) {
			return false
		}
	}
	return true
}
