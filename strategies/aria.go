package strategies

import (
	"fmt"
	"math"
)

// ARIABounds are a job's completion-time bounds (ARIA Eqs. 1–9) for nM
// maps and nR reduces on sM map and sR reduce slots: T_low = A·nM/sM +
// B·nR/sR + C with the averages (A = M_avg, B = Shtyp_avg + R_avg, C =
// Sh1_avg − Shtyp_avg), T_up analogously with the maxima and the makespan
// theorem's (n−1)/k + λ, and their mean, which ARIA uses (its Eq. 7 is a
// typo for (T_up + T_low)/2).
func ARIABounds(p JobProfile, nM, nR, sM, sR int) (low, up, avg float64) {
	a, b, c := p.MapAvg, p.ShTypAvg+p.ReduceAvg, p.Sh1Avg-p.ShTypAvg
	low = a*float64(nM)/float64(sM) + c
	up = float64(nM-1)*p.MapAvg/float64(sM) + p.MapMax + p.Sh1Max - p.ShTypMax
	if nR > 0 {
		low += b * float64(nR) / float64(sR)
		up += float64(nR-1)*(p.ShTypAvg+p.ReduceAvg)/float64(sR) + p.ShTypMax + p.ReduceMax
	}
	return low, up, (low + up) / 2
}

// ARIASlots is the minimum (map, reduce) slots that meet deadline T by the
// lower bound (ARIA Eq. 15): with a = A·nM, b = B·nR, D = T − C, the
// Lagrangian optimum m = √a(√a+√b)/D, r = √b(√a+√b)/D, rounded up (always
// feasible: a/⌈m⌉ + b/⌈r⌉ ≤ D) and checked against the capacity. It is
// recomputed as tasks finish, with the tasks left.
func ARIASlots(p JobProfile, nM, nR int, deadline float64, capM, capR int) (m, r int, err error) {
	a := p.MapAvg * float64(nM)
	b := (p.ShTypAvg + p.ReduceAvg) * float64(nR)
	d := deadline - (p.Sh1Avg - p.ShTypAvg)
	if d <= 0 || a < 0 || b < 0 {
		return 0, 0, fmt.Errorf("%w: %.1f s left after the first shuffle", ErrInfeasible, d)
	}
	sa, sb := math.Sqrt(a), math.Sqrt(b)
	// Rounding noise must not cost a slot: 240/240 is 1, not 2.
	m = int(math.Ceil(sa*(sa+sb)/d - 1e-9))
	r = int(math.Ceil(sb*(sa+sb)/d - 1e-9))
	if nM > 0 {
		m = max(m, 1)
	}
	if nR > 0 {
		r = max(r, 1)
	}
	if m > capM || r > capR {
		return m, r, fmt.Errorf("%w: needs %d map and %d reduce slots, the capacity is %d and %d", ErrInfeasible, m, r, capM, capR)
	}
	return m, r, nil
}

// RateForShare is the spending rate that buys share q of a resource whose
// other users pay y: q = r/(r+y) ⇒ r = q·y/(1−q).
func RateForShare(q, y float64) (float64, error) {
	if q < 0 || q >= 1 || y < 0 || math.IsNaN(q) || math.IsNaN(y) {
		return 0, fmt.Errorf("%w: share %v at price %v", ErrInfeasible, q, y)
	}
	return q * y / (1 - q), nil
}
