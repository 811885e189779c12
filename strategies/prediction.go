package strategies

import (
	"math"

	"gonum.org/v1/gonum/stat/distuv"
)

// PriceStats are online statistics of one host's price (Welford's running
// moments), the input of the Prediction strategy (Sandholm and Lai §5.4).
type PriceStats struct {
	N        int64
	Mean     float64
	m2       float64
	Min, Max float64
}

// Observe adds one price observation.
func (s *PriceStats) Observe(y float64) {
	if math.IsNaN(y) || math.IsInf(y, 0) || y < 0 {
		return
	}
	s.N++
	if s.N == 1 {
		s.Min, s.Max = y, y
	}
	s.Min, s.Max = min(s.Min, y), max(s.Max, y)
	d := y - s.Mean
	s.Mean += d / float64(s.N)
	s.m2 += d * (y - s.Mean)
}

// StdDev is the sample standard deviation.
func (s *PriceStats) StdDev() float64 {
	if s.N < 2 {
		return 0
	}
	return math.Sqrt(s.m2 / float64(s.N-1))
}

// Dist is the price's estimated distribution: a normal with the observed
// moments, truncated at zero (prices are never negative). [recon] Sandholm and
// Lai cite their own earlier work for the PDF estimate; a moment-matched normal
// is the simplest estimate that answers all three queries in closed form.
type Dist struct {
	Mean, StdDev float64
}

// Dist estimates the distribution from the statistics.
func (s *PriceStats) Dist() (Dist, error) {
	if s.N == 0 {
		return Dist{}, ErrNoHistory
	}
	return Dist{Mean: s.Mean, StdDev: s.StdDev()}, nil
}

// CDF is P(price ≤ y).
func (d Dist) CDF(y float64) float64 {
	if y < 0 {
		return 0
	}
	if d.StdDev == 0 {
		if y >= d.Mean {
			return 1
		}
		return 0
	}
	n := distuv.Normal{Mu: d.Mean, Sigma: d.StdDev}
	lo := n.CDF(0)
	return (n.CDF(y) - lo) / (1 - lo)
}

// Quantile is the price p with P(price ≤ p) = g.
func (d Dist) Quantile(g float64) float64 {
	if d.StdDev == 0 {
		return d.Mean
	}
	n := distuv.Normal{Mu: d.Mean, Sigma: d.StdDev}
	lo := n.CDF(0)
	return max(n.Quantile(lo+g*(1-lo)), 0)
}

// The three what-if queries: given two of performance q (the share of the
// host), guarantee g (the probability of getting at least q) and spending x
// (a rate), recommend the third. A rate x against price y buys
// q = x/(x+y), which falls as y rises, so "share ≥ q with probability g"
// means "price ≤ the g-quantile".

// GetPerformance is the share spending x secures with probability g.
func (d Dist) GetPerformance(x, g float64) float64 {
	y := d.Quantile(g)
	if x <= 0 {
		return 0
	}
	return x / (x + y)
}

// GetPrice is the spending rate that secures share q with probability g.
func (d Dist) GetPrice(q, g float64) float64 {
	if q >= 1 {
		return math.Inf(1)
	}
	return q * d.Quantile(g) / (1 - q)
}

// GetGuarantee is the probability that spending x secures share q.
func (d Dist) GetGuarantee(x, q float64) float64 {
	if q <= 0 {
		return 1
	}
	if q >= 1 {
		return 0
	}
	return d.CDF(x * (1 - q) / q)
}
