package broker

import (
	"math/big"

	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// The bottleneck plans' boosts are capped together: each is scaled by
// strategies.BoostScale of their sum (Sandholm and Lai §7.4). The plan
// store keeps that sum as its plans change (boostSum), so a spend reads
// its own capped boost in constant time rather than summing every running
// plan's, and a round reads it once.

// countedBoost is the boost plan p puts in the capped sum: its own, if it
// is running or starting under a strategy that reads one, else 0. A
// record's boost outside [0, 1) (only a forged record could carry one:
// spends are validated) counts as 0.
func countedBoost(p *wire.Plan) float64 {
	if p.Status != wire.PlanRunning && p.Status != planStarting {
		return 0
	}
	if st, err := strategies.ByName(p.Strategy); err != nil || st.Reads()&strategies.ReadsBoost == 0 {
		return 0
	}
	if !(p.Boost >= 0 && p.Boost < 1) { // NaN too
		return 0
	}
	return p.Boost
}

// boostSumPrec holds any sum of float64s in [0, 1) exactly (their bits
// span at most 1,075 binary places, and a sum of 2^64 of them 64 more):
// the sum is then the same whatever order the plans came and went in,
// and never drifts.
const boostSumPrec = 1200

// boostSum is the exact sum of the boosts counted (countedBoost) over the
// plans of a store.
type boostSum struct{ sum *big.Float }

// change replaces a plan's contribution: from its record before (nil: a
// new plan) to after.
func (s *boostSum) change(before, after *planRecord) {
	if s.sum == nil {
		s.sum = new(big.Float).SetPrec(boostSumPrec)
	}
	var d big.Float
	d.SetPrec(boostSumPrec)
	if before != nil {
		if f := countedBoost(&before.Plan); f != 0 {
			s.sum.Sub(s.sum, d.SetFloat64(f))
		}
	}
	if f := countedBoost(&after.Plan); f != 0 {
		s.sum.Add(s.sum, d.SetFloat64(f))
	}
}

// total is the sum, rounded once to a float64.
func (s *boostSum) total() float64 {
	if s.sum == nil {
		return 0
	}
	f, _ := s.sum.Float64()
	return f
}

// boostScale is what every counted boost is multiplied by now.
func (b *Broker) boostScale() float64 {
	return strategies.BoostScale(b.store.boostTotal(), b.cfg.MaxBoost)
}
