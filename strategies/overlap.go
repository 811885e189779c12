package strategies

import (
	"container/heap"
	"fmt"
	"math"
	"sort"
)

// checkOverlapJob is the validation SimulateOverlap and OverlapLowerBound
// share: release and sizes finite and non-negative.
func checkOverlapJob(i int, j OverlapJob) error {
	for _, v := range []float64{j.Release, j.Map, j.Shuffle} {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("%w: job %d has release %v, map %v, shuffle %v", ErrOverlapJob, i, j.Release, j.Map, j.Shuffle)
		}
	}
	return nil
}

// OverlapJob is a job of Lin et al.'s overlapping tandem queue:
// released at Release, with Map work at the map station and Shuffle work at
// the shuffle station (each of capacity 1), whose shuffle may never be
// further along (as a fraction) than its map.
type OverlapJob struct {
	Release, Map, Shuffle float64
}

// Overlap policies.
const (
	PolicyFIFO      = "fifo"
	PolicyMaxSRPT   = "maxsrpt"   // both stations serve the job with the least max(remaining map, shuffle)
	PolicySplitSRPT = "splitsrpt" // map-heavy and shuffle-heavy jobs split the stations, SRPT within; work-conserving
	// PolicySplitSRPTLiteral is Algorithm 2 as written: a class's part of a
	// station stays idle while the class cannot use it. Kept to measure
	// the difference (SimulateOverlap only; the broker does not offer it).
	PolicySplitSRPTLiteral = "splitsrpt-literal"
	PolicyKLPS             = "klps" // k-limited processor sharing at the map, sharing at the shuffle (Hadoop's Fair Scheduler)
)

// LPSLimit is k of k-LPS (Lin et al. §5 use 100).
const LPSLimit = 100

type ovState struct {
	OverlapJob
	index     int     // in the input: the order ties are broken in
	x, y      float64 // remaining map and shuffle
	m, s      float64 // rates now
	done      bool
	completed float64
}

const ovEps = 1e-12

func (j *ovState) present(t float64) bool { return !j.done && j.Release <= t+ovEps }

// caughtUp: the shuffle is as far along as the map (it may go no faster).
func (j *ovState) caughtUp() bool {
	if j.x <= ovEps {
		return false
	}
	return (j.Shuffle-j.y)/j.Shuffle >= (j.Map-j.x)/j.Map-1e-12
}

// shuffleCap is the fastest j may shuffle given its map rate.
func (j *ovState) shuffleCap() float64 {
	if j.y <= ovEps {
		return 0
	}
	if j.caughtUp() {
		return j.Shuffle / j.Map * j.m
	}
	return math.Inf(1)
}

// serve gives the map capacity to the first job of order with map work and
// fills the shuffle capacity in order, each job up to what its map allows.
func serve(order []*ovState, mapCap, shuffleCap float64) {
	serveMap(order, mapCap)
	serveShuffle(order, shuffleCap)
}

// serveMap gives capacity to the first job of order with map work and
// returns what no job took (all of it when none has map work).
func serveMap(order []*ovState, capacity float64) float64 {
	for _, j := range order {
		if j.x > ovEps {
			j.m += capacity
			return 0
		}
	}
	return capacity
}

// serveShuffle fills capacity in order, each job up to what its map
// allows beyond what it has, and returns what is left. Map rates must be
// final: a shuffle caught up with its map goes at the map's pace.
func serveShuffle(order []*ovState, capacity float64) float64 {
	for _, j := range order {
		give := math.Min(capacity, j.shuffleCap()-j.s)
		if give > 0 {
			j.s += give
			capacity -= give
		}
	}
	return capacity
}

