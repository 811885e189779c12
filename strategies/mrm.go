package strategies

import (
	"fmt"
	"math"
	"sort"
)

// Queued is a job admitted with a committed deadline: Work seconds of
// processing (its estimate's upper prediction bound, MRM §4) due by
// Deadline (seconds, on the same clock as now).
type Queued struct {
	Work, Deadline float64
}

// EarliestFinish is the earliest time a new job of work seconds can finish
// on one server without breaking any committed deadline (MRM §5, Fig. 7):
// the queued jobs are placed lazily, as late as possible in decreasing
// deadline order, and the new job fills the free time from now. It fails
// if the queued jobs themselves no longer fit.
func EarliestFinish(now float64, queue []Queued, work float64) (float64, error) {
	q := append([]Queued(nil), queue...)
	sort.Slice(q, func(i, j int) bool { return q[i].Deadline > q[j].Deadline })
	type span struct{ from, to float64 }
	var busy []span
	latest := math.Inf(1)
	for _, j := range q {
		end := math.Min(j.Deadline, latest)
		start := end - j.Work
		if start < now-1e-9 {
			return 0, fmt.Errorf("%w: the committed jobs no longer fit", ErrInfeasible)
		}
		busy = append(busy, span{start, end})
		latest = start
	}
	sort.Slice(busy, func(i, j int) bool { return busy[i].from < busy[j].from })
	t, left := now, work
	for _, b := range busy {
		if free := b.from - t; free > 0 {
			if left <= free {
				return t + left, nil
			}
			left -= free
		}
		t = math.Max(t, b.to)
	}
	return t + left, nil
}

// Slack is a job's normalised slack in EDF order (MRM Eq. 13) [recon]:
// (deadline − now − the work of every job due no later, its own included)
// divided by the mean estimated processing time γ̄.
func Slack(now float64, jobs []Queued, i int, gammaBar float64) float64 {
	due := 0.0
	for _, j := range jobs {
		if j.Deadline <= jobs[i].Deadline {
			due += j.Work
		}
	}
	return (jobs[i].Deadline - now - due) / gammaBar
}

// MRMPrice is the price of finishing a new job of work p (its processing
// time) by deadline (MRM Eq. 13): κ·( p/(δ+1) + Σ over queued jobs of
// p_i/(δ'_i+1) − p_i/(δ_i+1) ), δ the new job's slack, δ_i a queued job's
// slack before and δ'_i after the new job is inserted. The second term — the
// slack taken from jobs jumped over — is 0 for a deadline after all of
// theirs. κ scales prices to the users' purchasing power.
func MRMPrice(now float64, queue []Queued, p, deadline, kappa, gammaBar float64) float64 {
	with := append(append([]Queued(nil), queue...), Queued{Work: p, Deadline: deadline})
	price := p / (Slack(now, with, len(with)-1, gammaBar) + 1)
	for i, j := range queue {
		before := Slack(now, queue, i, gammaBar)
		after := Slack(now, with, i, gammaBar)
		price += j.Work/(after+1) - j.Work/(before+1)
	}
	return kappa * price
}

// Quote is one point of a price-deadline curve.
type Quote struct {
	Deadline, Price float64
}

// PriceCurve quotes a new job of work p at deadlines from its earliest
// feasible finish, every step seconds, n points.
func PriceCurve(now float64, queue []Queued, p, kappa, gammaBar, step float64, n int) ([]Quote, error) {
	first, err := EarliestFinish(now, queue, p)
	if err != nil {
		return nil, err
	}
	out := make([]Quote, n)
	for i := range out {
		d := first + float64(i)*step
		out[i] = Quote{Deadline: d, Price: MRMPrice(now, queue, p, d, kappa, gammaBar)}
	}
	return out, nil
}

// Cheapest is the earliest deadline on the curve whose price fits budget.
func Cheapest(curve []Quote, budget float64) (Quote, bool) {
	for _, q := range curve {
		if q.Price <= budget {
			return q, true
		}
	}
	return Quote{}, false
}
