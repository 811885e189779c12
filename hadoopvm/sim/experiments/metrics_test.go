package experiments_test

import (
	"math"
	"testing"

	"github.com/mrmarket/mrmarket/hadoopvm/sim/experiments"
)

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9 {
		t.Errorf("%s = %.12f, want %.12f", what, got, want)
	}
}

// The metric functions against values worked by hand.
func TestMetricsByHand(t *testing.T) {
	// Eq. 4: v = 1, c = 0.25, T = 2·Tmin, r = 2: 0.75·e^−4.
	near(t, "utility", experiments.Utility(1, 0.25, 600, 300, 2), 0.75*math.Exp(-4))
	// Uncontended: c = 0, T = Tmin: e^−2.
	uopt := experiments.Utility(1, 0, 300, 300, 2)
	near(t, "uopt", uopt, math.Exp(-2))
	// Eq. 5: risk neutral is the ratio; γ = 3 at half of uopt is
	// (1 − e^−1.5)/(1 − e^−3); γ = −3: (1 − e^1.5)/(1 − e^3).
	near(t, "risk γ=0", experiments.Risk(0.5*uopt, uopt, 0), 0.5)
	near(t, "risk γ=3", experiments.Risk(0.5*uopt, uopt, 3), (1-math.Exp(-1.5))/(1-math.Exp(-3)))
	near(t, "risk γ=−3", experiments.Risk(0.5*uopt, uopt, -3), (1-math.Exp(1.5))/(1-math.Exp(3)))
	near(t, "risk at uopt", experiments.Risk(uopt, uopt, 3), 1)
	near(t, "risk at 0", experiments.Risk(0, uopt, -3), 0)
	// Eq. 6: fair 100 and 200, strategy 80 and 170: 50/300.
	near(t, "CI", experiments.CompletionImprovement([]float64{100, 200}, []float64{80, 170}), 50.0/300)
	// Eq. 7: utilities 0.5 and 0.25 of uopt 1: 0.375.
	near(t, "efficiency", experiments.Efficiency([]float64{0.5, 0.25}, 1, 0), 0.375)
	m, sd := experiments.MeanSD([]float64{1, 2, 3, 4})
	near(t, "mean", m, 2.5)
	near(t, "sd", sd, math.Sqrt(5.0/3))
}