// SimulateOverlap runs jobs under policy and returns their completion times.
func SimulateOverlap(jobs []OverlapJob, policy string) ([]float64, error) {
	st := make([]*ovState, len(jobs))
	for i, j := range jobs {
		if err := checkOverlapJob(i, j); err != nil {
			return nil, err
		}
		if j.Map <= 0 || j.Shuffle <= 0 {
			return nil, fmt.Errorf("%w: job %d has no map or shuffle work", ErrOverlapJob, i)
		}
		st[i] = &ovState{OverlapJob: j, index: i, x: j.Map, y: j.Shuffle}
	}
	switch policy {
	case PolicyFIFO, PolicyMaxSRPT, PolicySplitSRPT, PolicySplitSRPTLiteral, PolicyKLPS:
	default:
		return nil, fmt.Errorf("strategies: unknown overlap policy %q", policy)
	}
	// Jobs join the present set as they are released and leave it as they
	// complete, so a step costs the jobs in the system, not the trace: a
	// 20,000-job trace runs in a fraction of a second. The present set
	// stays in input order (the policies' ties are broken by it).
	byRelease := make([]int, len(st))
	for i := range byRelease {
		byRelease[i] = i
	}
	sort.SliceStable(byRelease, func(a, b int) bool { return st[byRelease[a]].Release < st[byRelease[b]].Release })
	var present []*ovState
	t, left, released := 0.0, len(st), 0
	for steps := 0; left > 0; steps++ {
		if steps > 10_000_000 {
			return nil, fmt.Errorf("strategies: overlap simulation did not converge")
		}
		joined := false
		for released < len(byRelease) && st[byRelease[released]].present(t) {
			present = append(present, st[byRelease[released]])
			released++
			joined = true
		}
		if joined {
			sort.Slice(present, func(a, b int) bool { return present[a].index < present[b].index })
		}
		for _, j := range present {
			j.m, j.s = 0, 0
		}
		allocate(present, policy)
		// The next event: a release, a station finishing a job's work, or
		// a shuffle catching up with its map.
		next := math.Inf(1)
		if released < len(byRelease) {
			next = st[byRelease[released]].Release - t
		}
		for _, j := range present {
			if j.m > 0 && j.x > ovEps {
				next = math.Min(next, j.x/j.m)
			}
			if j.s > 0 && j.y > ovEps {
				next = math.Min(next, j.y/j.s)
			}
			if j.s > 0 && j.m >= 0 && !j.caughtUp() && j.x > ovEps {
				fs, fm := (j.Shuffle-j.y)/j.Shuffle, (j.Map-j.x)/j.Map
				if rel := j.s/j.Shuffle - j.m/j.Map; rel > 0 {
					next = math.Min(next, (fm-fs)/rel)
				}
			}
		}
		if math.IsInf(next, 1) {
			return nil, fmt.Errorf("strategies: overlap simulation stalled at %v", t)
		}
		next = math.Max(next, 0)
		t += next
		still := present[:0]
		for _, j := range present {
			j.x = math.Max(j.x-j.m*next, 0)
			j.y = math.Max(j.y-j.s*next, 0)
			if j.x <= 1e-9 && j.y <= 1e-9 {
				j.x, j.y, j.done, j.completed = 0, 0, true, t
				left--
				continue
			}
			still = append(still, j)
		}
		present = still
	}
	out := make([]float64, len(st))
	for i, j := range st {
		out[i] = j.completed
	}
	return out, nil
}

func allocate(present []*ovState, policy string) {
	switch policy {
	case PolicyFIFO:
		order := append([]*ovState(nil), present...)
		sort.SliceStable(order, func(a, b int) bool { return order[a].Release < order[b].Release })
		serve(order, 1, 1)
	case PolicyMaxSRPT:
		order := append([]*ovState(nil), present...)
		sort.SliceStable(order, func(a, b int) bool {
			return math.Max(order[a].x, order[a].y) < math.Max(order[b].x, order[b].y)
		})
		serve(order, 1, 1)
	case PolicySplitSRPT, PolicySplitSRPTLiteral:
		// Algorithm 2 (Lin et al. §4.2): the map-heavy class S1 has μ2 of the
		// map station and μ1 of the shuffle station, the shuffle-heavy
		// class S2 the rest; SRPT within each, on the remaining map size
		// in S1 and the remaining shuffle size in S2. The paper's stations
		// are work-conserving servers, so what one class cannot use — it
		// is empty, or its jobs' shuffles wait for their maps — goes to the
		// other; the literal reading leaves it idle, and at load 0.9 its
		// queue grows without bound (docs/MEASUREMENTS.md).
		beta := math.Inf(1)
		var mapHeavy, shuffleHeavy []*ovState
		for _, j := range present {
			beta = math.Min(beta, math.Max(j.Map/j.Shuffle, j.Shuffle/j.Map))
			if j.Map >= j.Shuffle {
				mapHeavy = append(mapHeavy, j)
			} else {
				shuffleHeavy = append(shuffleHeavy, j)
			}
		}
		mu1, mu2 := 1/(1+beta), beta/(1+beta)
		sort.SliceStable(mapHeavy, func(a, b int) bool { return mapHeavy[a].x < mapHeavy[b].x })
		sort.SliceStable(shuffleHeavy, func(a, b int) bool { return shuffleHeavy[a].y < shuffleHeavy[b].y })
		if policy == PolicySplitSRPTLiteral {
			serve(mapHeavy, mu2, mu1)
			serve(shuffleHeavy, mu1, mu2)
			break
		}
		spare1, spare2 := serveMap(mapHeavy, mu2), serveMap(shuffleHeavy, mu1)
		serveMap(shuffleHeavy, spare1)
		serveMap(mapHeavy, spare2)
		spare1, spare2 = serveShuffle(mapHeavy, mu1), serveShuffle(shuffleHeavy, mu2)
		serveShuffle(shuffleHeavy, spare1)
		serveShuffle(mapHeavy, spare2)
	case PolicyKLPS:
		order := append([]*ovState(nil), present...)
		sort.SliceStable(order, func(a, b int) bool { return order[a].Release < order[b].Release })
		var mapping []*ovState
		for _, j := range order {
			if j.x > ovEps && len(mapping) < LPSLimit {
				mapping = append(mapping, j)
			}
		}
		for _, j := range mapping {
			j.m = 1 / float64(len(mapping))
		}
		// Processor sharing at the shuffle: water-filling under each
		// job's cap.
		active := append([]*ovState(nil), order...)
		capLeft := 1.0
		for len(active) > 0 && capLeft > ovEps {
			share := capLeft / float64(len(active))
			var still []*ovState
			for _, j := range active {
				if c := j.shuffleCap() - j.s; c <= share {
					if c > 0 {
						j.s += c
						capLeft -= c
					}
				} else {
					still = append(still, j)
				}
			}
			if len(still) == len(active) {
				for _, j := range still {
					j.s += share
				}
				break
			}
			active = still
		}
	}
}

