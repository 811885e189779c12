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
//
// Two choices keep it from answering with the mean of the jobs seen. A
// feature every observed job shares (a map-only workload's reduces) says
// nothing and is left out, so it does not cost the fit the jobs that
// would otherwise fall back to the mean. And the GP models what a linear
// trend in the features leaves, not the times themselves: a GP alone
// reverts to the mean away from its data, so a job larger than any seen
// would be estimated at the size of those, while a job's work grows with
// its tasks.
type Estimator struct {
	X [][]float64
	Y []float64
	// Z is the prediction interval's one-sided quantile: 1.64 (one-sided
	// 95 %, the default) or 1.96.
	Z float64

	model fitted
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

func (e *Estimator) fit() (fitted, error) {
	n := len(e.Y)
	if n < 2 {
		return nil, fmt.Errorf("%w: %d", ErrTooFewJobs, n)
	}
	all := len(e.X[0])
	keep := varying(e.X)
	if len(keep) == 0 {
		return fitMean(e.Y), nil
	}
	xs := make([][]float64, n)
	for i, x := range e.X {
		xs[i] = pick(x, keep)
	}
	var m fitted
	var err error
	if d := len(keep); n >= d+3 {
		m, err = fitGP(xs, e.Y)
	}
	if m == nil || err != nil {
		if m, err = fitOLS(xs, e.Y); err != nil {
			return nil, err
		}
	}
	return func(x []float64) (float64, float64, error) {
		if len(x) != all {
			return 0, 0, fmt.Errorf("strategies: %d features, the model has %d", len(x), all)
		}
		return m(pick(x, keep))
	}, nil
}

// varying is the indices of the features that differ among xs.
func varying(xs [][]float64) []int {
	var out []int
	for k := range xs[0] {
		for _, x := range xs[1:] {
			if x[k] != xs[0][k] {
				out = append(out, k)
				break
			}
		}
	}
	return out
}

// pick is x's features at the indices keep.
func pick(x []float64, keep []int) []float64 {
	out := make([]float64, len(keep))
	for i, k := range keep {
		out[i] = x[k]
	}
	return out
}

// fitted is a trained estimator: a job's features → the estimate and its
// standard deviation.
type fitted = func(x []float64) (mu, sd float64, err error)

// fitOLS is least squares with an intercept, solved through the QR
// factorisation X = QR of the design matrix rather than the normal
// equations, and its prediction interval s·sqrt(1 + x₀ᵀ(XᵀX)⁻¹x₀); with too
// few jobs it falls back to the mean. A design the normal equations could not
// invert (cond(XᵀX) = cond(X)² above gonum's tolerance) is refused as
// before, so the estimator still falls back where it did.
func fitOLS(xs [][]float64, ys []float64) (fitted, error) {
	n, d := len(ys), len(xs[0])
	if n <= d+1 {
		return fitMean(ys), nil
	}
	X := mat.NewDense(n, d+1, nil)
	for i, x := range xs {
		X.Set(i, 0, 1)
		for k, v := range x {
			X.Set(i, k+1, v)
		}
	}
	var qr mat.QR
	qr.Factorize(X)
	if c := qr.Cond(); c*c > mat.ConditionTolerance {
		return nil, fmt.Errorf("strategies: OLS: %w", mat.Condition(c*c))
	}
	var beta mat.VecDense
	if err := qr.SolveVecTo(&beta, false, mat.NewVecDense(n, ys)); err != nil {
		return nil, fmt.Errorf("strategies: OLS: %w", err)
	}
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
		// The least-norm u with Xᵀu = x₀ is X(XᵀX)⁻¹x₀, so |u|² = x₀ᵀ(XᵀX)⁻¹x₀.
		var u mat.VecDense
		if err := qr.SolveVecTo(&u, true, x0); err != nil {
			return 0, 0, fmt.Errorf("strategies: OLS: %w", err)
		}
		return mat.Dot(x0, &beta), s * math.Sqrt(1+mat.Dot(&u, &u)), nil
	}, nil
}

// fitMean is the estimate of too few jobs for a line: their mean and sample
// standard deviation, whatever the features.
func fitMean(ys []float64) fitted {
	var m, v float64
	for _, y := range ys {
		m += y
	}
	m /= float64(len(ys))
	for _, y := range ys {
		v += (y - m) * (y - m)
	}
	sd := math.Sqrt(v / float64(len(ys)-1))
	return func([]float64) (float64, float64, error) { return m, sd, nil }
}

// fitGP is Gaussian-process regression on standardised data, over what a
// least-squares linear trend leaves (scaled to unit variance), with the
// hyper-parameters of a small grid that maximise the marginal likelihood.
// Its variance is the GP's plus the trend's own uncertainty at the point,
// which grows away from the data.
func fitGP(xs [][]float64, ys []float64) (fitted, error) {
	g := standardise(xs, ys)
	g.detrend()
	var best *gpFit
	for _, ell := range []float64{0.3, 0.6, 1, 2, 4} {
		for _, noise := range []float64{0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3} {
			if f := g.fit(ell, noise); f != nil && (best == nil || f.lml > best.lml) {
				best = f
			}
		}
	}
	if best == nil {
		return nil, errors.New("strategies: GP kernel is singular")
	}
	return g.predictor(best), nil
}

