package strategies_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mrmarket/mrmarket/strategies"
)

// TestEstimatorOLSAndGP: with few jobs the estimator is least squares and
// recovers a linear law; with more it is a Gaussian process that follows a
// non-linear one better than a line would; its one-sided 95 % upper bound
// covers about 95 % of new jobs; it retrains as jobs are added.
func TestEstimatorOLSAndGP(t *testing.T) {
	var e strategies.Estimator
	if _, _, _, err := e.Predict([]float64{1}); !errors.Is(err, strategies.ErrTooFewJobs) {
		t.Fatalf("no jobs: %v", err)
	}
	// Exactly linear, two features, 4 jobs (< features + 3): OLS.
	for _, x := range [][]float64{{1, 1}, {2, 1}, {3, 5}, {4, 2}} {
		e.Observe(x, 10+3*x[0]+2*x[1])
	}
	if mu, _, _, err := e.Predict([]float64{5, 5}); err != nil || math.Abs(mu-35) > 1e-6 {
		t.Fatalf("OLS: %v %v, want 35", mu, err)
	}
	// Non-linear: time = 20·sqrt(maps) + noise, 60 jobs.
	rng := rand.New(rand.NewPCG(4, 2))
	law := func(m float64) float64 { return 20 * math.Sqrt(m) }
	var g strategies.Estimator
	for range 60 {
		m := 1 + rng.Float64()*400
		g.Observe([]float64{m}, law(m)+rng.NormFloat64()*5)
	}
	var errGP float64
	covered := 0
	for range 400 {
		m := 1 + rng.Float64()*400
		mu, sd, upper, err := g.Predict([]float64{m})
		if err != nil || sd <= 0 {
			t.Fatal(err)
		}
		actual := law(m) + rng.NormFloat64()*5
		errGP += math.Abs(mu - law(m))
		if actual <= upper {
			covered++
		}
	}
	if errGP/400 > 4 {
		t.Fatalf("GP mean error %v", errGP/400)
	}
	if c := float64(covered) / 400; c < 0.88 || c > 0.995 {
		t.Fatalf("the 95 %% upper bound covered %.3f of new jobs", c)
	}
	t.Logf("GP: mean error %.2f s, upper bound covered %d of 400", errGP/400, covered)
}

// TestEstimatorExtrapolatesAndIgnoresConstantFeatures: jobs larger than
// any seen are estimated along the trend of those seen, not at their mean
// (a GP alone reverts to it away from its data), and features every job
// shares (a map-only workload's reduces and selectivities) do not hold
// the fit back to the mean of a few jobs.
func TestEstimatorExtrapolatesAndIgnoresConstantFeatures(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 3))
	law := func(m float64) float64 { return 4 * m }
	// Five map-only jobs: one varying feature of four, n ≥ 1 + 3, so a GP.
	var few strategies.Estimator
	for _, m := range []float64{7, 9, 12, 15, 20} {
		few.Observe([]float64{m, 0, 0, 0}, law(m)+rng.NormFloat64())
	}
	if mu, _, _, err := few.Predict([]float64{24, 0, 0, 0}); err != nil || math.Abs(mu-law(24)) > 0.1*law(24) {
		t.Errorf("five jobs of 7–20 maps: a 24-map job estimated %.1f (%v), want %.0f ± 10 %%", mu, err, law(24))
	}
	var e strategies.Estimator
	for range 40 {
		m := 1 + rng.Float64()*20
		e.Observe([]float64{m, 0, 0, 0}, law(m)+rng.NormFloat64()*2)
	}
	for _, m := range []float64{40, 60} {
		mu, _, upper, err := e.Predict([]float64{m, 0, 0, 0})
		if err != nil || math.Abs(mu-law(m)) > 0.1*law(m) || upper < law(m) {
			t.Errorf("jobs of 1–21 maps: a %.0f-map job estimated %.1f, upper %.1f (%v), want %.0f ± 10 %% and an upper bound above it", m, mu, upper, err, law(m))
		}
	}
}
