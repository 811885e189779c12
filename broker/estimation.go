package broker

import (
	"errors"
	"math"
	"sort"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// The deadline service's estimation: a job's processing time at a full
// share, from the finished jobs' history or its ARIA profile.

// features are MRM's inputs to the processing-time estimate.
func features(s wire.JobSpec) []float64 {
	return []float64{float64(s.Maps), float64(s.Reduces), s.MapSelectivity, s.ReduceSelectivity}
}

// estimate is a job's processing time at a full share: mean, standard
// deviation and the upper bound admission plans with. With MinHistory
// finished jobs it is MRM's regression per phase (map; shuffle and reduce)
// over their measured work, retrained on every call from the finished jobs
// in the plan store; before that, ARIA's bounds over the job's profile,
// the upper bound taken as the one-sided 95 % point [recon].
func (b *Broker) estimate(s wire.JobSpec) (mean, sd, upper float64, source string, err error) {
	type done struct {
		at     time.Time
		x      []float64
		mw, rw float64
	}
	var hist []done
	b.store.each(func(rec *planRecord, _ uint64) {
		if j := rec.Job; j != nil && j.Done && j.MapWork > 0 && j.Held >= j.MapWork {
			hist = append(hist, done{j.Finished, features(j.Spec), j.MapWork, j.Held - j.MapWork})
		}
	})
	if len(hist) >= b.cfg.MinHistory {
		sort.Slice(hist, func(i, k int) bool { return hist[i].at.After(hist[k].at) })
		hist = hist[:min(len(hist), maxHistory)]
		maps, reds := &strategies.Estimator{Z: upperZ}, &strategies.Estimator{Z: upperZ}
		for _, h := range hist {
			maps.Observe(h.x, h.mw)
			reds.Observe(h.x, h.rw)
		}
		x := features(s)
		mm, ms, mu, err1 := maps.Predict(x)
		rm, rs, ru, err2 := reds.Predict(x)
		if err := errors.Join(err1, err2); err == nil && mm+rm > 0 {
			return mm + rm, math.Hypot(ms, rs), max(mu, 0) + max(ru, 0), "history", nil
		}
	}
	low, up, avg := strategies.ARIABounds(s.Profile, s.Maps, s.Reduces, s.MapSlots, max(s.ReduceSlots, 1))
	if !(up > 0) || math.IsInf(up, 0) {
		return 0, 0, 0, "", wire.Errorf(wire.ErrBadRequest, "the job's profile gives no processing time (bounds %.1f–%.1f s)", low, up)
	}
	return avg, (up - avg) / upperZ, up, "profile", nil
}
