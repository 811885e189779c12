package strategies

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
)

// MaxDeadlineShare is the largest share of a host the deadline service
// buys: what a job's control loop may ask, and what the jobs on a host
// are priced at together.
const MaxDeadlineShare = 0.95

// EDFJob is an admitted job as EDF decides over it.
type EDFJob struct {
	ID       string
	Deadline time.Time // zero for a best-effort job
	Hosts    []string  // its VMs' hosts, one per VM
	// Overlap is a best-effort job's map and shuffle work and what is left
	// of them (Lin et al.'s model), its Release when it was admitted.
	Overlap OverlapNow
}

// EDFRun is which admitted jobs hold a share of their hosts now, and how
// much, and each host's total of those shares.
type EDFRun struct {
	Share map[string]float64 // job → share of each of its hosts; none: it waits
	Host  map[string]float64 // host → the running jobs' shares on it
}

// EDF decides who runs. Deadline jobs first, EDF over hosts: in deadline
// order, each job whose hosts no earlier job holds runs at the reserved
// share phi. At every moment some job due no later than a waiting one
// runs, so each finishes no later than in the single-server EDF schedule
// admission checked. Then the best-effort jobs whose hosts no deadline job
// holds share phi by the overlap policy (Lin et al.: MaxSRPT, SplitSRPT,
// k-LPS or FIFO), each at the share of its current station — the map
// station while it has maps left, the shuffle station after — scaled down
// where a host's total would pass phi.
func EDF(jobs []EDFJob, phi float64, policy string) EDFRun {
	var dl, be []EDFJob
	for _, j := range jobs {
		if j.Deadline.IsZero() {
			be = append(be, j)
		} else {
			dl = append(dl, j)
		}
	}
	sort.Slice(dl, func(i, k int) bool {
		if di, dk := dl[i].Deadline, dl[k].Deadline; !di.Equal(dk) {
			return di.Before(dk)
		}
		return dl[i].ID < dl[k].ID
	})
	run := EDFRun{Share: map[string]float64{}, Host: map[string]float64{}}
	taken := map[string]bool{}
	held := func(h string) bool { return taken[h] }
	for _, j := range dl {
		if slices.ContainsFunc(j.Hosts, held) {
			continue
		}
		run.Share[j.ID] = phi
		for _, h := range j.Hosts {
			taken[h] = true
		}
	}
	var free []EDFJob
	for _, j := range be {
		if !slices.ContainsFunc(j.Hosts, held) {
			free = append(free, j)
		}
	}
	sort.Slice(free, func(i, k int) bool { return free[i].ID < free[k].ID })
	run.overlap(free, phi, policy)
	clear(run.Host)
	for _, list := range [][]EDFJob{dl, free} {
		for _, j := range list {
			for _, h := range slices.Compact(slices.Sorted(slices.Values(j.Hosts))) {
				run.Host[h] += run.Share[j.ID]
			}
		}
	}
	return run
}

// overlap shares phi among the free best-effort jobs by policy.
func (run EDFRun) overlap(free []EDFJob, phi float64, policy string) {
	if len(free) > 0 {
		now := make([]OverlapNow, len(free))
		for i, j := range free {
			now[i] = j.Overlap
		}
		m, sh, err := OverlapRates(now, policy)
		if err == nil {
			for i, j := range free {
				r := m[i]
				if now[i].MapLeft <= 0 {
					r = sh[i]
				}
				if r > 1e-9 {
					run.Share[j.ID] = phi * r
				}
			}
		}
	}
	// Map and shuffle are one resource here, a host's CPU: where the
	// policy's two stations together ask more than phi of a host, its
	// best-effort jobs are scaled down to fit.
	for _, j := range free {
		for _, h := range j.Hosts {
			run.Host[h] += run.Share[j.ID]
		}
	}
	for _, j := range free {
		scale := 1.0
		for _, h := range j.Hosts {
			if t := run.Host[h]; t > phi {
				scale = min(scale, phi/t)
			}
		}
		run.Share[j.ID] *= scale
	}
}

