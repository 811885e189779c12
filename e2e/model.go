package e2e

import "math"

// The model the suite's predictions come from. A job is a sequence of
// phases, each on one resource (the CPU, the disk, the link), each taking
// a known time when the job has the whole resource. While several jobs are
// in a phase on the same resource, it is divided among them in proportion
// to their shares; a job alone on a resource has all of it (the agent's
// CPU shares are weights, and its throttles lend an idle VM's part to the
// busy ones). A job's shares may change at given times (a spend topped up).
// Nothing else slows a job down: no fixed costs, no ramps.
//
// For two equal one-phase jobs at shares qa > qb, the faster finishes at
// W/qa', qa' = qa/(qa+qb), having left the slower qb'/qa' of its work
// done, which then has the whole resource: Tb/Ta = 1 + qa' - qb'. At 3:1
// that is 1.5.
//
// The model knows nothing of the market: the shares it is given are the
// ones the agent set, as the broker heard them, from when the agent set
// them (sample.setAt).

// phase is a stretch of a job on one resource: how long it takes with the
// whole resource.
type phase struct {
	resource string
	alone    float64
}

// flow is a job in the model: its phases in order, its share of each
// resource, and the times from which other shares hold.
type flow struct {
	phases  []phase
	shares  map[string]float64
	changes []change
}

// change is a job's shares from a time on.
type change struct {
	at     float64
	shares map[string]float64
}

// sharesAt are a job's shares at time now.
func (f flow) sharesAt(now float64) map[string]float64 {
	s := f.shares
	for _, c := range f.changes {
		if c.at <= now {
			s = c.shares
		}
	}
	return s
}

// finishes runs the jobs from time 0, all started together, and returns
// when each ends.
func finishes(jobs []flow) []float64 {
	const eps = 1e-12
	at := make([]int, len(jobs))       // the phase each job is in
	left := make([]float64, len(jobs)) // of that phase, in seconds alone
	end := make([]float64, len(jobs))
	for i, j := range jobs {
		if len(j.phases) > 0 {
			left[i] = j.phases[0].alone
		}
	}
	now := 0.0
	for {
		// Each resource's users and their shares.
		weight := map[string]float64{}
		running := 0
		for i, j := range jobs {
			if at[i] < len(j.phases) {
				running++
				r := j.phases[at[i]].resource
				weight[r] += j.sharesAt(now)[r]
			}
		}
		if running == 0 {
			return end
		}
		rate := make([]float64, len(jobs))
		next := math.Inf(1)
		for i, j := range jobs {
			if at[i] >= len(j.phases) {
				continue
			}
			r := j.phases[at[i]].resource
			rate[i] = j.sharesAt(now)[r] / weight[r]
			next = min(next, left[i]/rate[i])
			for _, c := range j.changes {
				if c.at > now+eps {
					next = min(next, c.at-now)
				}
			}
		}
		now += next
		for i, j := range jobs {
			if at[i] >= len(j.phases) {
				continue
			}
			left[i] -= next * rate[i]
			for at[i] < len(j.phases) && left[i] <= eps {
				at[i]++
				if at[i] < len(j.phases) {
					left[i] = j.phases[at[i]].alone
				} else {
					end[i] = now
				}
			}
		}
	}
}

// calibrate finds the work W such that job k of jobs finishes at
// measured, every job without phases being one phase of W on resource
// (equal jobs) and the others as they are: the machine's speed, taken
// from the run itself rather than assumed.
func calibrate(jobs []flow, k int, resource string, measured float64) float64 {
	with := func(w float64) float64 {
		js := make([]flow, len(jobs))
		for i, j := range jobs {
			if len(j.phases) == 0 {
				j.phases = []phase{{resource, w}}
			}
			js[i] = j
		}
		return finishes(js)[k]
	}
	lo, hi := 0.0, measured
	for with(hi) < measured {
		hi *= 2
	}
	for range 100 {
		mid := (lo + hi) / 2
		if with(mid) < measured {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}
