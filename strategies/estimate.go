package strategies

import (
	"errors"
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
)

// ErrTooFewJobs means an estimator has not seen enough finished jobs.
var ErrTooFewJobs = errors.New("strategies: too few finished jobs to estimate from")

// Estimator predicts a phase's processing time from a job's features (MRM
// §4: maps, reduces, reduction factors) with a prediction interval, by
// Gaussian-process regression (squared-exponential kernel on standardised
// features, hyper-parameters chosen by marginal likelihood on a small grid)
// or, with fewer jobs than features + 3 or a singular kernel, ordinary
// least squares. It is retrained from all observations whenever one is
// added (MRM retrains after every job).
type Estimator struct {
	X [][]float64
	Y []float64
	// Z is the prediction interval's one-sided quantile: 1.64 (one-sided
	// 95 %, the default) or 1.96.
	Z float64

	model func(x []float64) (mu, sd float64, err error)
}

// Observe adds a finished job's features and measured time.
func (e *Estimator) Observe(x []float64, y float64) {
	e.X = append(e.X, append([]float64(nil), x...))
	e.Y = append(e.Y, y)
	e.model = nil
}

// Predict is the estimate μ, its standard deviation σ, and the upper bound
// μ + z·σ MRM plans with.
func (e *Estimator) Predict(x []float64) (mu, sd, upper float64, err error) {
	if e.model == nil {
		if e.model, err = e.fit(); err != nil {
			return 0, 0, 0, err
		}
	}
	if mu, sd, err = e.model(x); err != nil {
		return 0, 0, 0, err
	}
	z := e.Z
	if z <= 0 {
		z = 1.64
	}
	return mu, sd, mu + z*sd, nil
}

func (e *Estimator) fit() (func([]float64) (float64, float64, error), error) {
	n := len(e.Y)
	if n < 2 {
		return nil, fmt.Errorf("%w: %d", ErrTooFewJobs, n)
	}
	d := len(e.X[0])
	if n >= d+3 {
		if m, err := fitGP(e.X, e.Y); err == nil {
			return m, nil
		}
	}
	return fitOLS(e.X, e.Y)
}

// fitOLS is least squares with an intercept and its prediction interval
// s·sqrt(1 + x₀ᵀ(XᵀX)⁻¹x₀); with too few jobs it falls back to the mean.
func fitOLS(xs [][]float64, ys []float64) (func([]float64) (float64, float64, error), error) {
	n, d := len(ys), len(xs[0])
	if n <= d+1 {
		var m, v float64
		for _, y := range ys {
			m += y
		}
		m /= float64(n)
		for _, y := range ys {
			v += (y - m) * (y - m)
		}
		sd := math.Sqrt(v / float64(n-1))
		return func([]float64) (float64, float64, error) { return m, sd, nil }, nil
	}
	X := mat.NewDense(n, d+1, nil)
	for i, x := range xs {
		X.Set(i, 0, 1)
		for k, v := range x {
			X.Set(i, k+1, v)
		}
	}
	Y := mat.NewVecDense(n, ys)
	var xtx mat.Dense
	xtx.Mul(X.T(), X)
	var inv mat.Dense
	if err := inv.Inverse(&xtx); err != nil {
		return nil, fmt.Errorf("strategies: OLS: %w", err)
	}
	var xty mat.VecDense
	xty.MulVec(X.T(), Y)
	var beta mat.VecDense
	beta.MulVec(&inv, &xty)
	var rss float64
	for i := range n {
		r := ys[i] - mat.Dot(X.RowView(i), &beta)
		rss += r * r
	}
	s := math.Sqrt(rss / float64(n-d-1))
	return func(x []float64) (float64, float64, error) {
		if len(x) != d {
			return 0, 0, fmt.Errorf("strategies: %d features, the model has %d", len(x), d)
		}
		x0 := mat.NewVecDense(d+1, append([]float64{1}, x...))
		var tmp mat.VecDense
		tmp.MulVec(&inv, x0)
		return mat.Dot(x0, &beta), s * math.Sqrt(1+mat.Dot(x0, &tmp)), nil
	}, nil
}

// fitGP is Gaussian-process regression on standardised data.
func fitGP(xs [][]float64, ys []float64) (func([]float64) (float64, float64, error), error) {
	n, d := len(ys), len(xs[0])
	mean, scale := make([]float64, d), make([]float64, d)
	for k := range d {
		for _, x := range xs {
			mean[k] += x[k]
		}
		mean[k] /= float64(n)
		for _, x := range xs {
			scale[k] += (x[k] - mean[k]) * (x[k] - mean[k])
		}
		scale[k] = math.Sqrt(scale[k] / float64(n))
		if scale[k] == 0 {
			scale[k] = 1
		}
	}
	var ym, ys2 float64
	for _, y := range ys {
		ym += y
	}
	ym /= float64(n)
	for _, y := range ys {
		ys2 += (y - ym) * (y - ym)
	}
	ysd := math.Sqrt(ys2 / float64(n))
	if ysd == 0 {
		ysd = 1
	}
	z := make([][]float64, n)
	t := make([]float64, n)
	for i, x := range xs {
		z[i] = make([]float64, d)
		for k := range d {
			z[i][k] = (x[k] - mean[k]) / scale[k]
		}
		t[i] = (ys[i] - ym) / ysd
	}
	kern := func(a, b []float64, ell float64) float64 {
		var s float64
		for k := range a {
			s += (a[k] - b[k]) * (a[k] - b[k])
		}
		return math.Exp(-s / (2 * ell * ell))
	}
	type fit struct {
		ell, noise float64
		chol       mat.Cholesky
		alpha      *mat.VecDense
		lml        float64
	}
	var best *fit
	for _, ell := range []float64{0.3, 0.6, 1, 2, 4} {
		for _, noise := range []float64{0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3} {
			K := mat.NewSymDense(n, nil)
			for i := range n {
				for j := i; j < n; j++ {
					v := kern(z[i], z[j], ell)
					if i == j {
						v += noise
					}
					K.SetSym(i, j, v)
				}
			}
			f := &fit{ell: ell, noise: noise}
			if !f.chol.Factorize(K) {
				continue
			}
			f.alpha = mat.NewVecDense(n, nil)
			if err := f.chol.SolveVecTo(f.alpha, mat.NewVecDense(n, t)); err != nil {
				continue
			}
			f.lml = -0.5*mat.Dot(mat.NewVecDense(n, t), f.alpha) - 0.5*f.chol.LogDet()
			if best == nil || f.lml > best.lml {
				best = f
			}
		}
	}
	if best == nil {
		return nil, errors.New("strategies: GP kernel is singular")
	}
	return func(x []float64) (float64, float64, error) {
		if len(x) != d {
			return 0, 0, fmt.Errorf("strategies: %d features, the model has %d", len(x), d)
		}
		zx := make([]float64, d)
		for k := range d {
			zx[k] = (x[k] - mean[k]) / scale[k]
		}
		ks := mat.NewVecDense(n, nil)
		for i := range n {
			ks.SetVec(i, kern(z[i], zx, best.ell))
		}
		mu := mat.Dot(ks, best.alpha)
		var v mat.VecDense
		if err := best.chol.SolveVecTo(&v, ks); err != nil {
			return 0, 0, err
		}
		variance := math.Max(1-mat.Dot(ks, &v), 0) + best.noise
		return ym + mu*ysd, math.Sqrt(variance) * ysd, nil
	}, nil
}