// Job is a deadline plan's job as its round sees it: its state and what
// EDF decided.
type Job struct {
	Deadline bool // admitted at a deadline; else best effort
	Done     bool
	Work     float64 // seconds at a full share: the estimate's upper bound
	Progress float64
	// Control is the share the job's control loop last asked for.
	Control float64
	// Share is EDF's share for the job (0: it waits), HostShares EDF's
	// total on each host (EDFRun.Host).
	Share      float64
	HostShares map[string]float64
	// BestEffort is each of the job's hosts' price less the rates of
	// admitted jobs' bids: what it competes with, since EDF runs one
	// deadline job per host.
	BestEffort map[string]float64
	// MinDuration is the shortest bid (a tick).
	MinDuration time.Duration
}

// DeadlineEDF realises an admitted job's EDF share as spending: nothing
// while the job waits; else on each of its hosts the rate that buys its
// share q against the best-effort rates y there, the jobs' shares on the
// host adding to Q: r = q·y/(1 − Q), spread over its VMs there, for the
// job's predicted run at q. A deadline job's q is at least what its
// control loop asks (at most MaxDeadlineShare), and it never spends less
// than its budget left over that run (up to the rate buying
// MaxDeadlineShare), so a tighter deadline's higher price buys a larger
// share. The plan's VMs' hosts are those it was admitted on.
type DeadlineEDF struct{}

// Name is "deadline".
func (DeadlineEDF) Name() string { return "deadline" }

// Reads the plan's VMs and its job.
func (DeadlineEDF) Reads() Reads { return ReadsVMs | ReadsJob }

// Allocate is the job's round.
func (DeadlineEDF) Allocate(s Snapshot) Decision {
	j := s.Job
	if !s.spendable() || j == nil || j.Done || j.Share <= 0 {
		return s.nothing()
	}
	q := j.Share
	if j.Deadline {
		q = min(max(q, j.Control), MaxDeadlineShare)
	}
	var hosts []string
	perHost := map[string][]string{}
	for _, v := range s.VMs {
		if perHost[v.Host] == nil {
			hosts = append(hosts, v.Host)
		}
		perHost[v.Host] = append(perHost[v.Host], v.Name)
	}
	if len(hosts) == 0 {
		return s.nothing()
	}
	need, ceiling := make([]float64, len(hosts)), make([]float64, len(hosts))
	total := 0.0
	for i, h := range hosts {
		y := j.BestEffort[h]
		others := max(j.HostShares[h]-j.Share, 0)
		sum := min(others+q, MaxDeadlineShare)
		need[i] = max(q*y/(1-sum), 1)
		ceiling[i] = max(MaxDeadlineShare*y/(1-MaxDeadlineShare), 1)
		total += need[i]
	}
	d := time.Duration(j.Work * (1 - j.Progress) / q * float64(time.Second))
	d = min(max(d, j.MinDuration), s.Left)
	if spread := float64(s.Remaining) / d.Seconds(); j.Deadline && spread > total {
		for i := range hosts {
			need[i] = min(need[i]*spread/total, ceiling[i])
		}
	}
	budget := 0.0
	for i := range hosts {
		budget += need[i] * d.Seconds()
	}
	scale := 1.0
	if budget > float64(s.Remaining) {
		scale = float64(s.Remaining) / budget
	}
	out := make([]Allocation, 0, len(s.VMs))
	for i, h := range hosts {
		per := need[i] * scale * d.Seconds() / float64(len(perHost[h]))
		for _, vm := range perHost[h] {
			if b := money.Micro(math.Floor(per)); b > 0 {
				out = append(out, Allocation{VM: vm, Host: h, Budget: b, Duration: d})
			}
		}
	}
	return Decision{Allocs: out, Stage: s.Stage}
}
