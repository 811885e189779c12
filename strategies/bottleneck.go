package strategies

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
)

// BottleneckElimination moves spending from a plan's idle VMs to its busy
// ones (Sandholm and Lai, Alg. 5.1): with flat rate r = b/d, n_i idle and n_a active
// VMs and boost f ∈ [0, 1), an active VM spends r·(1 + (n_i/n_a)·f) and an
// idle one r·(1 − f). The mean stays r (Eq. 10), or below it when every VM
// is idle.
type BottleneckElimination struct {
	Boost float64
}

// Name is "bottleneck".
func (BottleneckElimination) Name() string { return "bottleneck" }

// Reads the plan's VMs and its capped boost.
func (BottleneckElimination) Reads() Reads { return ReadsVMs | ReadsBoost }

// Allocate spends s.Remaining over s.VMs for the time left at the plan's
// capped boost s.Boost (the receiver's Boost is not used: the broker caps
// every plan's boost with the others').
func (BottleneckElimination) Allocate(s Snapshot) Decision {
	if !s.spendable() {
		return s.nothing()
	}
	be := BottleneckElimination{Boost: s.Boost}
	return Decision{Allocs: be.budgets(make([]Allocation, 0, len(s.VMs)), s.VMs, s.Remaining, s.Left), Stage: s.Stage}
}

// budgets appends total spent over vms for d by Alg. 5.1: ActiveIdle's
// rates, each budget rounded down, nothing for a boost out of range. Rates
// is the same rule over maps; this is the hot loop of a large round.
func (s BottleneckElimination) budgets(out []Allocation, vms []VM, total money.Micro, d time.Duration) []Allocation {
	if len(vms) == 0 || s.Check() != nil {
		return out
	}
	ni := 0
	for _, v := range vms {
		if v.Idle {
			ni++
		}
	}
	flat := float64(total) / d.Seconds() / float64(len(vms))
	active, idle := s.ActiveIdle(flat, ni, len(vms)-ni)
	from := len(out)
	var sum money.Micro
	for _, v := range vms {
		rate := active
		if v.Idle {
			rate = idle
		}
		b := money.Micro(math.Floor(rate * d.Seconds()))
		sum += b
		out = append(out, Allocation{VM: v.Name, Host: v.Host, Budget: b, Duration: d})
	}
	// Floating point may round the boosted rates a micro-credit over the
	// total: take it back from the largest budget.
	if over := sum - total; over > 0 {
		top := from
		for i := from; i < len(out); i++ {
			if out[i].Budget > out[top].Budget {
				top = i
			}
		}
		out[top].Budget -= over
	}
	kept := slices.DeleteFunc(out[from:], func(a Allocation) bool { return a.Budget <= 0 })
	return out[:from+len(kept)]
}

// Check validates the boost.
func (s BottleneckElimination) Check() error {
	if s.Boost < 0 || s.Boost >= 1 || math.IsNaN(s.Boost) {
		return fmt.Errorf("strategies: boost must be in [0, 1), got %v", s.Boost)
	}
	return nil
}

// Rates gives every VM's rate for flat rate r, given which VMs are idle.
func (s BottleneckElimination) Rates(flat float64, vms []string, idle map[string]bool) (map[string]float64, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	ni := 0
	for _, vm := range vms {
		if idle[vm] {
			ni++
		}
	}
	active, idleRate := s.ActiveIdle(flat, ni, len(vms)-ni)
	out := make(map[string]float64, len(vms))
	for _, vm := range vms {
		if idle[vm] {
			out[vm] = idleRate
		} else {
			out[vm] = active
		}
	}
	return out, nil
}

// ActiveIdle is Alg. 5.1's two rates for ni idle and na active VMs at flat
// rate r: r·(1 + (ni/na)·f) and r·(1 − f).
func (s BottleneckElimination) ActiveIdle(flat float64, ni, na int) (active, idle float64) {
	idle = flat * (1 - s.Boost)
	if na == 0 {
		return flat, idle
	}
	return flat * (1 + float64(ni)/float64(na)*s.Boost), idle
}

// CapBoosts scales the boosts of all plans using bottleneck elimination so
// that their sum stays within limit (Sandholm and Lai §7.4: the system limits the
// aggregate boost to 0.9, so one strategic user gets 0.9, two get 0.45).
func CapBoosts(boosts []float64, limit float64) []float64 {
	var sum float64
	for _, f := range boosts {
		sum += f
	}
	scale := BoostScale(sum, limit)
	out := make([]float64, len(boosts))
	for i, f := range boosts {
		out[i] = f * scale
	}
	return out
}

// BoostScale is what CapBoosts multiplies every boost by when they sum to
// sum: 1 within limit, else limit/sum. A caller that keeps the sum as the
// plans change scales one plan's boost without reading the others'.
func BoostScale(sum, limit float64) float64 {
	if sum > limit && sum > 0 {
		return limit / sum
	}
	return 1
}