// OverlapLowerBound returns Lin et al.'s lower bound (their §5.1, used in
// §6 to normalise "relative E[T]") on the mean response time (completion −
// release) that any policy, online or offline, can achieve on jobs.
//
// The paper's construction, followed here: single-station system A serves
// the jobs' map sizes and system B their shuffle sizes, both released as in
// jobs, each on a unit-rate server under preemptive SRPT, which minimises
// total response time on one server. The periods between the instants at
// which A and B are both idle (the busy periods of the union of their busy
// periods) split the jobs by release; a job of the tandem queue completes no
// earlier than its map and its shuffle would alone, and A and B start each
// period empty, so the tandem queue's total response time over one period's
// jobs is at least max(A's total, B's total) over them. The bound is the sum
// of those maxima over the periods, divided by the number of jobs. It is at
// least max(mean SRPT response on the map sizes, mean SRPT response on the
// shuffle sizes), and the paper notes it can be loose.
//
// [recon] The paper does not say to which period a job released exactly at
// an instant where both systems go idle belongs; here busy periods are
// half-open, so such a job starts a new period (either choice is a valid
// bound). Zero sizes are allowed (a job with no work at a station has
// response 0 there); a job with none at either adds 0 to the total but
// still counts in the mean. No jobs give 0.
//
// Releases and sizes must be finite and non-negative; otherwise the error
// wraps ErrOverlapJob.
func OverlapLowerBound(jobs []OverlapJob) (float64, error) {
	if len(jobs) == 0 {
		return 0, nil
	}
	release := make([]float64, len(jobs))
	mapSize := make([]float64, len(jobs))
	shuffleSize := make([]float64, len(jobs))
	for i, j := range jobs {
		if err := checkOverlapJob(i, j); err != nil {
			return 0, err
		}
		release[i], mapSize[i], shuffleSize[i] = j.Release, j.Map, j.Shuffle
	}
	doneA, busyA := srptSingle(release, mapSize)
	doneB, busyB := srptSingle(release, shuffleSize)
	periods := mergeBusy(append(busyA, busyB...))
	sumA := make([]float64, len(periods))
	sumB := make([]float64, len(periods))
	for i := range jobs {
		if mapSize[i] == 0 && shuffleSize[i] == 0 {
			continue // response 0 in both systems
		}
		// The period whose [start, end) holds the release.
		p := sort.Search(len(periods), func(k int) bool { return periods[k][1] > release[i] })
		if p == len(periods) || periods[p][0] > release[i] {
			// Cannot happen: a job with work is released inside a busy period.
			return 0, fmt.Errorf("strategies: overlap lower bound lost job %d", i)
		}
		sumA[p] += doneA[i] - release[i]
		sumB[p] += doneB[i] - release[i]
	}
	total := 0.0
	for p := range periods {
		total += math.Max(sumA[p], sumB[p])
	}
	return total / float64(len(jobs)), nil
}

