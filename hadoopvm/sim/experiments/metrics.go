package experiments

import (
	"math"
)

// Utility is Sandholm and Lai's Jensen time-decaying utility (Eq. 4): the value v
// of a workflow less its cost c, decayed by exp(−r·T/Tmin).
func Utility(v, c, t, tmin, r float64) float64 {
	return (v - c) * math.Exp(-r*t/tmin)
}

// Risk is Sandholm and Lai's Arrow-Pratt transform (Eq. 5) of a utility u against
// the uncontended utility uopt: (1 − exp(−γ·u/uopt)) / (1 − exp(−γ)); at
// γ = 0 (risk neutral) its limit u/uopt.
func Risk(u, uopt, gamma float64) float64 {
	if math.Abs(gamma) < 1e-12 {
		return u / uopt
	}
	return (1 - math.Exp(-gamma*u/uopt)) / (1 - math.Exp(-gamma))
}

// CompletionImprovement is Sandholm and Lai's CI (Eq. 6): Σ(T_f − T_s) / Σ T_f
// over workflows run with fair share (fair) and with a strategy (strat).
func CompletionImprovement(fair, strat []float64) float64 {
	var num, den float64
	for i := range fair {
		num += fair[i] - strat[i]
		den += fair[i]
	}
	if den == 0 {
		return 0
	}
	return num / den
}

// Efficiency is Sandholm and Lai's prioritization efficiency (Eq. 7), the mean of
// the workflows' utilities over the uncontended one, each passed through
// the risk transform with coefficient gamma (0: risk neutral, Eq. 7 as
// printed).
func Efficiency(us []float64, uopt, gamma float64) float64 {
	if len(us) == 0 {
		return 0
	}
	sum := 0.0
	for _, u := range us {
		sum += Risk(u, uopt, gamma)
	}
	return sum / float64(len(us))
}

// MeanSD is the mean and sample standard deviation of xs.
func MeanSD(xs []float64) (mean, sd float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	for _, x := range xs {
		sd += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sd / float64(len(xs)-1))
}
