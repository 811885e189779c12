package e2e

import "math"

// The model the suite's predictions come from. A job is a sequence of
// phases, each on one resource (the CPU, the disk, the link), each taking
// a known time when the job has the whole resource, and each perhaps using
// part of the others meanwhile. While several jobs use the same resource,
// it is divided among them in proportion to their shares, a job taking no
// more than it can use; a job alone on a resource has all it can use (the
// agent's CPU shares are weights, and its throttles lend an idle VM's part
// to the busy ones). A job's shares may change at given times (a spend topped up).
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
// whole resource, and what else it uses meanwhile, as a part of each other
// resource per second of the phase alone (a TCG guest's shuffle keeps its
// CPU busy moving the bytes: without that CPU it moves them slower).
type phase struct {
	resource string
	alone    float64
	uses     map[string]float64
}

// demand is the part of resource r the phase uses going at its speed
// alone: all of its own resource, its uses of the others.
func (p phase) demand(r string) float64 {
	if r == p.resource {
		return 1
	}
	return p.uses[r]
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

// speeds gives each job in a phase (ph[i], nil for a job done) its speed,
// as a fraction of the phase's speed alone. Each resource is divided among
// the jobs using it in proportion to their shares, a job taking no more
// than it can use (the rest going to the others, as the agent's weights and
// the kernel's classes lend it), and a job goes as fast as the resource it
// has least of allows: its use of each resource is its speed times its
// demand there. What a job can use of one resource depends on what it has
// of the others, so the division is found by turns, from every job at full
// speed, until it no longer moves.
func speeds(ph []*phase, shares []map[string]float64) []float64 {
	resources := map[string]bool{}
	for _, p := range ph {
		if p == nil {
			continue
		}
		resources[p.resource] = true
		for r := range p.uses {
			resources[r] = true
		}
	}
	speed := make([]float64, len(ph))
	limit := make([]map[string]float64, len(ph)) // the speed each resource allows
	for i, p := range ph {
		if p != nil {
			speed[i], limit[i] = 1, map[string]float64{}
		}
	}
	for range 100 {
		for r := range resources {
			// What each job could use of r if r held it back nowhere: its
			// demand at the speed its other resources allow.
			want := map[int]float64{}
			for i, p := range ph {
				if p == nil || p.demand(r) <= 0 {
					continue
				}
				s := 1.0
				for o, l := range limit[i] {
					if o != r {
						s = min(s, l)
					}
				}
				want[i] = s * p.demand(r)
			}
			for i, got := range waterFill(want, shares, r) {
				limit[i][r] = got / ph[i].demand(r)
			}
		}
		moved := 0.0
		for i, p := range ph {
			if p == nil {
				continue
			}
			s := 1.0
			for _, l := range limit[i] {
				s = min(s, l)
			}
			moved = max(moved, math.Abs(s-speed[i]))
			speed[i] = s
		}
		if moved < 1e-12 {
			break
		}
	}
	return speed
}

// waterFill divides one unit of resource r among the jobs that want some
// of it in proportion to their shares of it, none getting more than it
// wants, what one leaves going to the others.
func waterFill(want map[int]float64, shares []map[string]float64, r string) map[int]float64 {
	got := map[int]float64{}
	left := 1.0
	for len(want) > len(got) && left > 1e-15 {
		weight := 0.0
		for i := range want {
			if _, done := got[i]; !done {
				weight += shares[i][r]
			}
		}
		if weight <= 0 {
			break
		}
		// Those wanting less than their part of what is left get what they
		// want; if none does, the rest divide it by their shares.
		capped := false
		for i, w := range want {
			if _, done := got[i]; !done && w <= left*shares[i][r]/weight {
				got[i], capped = w, true
			}
		}
		if !capped {
			for i := range want {
				if _, done := got[i]; !done {
					got[i] = left * shares[i][r] / weight
				}
			}
			break
		}
		left = 1
		for _, g := range got {
			left -= g
		}
	}
	for i := range want {
		if _, ok := got[i]; !ok {
			got[i] = 0
		}
	}
	return got
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
		ph := make([]*phase, len(jobs))
		shares := make([]map[string]float64, len(jobs))
		running := 0
		for i, j := range jobs {
			if at[i] < len(j.phases) {
				running++
				ph[i], shares[i] = &j.phases[at[i]], j.sharesAt(now)
			}
		}
		if running == 0 {
			return end
		}
		rate := speeds(ph, shares)
		next := math.Inf(1)
		for i, j := range jobs {
			if at[i] >= len(j.phases) {
				continue
			}
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
				j.phases = []phase{{resource, w, nil}}
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