// srptSingle runs preemptive SRPT on one unit-rate server and returns each
// job's completion time and the server's busy periods [start, end), in
// order. A job of size 0 completes at its release and opens no period.
func srptSingle(release, size []float64) (done []float64, busy [][2]float64) {
	n := len(release)
	done = make([]float64, n)
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return release[order[a]] < release[order[b]] })
	q := &srptQueue{}
	rem := make([]float64, n)
	t, next, start := 0.0, 0, 0.0
	for next < n || q.Len() > 0 {
		if q.Len() == 0 {
			t = math.Max(t, release[order[next]])
			start = t
		}
		for next < n && release[order[next]] <= t {
			i := order[next]
			next++
			if size[i] == 0 {
				done[i] = release[i]
				continue
			}
			rem[i] = size[i]
			heap.Push(q, srptItem{rem: rem[i], idx: i})
		}
		if q.Len() == 0 {
			continue // only zero-size jobs arrived
		}
		arrival := math.Inf(1)
		if next < n {
			arrival = release[order[next]]
		}
		top := (*q)[0]
		if t+top.rem <= arrival {
			t += top.rem
			done[top.idx] = t
			heap.Pop(q)
			if q.Len() == 0 {
				busy = append(busy, [2]float64{start, t})
			}
		} else {
			(*q)[0].rem -= arrival - t
			t = arrival
		}
	}
	return done, busy
}

type srptItem struct {
	rem float64
	idx int
}

// srptQueue is a min-heap on remaining size, ties by job index.
type srptQueue []srptItem

func (q srptQueue) Len() int { return len(q) }
func (q srptQueue) Less(a, b int) bool {
	if q[a].rem != q[b].rem {
		return q[a].rem < q[b].rem
	}
	return q[a].idx < q[b].idx
}
func (q srptQueue) Swap(a, b int) { q[a], q[b] = q[b], q[a] }
func (q *srptQueue) Push(x any)   { *q = append(*q, x.(srptItem)) }
func (q *srptQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// mergeBusy merges half-open intervals [start, end) that overlap into the
// busy periods of their union, sorted by start; intervals that only touch
// stay apart.
func mergeBusy(iv [][2]float64) [][2]float64 {
	sort.Slice(iv, func(a, b int) bool { return iv[a][0] < iv[b][0] })
	var out [][2]float64
	for _, v := range iv {
		if k := len(out) - 1; k >= 0 && v[0] < out[k][1] {
			out[k][1] = math.Max(out[k][1], v[1])
			continue
		}
		out = append(out, v)
	}
	return out
}

// OverlapNow is a job as a broker sees it at one moment: its sizes (map and
// shuffle work) and what is left of them.
type OverlapNow struct {
	OverlapJob
	MapLeft, ShuffleLeft float64
}

// OverlapRates is what policy gives each present job of the map and the
// shuffle station now (each station's capacity 1): the allocation
// SimulateOverlap integrates, for a broker that re-plans every round. A job
// without shuffle work is given a vanishing one, so map-only jobs take part.
func OverlapRates(jobs []OverlapNow, policy string) (mapRate, shuffleRate []float64, err error) {
	switch policy {
	case PolicyFIFO, PolicyMaxSRPT, PolicySplitSRPT, PolicyKLPS:
	default:
		return nil, nil, fmt.Errorf("%w: unknown overlap policy %q", ErrOverlapJob, policy)
	}
	st := make([]*ovState, len(jobs))
	for i, j := range jobs {
		if err := checkOverlapJob(i, j.OverlapJob); err != nil {
			return nil, nil, err
		}
		if !(j.MapLeft >= 0 && j.MapLeft <= j.Map+ovEps && j.ShuffleLeft >= 0 && j.ShuffleLeft <= j.Shuffle+ovEps) {
			return nil, nil, fmt.Errorf("%w: job %d has %v of %v map and %v of %v shuffle left", ErrOverlapJob, i, j.MapLeft, j.Map, j.ShuffleLeft, j.Shuffle)
		}
		o := j.OverlapJob
		x, y := j.MapLeft, j.ShuffleLeft
		if o.Map <= 0 {
			o.Map, x = 1e-9, 0
		}
		if o.Shuffle <= 0 {
			o.Shuffle, y = 1e-9, 1e-9*x/o.Map
		}
		st[i] = &ovState{OverlapJob: o, x: x, y: y}
	}
	allocate(st, policy)
	mapRate, shuffleRate = make([]float64, len(st)), make([]float64, len(st))
	for i, j := range st {
		mapRate[i], shuffleRate[i] = j.m, j.s
	}
	return mapRate, shuffleRate, nil
}