// gpData is the training set standardised: each feature and the times to
// mean 0 and (population) standard deviation 1, a constant one left unscaled.
// After detrend, t is what the linear trend leaves of the standardised
// times, over rsd.
type gpData struct {
	mean, scale []float64   // per feature
	ym, ysd     float64     // of the times
	z           [][]float64 // standardised features
	t           []float64   // standardised times, or their residuals over rsd
	trend       fitted      // least squares over z: the mean and its prediction sd
	s2, rsd     float64     // the trend's residual variance (n − d − 1 dof), the residuals' scale
}

// detrend fits the linear trend over the standardised data and leaves its
// residuals, scaled to unit variance, for the GP; features too collinear
// for least squares leave the times as they are (no trend).
func (g *gpData) detrend() {
	g.trend, g.rsd = func([]float64) (float64, float64, error) { return 0, 0, nil }, 1
	trend, err := fitOLS(g.z, g.t)
	if err != nil {
		return
	}
	n, d := len(g.t), len(g.z[0])
	r := make([]float64, n)
	var ss float64
	for i := range n {
		mu, _, err := trend(g.z[i])
		if err != nil {
			return
		}
		r[i] = g.t[i] - mu
		ss += r[i] * r[i]
	}
	g.trend, g.s2 = trend, ss/float64(n-d-1)
	_, g.rsd = meanSD(r)
	for i := range r {
		g.t[i] = r[i] / g.rsd
	}
}

func standardise(xs [][]float64, ys []float64) *gpData {
	n, d := len(ys), len(xs[0])
	g := &gpData{mean: make([]float64, d), scale: make([]float64, d), z: make([][]float64, n), t: make([]float64, n)}
	col := make([]float64, n)
	for k := range d {
		for i, x := range xs {
			col[i] = x[k]
		}
		g.mean[k], g.scale[k] = meanSD(col)
	}
	g.ym, g.ysd = meanSD(ys)
	for i, x := range xs {
		g.z[i] = make([]float64, d)
		for k := range d {
			g.z[i][k] = (x[k] - g.mean[k]) / g.scale[k]
		}
		g.t[i] = (ys[i] - g.ym) / g.ysd
	}
	return g
}

// meanSD is the mean and population standard deviation of vs; the standard
// deviation of a constant is taken as 1, so that it scales nothing.
func meanSD(vs []float64) (m, sd float64) {
	for _, v := range vs {
		m += v
	}
	m /= float64(len(vs))
	for _, v := range vs {
		sd += (v - m) * (v - m)
	}
	sd = math.Sqrt(sd / float64(len(vs)))
	if sd == 0 {
		sd = 1
	}
	return m, sd
}

// sqExp is the squared-exponential kernel with length scale ell.
func sqExp(a, b []float64, ell float64) float64 {
	var s float64
	for k := range a {
		s += (a[k] - b[k]) * (a[k] - b[k])
	}
	return math.Exp(-s / (2 * ell * ell))
}

// gpFit is the GP for one pair of hyper-parameters.
type gpFit struct {
	ell, noise float64
	chol       mat.Cholesky
	alpha      *mat.VecDense // K⁻¹t
	lml        float64       // log marginal likelihood, up to a constant
}

// fit is the GP with length scale ell and noise variance noise, or nil if
// its kernel matrix is singular.
func (g *gpData) fit(ell, noise float64) *gpFit {
	n := len(g.t)
	K := mat.NewSymDense(n, nil)
	for i := range n {
		for j := i; j < n; j++ {
			v := sqExp(g.z[i], g.z[j], ell)
			if i == j {
				v += noise
			}
			K.SetSym(i, j, v)
		}
	}
	f := &gpFit{ell: ell, noise: noise}
	if !f.chol.Factorize(K) {
		return nil
	}
	f.alpha = mat.NewVecDense(n, nil)
	if err := f.chol.SolveVecTo(f.alpha, mat.NewVecDense(n, g.t)); err != nil {
		return nil
	}
	f.lml = -0.5*mat.Dot(mat.NewVecDense(n, g.t), f.alpha) - 0.5*f.chol.LogDet()
	return f
}

// predictor is the GP's posterior at a job's features, in the times' units.
func (g *gpData) predictor(f *gpFit) fitted {
	n, d := len(g.t), len(g.mean)
	return func(x []float64) (float64, float64, error) {
		if len(x) != d {
			return 0, 0, fmt.Errorf("strategies: %d features, the model has %d", len(x), d)
		}
		zx := make([]float64, d)
		for k := range d {
			zx[k] = (x[k] - g.mean[k]) / g.scale[k]
		}
		ks := mat.NewVecDense(n, nil)
		for i := range n {
			ks.SetVec(i, sqExp(g.z[i], zx, f.ell))
		}
		var v mat.VecDense
		if err := f.chol.SolveVecTo(&v, ks); err != nil {
			return 0, 0, err
		}
		tm, tsd, err := g.trend(zx)
		if err != nil {
			return 0, 0, err
		}
		mu := tm + g.rsd*mat.Dot(ks, f.alpha)
		variance := g.rsd*g.rsd*(math.Max(1-mat.Dot(ks, &v), 0)+f.noise) + math.Max(tsd*tsd-g.s2, 0)
		return g.ym + mu*g.ysd, math.Sqrt(variance) * g.ysd, nil
	}
}
