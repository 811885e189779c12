package broker

import (
	"errors"
	"math"
	"slices"
	"sort"
	"time"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"

	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// The deadline service's estimation: a job's processing time at a full
// share, from the finished jobs' history or its ARIA profile.

// features are MRM's inputs to the processing-time estimate.
func features(s wire.JobSpec) []float64 {
	return []float64{float64(s.Maps), float64(s.Reduces), s.MapSelectivity, s.ReduceSelectivity}
}

// estimated is a job's processing time at a full share: the estimate, its
// upper bound, and the work admission plans the job at.
type estimated struct {
	mean, sd, upper float64
	source          string
	// bound is the regression's upper bound (0: estimated from the
	// profile), what the job's miss is measured against once it is done;
	// margin the factor work adds to it.
	bound, margin float64
	work          float64
}

// estimate is a job's processing time at a full share. With MinHistory
// finished jobs it is MRM's regression per phase (map; shuffle and reduce)
// over their measured work, retrained on every call from the finished jobs
// in the plan store; before that, ARIA's bounds over the job's profile, the
// upper bound taken as the one-sided 95 % point [recon], planned as it is.
//
// The regression's bound is planned with a safety margin measured from its
// own errors. A finished job's miss is its measured work over the bound it
// was admitted at, out of sample (the bound came before the job ran); the
// margin is the largest of 1, the largest miss, and the one-sided
// prediction bound a next miss passes with chance marginTail, were the
// misses normal: their mean plus Student's t (n − 1 degrees of freedom)
// standard deviations × √(1 + 1/n). The bound's own z assumes errors that are
// normal and as wide as the regression says; a job admitted at its
// earliest finish is late whenever its work passes what admission planned,
// and so is every job queued behind it, so the margin is taken from what
// the estimates actually missed by, with a tail beyond the worst seen.
// marginTail is small because a market admits thousands of jobs and the
// misses' tail is heavier than a normal one; Student's t because the
// misses' spread is itself estimated, from as few as MinHistory of them
// (a few alike jobs can look tighter than the jobs to come). Until
// MinHistory misses are measured there is no margin to take: the
// regression's jobs are planned at the larger of its bound and the
// profile's.
func (b *Broker) estimate(s wire.JobSpec) (estimated, error) {
	type done struct {
		at     time.Time
		plan   string // the user and plan id, which orders jobs that finished at one instant
		x      []float64
		mw, rw float64
		miss   float64 // measured work over the regression's bound (0: admitted on the profile)
	}
	var hist []done
	b.store.each(func(rec *planRecord, _ uint64) {
		if j := rec.Job; j != nil && j.Done && j.MapWork > 0 && j.Held >= j.MapWork {
			d := done{at: j.Finished, plan: rec.Plan.User + "\x00" + rec.Plan.ID, x: features(j.Spec), mw: nanos(j.MapWork), rw: nanos(j.Held - j.MapWork)}
			if j.Bound > 0 {
				d.miss = nanos(j.Held) / j.Bound
			}
			hist = append(hist, d)
		}
	})
	low, up, avg := strategies.ARIABounds(s.Profile, s.Maps, s.Reduces, s.MapSlots, max(s.ReduceSlots, 1))
	profile := estimated{mean: avg, sd: (up - avg) / upperZ, upper: up, source: "profile", margin: 1, work: up}
	profiled := up > 0 && !math.IsInf(up, 0)
	if len(hist) >= b.cfg.MinHistory {
		// Newest first; jobs that finished at one instant (a simulated
		// tick ends many) by plan, not in the store's map order: which of
		// them the history keeps, and the order the regression sums them
		// in, would otherwise differ from run to run.
		sort.Slice(hist, func(i, k int) bool {
			if !hist[i].at.Equal(hist[k].at) {
				return hist[i].at.After(hist[k].at)
			}
			return hist[i].plan < hist[k].plan
		})
		hist = hist[:min(len(hist), maxHistory)]
		maps, reds := &strategies.Estimator{Z: upperZ}, &strategies.Estimator{Z: upperZ}
		var misses []float64
		for _, h := range hist {
			maps.Observe(h.x, h.mw)
			reds.Observe(h.x, h.rw)
			if h.miss > 0 {
				misses = append(misses, h.miss)
			}
		}
		x := features(s)
		mm, ms, mu, err1 := maps.Predict(x)
		rm, rs, ru, err2 := reds.Predict(x)
		if err := errors.Join(err1, err2); err == nil && mm+rm > 0 {
			e := estimated{mean: mm + rm, sd: math.Hypot(ms, rs), upper: max(mu, 0) + max(ru, 0), source: "history", margin: 1}
			e.bound, e.work = e.upper, e.upper
			if len(misses) < max(b.cfg.MinHistory, 2) {
				if profiled {
					e.work = max(e.work, up)
				}
				return e, nil
			}
			m, sdm := stat.MeanStdDev(misses, nil)
			n := float64(len(misses))
			t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: n - 1}.Quantile(1 - marginTail)
			e.margin = max(1, slices.Max(misses), m+t*sdm*math.Sqrt(1+1/n))
			e.work = e.upper * e.margin
			return e, nil
		}
	}
	if !profiled {
		return estimated{}, wire.Errorf(wire.ErrBadRequest, "the job's profile gives no processing time (bounds %.1f–%.1f s)", low, up)
	}
	return profile, nil
}

// nanos rounds measured share-seconds to the nanosecond: they are sums of
// shares over intervals, added up as host states arrive, and states of
// several hosts arrive in no fixed order, so the same work can differ in
// its last bits from run to run — which a regression over it, and every
// price and margin after, would carry (a seed's results not the same
// twice).
func nanos(x float64) float64 { return math.Round(x*1e9) / 1e9 }
