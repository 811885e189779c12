package strategies

import (
	"math"
	"sort"
	"time"
)

// StageProgress is one stage of a job for Jockey's progress indicator: the
// fraction of its tasks done, and its tasks' total queueing and running
// time (from the offline model).
type StageProgress struct {
	Fraction    float64
	Queue, Time time.Duration
}

// TotalWorkWithQ is Jockey's progress indicator (Jockey §4.1):
// Σ_s f_s·(Q_s + T_s) over Σ_s (Q_s + T_s), in [0, 1].
func TotalWorkWithQ(stages []StageProgress) float64 {
	var done, total float64
	for _, s := range stages {
		w := (s.Queue + s.Time).Seconds()
		done += math.Min(math.Max(s.Fraction, 0), 1) * w
		total += w
	}
	if total == 0 {
		return 0
	}
	return done / total
}

// MapReduceProgress is TotalWorkWithQ over a MapReduce job's two stages,
// maps and reduces, each weighted by its tasks times their average time
// (mapSecs, reduceSecs; queueing left out): what the YARN monitor and the
// simulator report of a running job. It is exactly 1 when all is done.
func MapReduceProgress(mapsDone, maps int, mapSecs float64, reducesDone, reduces int, reduceSecs float64) float64 {
	frac := func(done, total int) float64 {
		if total <= 0 {
			return 1 // an empty stage has no weight; avoid 0/0
		}
		return float64(done) / float64(total)
	}
	secs := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	return TotalWorkWithQ([]StageProgress{
		{Fraction: frac(mapsDone, maps), Time: secs(float64(maps) * mapSecs)},
		{Fraction: frac(reducesDone, reduces), Time: secs(float64(reduces) * reduceSecs)},
	})
}

// CTable is C(p, a): a job's remaining time at progress p with allocation
// a, sampled offline (by the simulator) on a grid of progress points and
// allocations. Remaining[i][k] is the slowest of the samples taken while
// the progress was in [Progress[i], Progress[i+1]): the remaining time when
// the job first reached Progress[i].
//
// C(p) reads the bin p is in, not a line between two grid points: the
// progress indicator has flat stretches (all maps done, the reduces
// running: nothing completes for a long while), and a line towards the
// next point — first reached only when the reduces finish, near the end —
// read a flat stretch's time left as a fraction of what it is. That made
// the controller cut the allocation just as the long reduces started, and
// Jockey met fewer deadlines than its own ablations. The paper's
// controller maximises expected utility over C's samples; with a utility
// flat until the deadline and far below it after, that is the allocation
// at which the slowest sample meets the deadline [recon].
type CTable struct {
	Progress  []float64         // increasing, from 0 to 1
	Alloc     []float64         // increasing
	Remaining [][]time.Duration // [progress][alloc]
}

// C is the remaining time at progress p with allocation Alloc[k].
func (c CTable) C(p float64, k int) time.Duration {
	i := sort.SearchFloat64s(c.Progress, p) // the first point ≥ p
	switch {
	case i >= len(c.Progress):
		return c.Remaining[len(c.Progress)-1][k]
	case c.Progress[i] > p && i > 0:
		i-- // p is inside bin i−1
	}
	return c.Remaining[i][k]
}

// JockeyUtility is Jockey's utility of finishing at f minutes for a
// deadline d: 1 until d, falling to −1 at d+10 and −1000 at d+1000.
func JockeyUtility(f, d float64) float64 {
	switch {
	case f <= d:
		return 1
	case f <= d+10:
		return 1 - 2*(f-d)/10
	case f <= d+1000:
		return -1 - 999*(f-d-10)/990
	}
	return -1000
}

// Jockey is the control loop that keeps a job on its deadline (Jockey
// §4.3): every period it picks the smallest allocation whose predicted
// finish (slack × C(p, a), the deadline moved earlier by the dead zone) has
// the best utility, and moves the allocation a fraction Alpha of the way
// towards it (hysteresis).
type Jockey struct {
	Table    CTable
	Deadline time.Duration // from the job's start
	Slack    float64       // default 1.2
	Alpha    float64       // default 0.2
	DeadZone time.Duration // default 3 min
	alloc    float64
	started  bool
}

// Step is one control period at elapsed time since the job started and
// progress p; it returns the smoothed allocation and the raw one.
func (j *Jockey) Step(elapsed time.Duration, p float64) (alloc, raw float64, err error) {
	if len(j.Table.Alloc) == 0 || len(j.Table.Progress) == 0 {
		return 0, 0, ErrNoTable
	}
	slack, alpha, dz := j.Slack, j.Alpha, j.DeadZone
	if slack <= 0 {
		slack = 1.2
	}
	if alpha <= 0 {
		alpha = 0.2
	}
	if dz <= 0 {
		dz = 3 * time.Minute
	}
	deadline := (j.Deadline - dz).Minutes()
	finish := func(k int) float64 { return (elapsed + time.Duration(slack*float64(j.Table.C(p, k)))).Minutes() }
	best := math.Inf(-1)
	for k, a := range j.Table.Alloc {
		if u := JockeyUtility(finish(k), deadline); u > best+1e-12 {
			best, raw = u, a
		}
	}
	if !j.started {
		j.alloc, j.started = raw, true
		return j.alloc, raw, nil
	}
	// The dead zone gates action (§4.3: "change allocations only if the job
	// is at least D behind schedule"): a cut waits until the job, at the
	// allocation it has, is predicted at least D ahead of the shifted
	// deadline, so noise in the progress indicator does not take its
	// tokens away. [recon] An increase acts at once — the shifted deadline
	// already leaves D to spare; read literally (no change at all unless D
	// behind) it met fewer deadlines than without the gate, and so did a
	// band D either side (docs/MEASUREMENTS.md).
	now := j.Table.atOrBelow(j.alloc)
	if f := finish(now); raw < j.alloc && f >= deadline-dz.Minutes() {
		return j.alloc, raw, nil
	}
	j.alloc += alpha * (raw - j.alloc)
	return j.alloc, raw, nil
}

// atOrBelow is the index of the largest allocation of the table at or
// below a (the smallest when a is below them all): the pessimistic reading
// of a smoothed allocation between the table's.
func (c CTable) atOrBelow(a float64) int {
	k := sort.SearchFloat64s(c.Alloc, a+1e-12) - 1
	return max(k, 0)
}
