package strategies

import (
	"fmt"
	"math"
	"sort"
)

// OverlapJob is a job of Lin et al.'s overlapping tandem queue (seed 001):
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
	PolicySplitSRPT = "splitsrpt" // map-heavy and shuffle-heavy jobs split the stations, SRPT within
	PolicyKLPS      = "klps"      // k-limited processor sharing at the map, sharing at the shuffle (Hadoop's Fair Scheduler)
)

// LPSLimit is k of k-LPS (seed 001 §5 uses 100).
const LPSLimit = 100

type ovState struct {
	OverlapJob
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
	for _, j := range order {
		if j.x > ovEps {
			j.m += mapCap
			break
		}
	}
	for _, j := range order {
		give := math.Min(shuffleCap, j.shuffleCap())
		if give > 0 {
			j.s += give
			shuffleCap -= give
		}
	}
}

// SimulateOverlap runs jobs under policy and returns their completion times.
func SimulateOverlap(jobs []OverlapJob, policy string) ([]float64, error) {
	st := make([]*ovState, len(jobs))
	for i, j := range jobs {
		if j.Map <= 0 || j.Shuffle <= 0 || j.Release < 0 {
			return nil, fmt.Errorf("strategies: job %d has no map or shuffle work", i)
		}
		st[i] = &ovState{OverlapJob: j, x: j.Map, y: j.Shuffle}
	}
	switch policy {
	case PolicyFIFO, PolicyMaxSRPT, PolicySplitSRPT, PolicyKLPS:
	default:
		return nil, fmt.Errorf("strategies: unknown overlap policy %q", policy)
	}
	t, left := 0.0, len(st)
	for steps := 0; left > 0; steps++ {
		if steps > 10_000_000 {
			return nil, fmt.Errorf("strategies: overlap simulation did not converge")
		}
		var present []*ovState
		for _, j := range st {
			j.m, j.s = 0, 0
			if j.present(t) {
				present = append(present, j)
			}
		}
		allocate(present, policy)
		// The next event: a release, a station finishing a job's work, or
		// a shuffle catching up with its map.
		next := math.Inf(1)
		for _, j := range st {
			if !j.done && j.Release > t+ovEps {
				next = math.Min(next, j.Release-t)
			}
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
		for _, j := range present {
			j.x = math.Max(j.x-j.m*next, 0)
			j.y = math.Max(j.y-j.s*next, 0)
			if j.x <= 1e-9 && j.y <= 1e-9 {
				j.x, j.y, j.done, j.completed = 0, 0, true, t
				left--
			}
		}
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
	case PolicySplitSRPT:
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
		serve(mapHeavy, mu2, mu1)
		serve(shuffleHeavy, mu1, mu2)
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
