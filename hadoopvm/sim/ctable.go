package sim

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// tableBackgroundRate is the spending rate (micro-credits per second) of
// the background VM on each host of a JockeyTable run; the job's VM bids
// a·tableBackgroundRate/(1−a) against it for a share a.
const tableBackgroundRate = 1000

// tableTick is the agents' tick in a JockeyTable run.
const tableTick = time.Minute

// JobProgress is Jockey's progress indicator (mapreduce.Spec.Progress) for
// a job with mapsDone of its maps and reducesDone of its reduces done.
func JobProgress(job JobSpec, mapsDone, reducesDone int) float64 {
	return job.tasks().Progress(mapsDone, reducesDone)
}

// JockeyTable builds Jockey's C(p, a) offline (Jockey §4) by simulating
// the job runs times for each allocation a in allocs.
//
// An allocation is a share of each of the job's hosts, in (0, 1]. Each run
// is a fresh simulation with one host per VM of the job (cores cores, speed
// 1), each VM with slots task slots; on each host a background VM wants all
// the cores and spends at a fixed rate, and the job's VM bids at a rate
// that gives it the share a under the agents' share rule
// (a·rate_bg/(1−a)); for a = 1 there is no background. The job (its Submit
// and After ignored) is submitted at time 0 and its progress
// (JobProgress) followed through its task completions; for each progress
// point i/(points−1) the remaining time is the job's finish minus the
// first time its progress reached the point, averaged over the runs.
//
// Run r of every allocation uses the same simulator seed, derived from
// seed and r (common random numbers: without failures the tasks' work is
// the same at every allocation, so the table compares allocations on the
// same draws). The result is deterministic for a seed.
//
// The table's Alloc is allocs sorted increasing, its Progress 0, …, 1 and
// Remaining[i][k] the averaged remaining time at Progress[i] with Alloc[k]
// (0 at progress 1). Invalid input (no allocs, an allocation outside
// (0, 1] or repeated, points < 2, runs < 1, slots < 1, cores ≤ 0, a job
// without VMs or maps) gives an error wrapping ErrSpec.
func JockeyTable(job JobSpec, slots int, cores float64, allocs []float64, points, runs int, seed uint64) (strategies.CTable, error) {
	var none strategies.CTable
	switch {
	case len(allocs) == 0:
		return none, fmt.Errorf("%w: no allocations", ErrSpec)
	case points < 2:
		return none, fmt.Errorf("%w: %d progress points, want at least 2", ErrSpec, points)
	case runs < 1:
		return none, fmt.Errorf("%w: %d runs, want at least 1", ErrSpec, runs)
	case slots < 1:
		return none, fmt.Errorf("%w: %d slots per VM", ErrSpec, slots)
	case !(cores > 0) || math.IsInf(cores, 0):
		return none, fmt.Errorf("%w: %v cores per host", ErrSpec, cores)
	case len(job.VMs) == 0 || job.Maps < 1 || !(job.Map.Mean > 0) || job.Reduces < 0 || job.Reduces > 0 && !(job.Reduce.Mean > 0):
		return none, fmt.Errorf("%w: job %q", ErrSpec, job.ID)
	}
	as := append([]float64(nil), allocs...)
	sort.Float64s(as)
	for k, a := range as {
		if !(a > 0 && a <= 1) {
			return none, fmt.Errorf("%w: allocation %v outside (0, 1]", ErrSpec, a)
		}
		if k > 0 && a == as[k-1] {
			return none, fmt.Errorf("%w: allocation %v repeated", ErrSpec, a)
		}
	}
	seen := map[string]bool{}
	for _, v := range job.VMs {
		if seen[v] {
			return none, fmt.Errorf("%w: job %q lists VM %s twice", ErrSpec, job.ID, v)
		}
		seen[v] = true
	}
	if job.ID == "" {
		job.ID = "job"
	}
	if job.User == "" {
		job.User = "user"
	}
	job.Submit, job.After = 0, nil

	tbl := strategies.CTable{Alloc: as, Progress: make([]float64, points), Remaining: make([][]time.Duration, points)}
	for i := range tbl.Progress {
		tbl.Progress[i] = float64(i) / float64(points-1)
		tbl.Remaining[i] = make([]time.Duration, len(as))
	}
	tbl.Progress[points-1] = 1
	sums := make([]time.Duration, points)
	for k, a := range as {
		clear(sums)
		for r := range runs {
			rem, err := tableRun(job, slots, cores, a, tbl.Progress, mix64(seed^mix64(uint64(r)+1)))
			if err != nil {
				return none, fmt.Errorf("sim: C(p, %v), run %d: %w", a, r, err)
			}
			for i, d := range rem {
				sums[i] += d
			}
		}
		for i := range points {
			tbl.Remaining[i][k] = sums[i] / time.Duration(runs)
		}
		tbl.Remaining[points-1][k] = 0
	}
	return tbl, nil
}

// tableRun simulates the job once at allocation a and returns the remaining
// time at each progress point.
func tableRun(job JobSpec, slots int, cores, a float64, progress []float64, seed uint64) ([]time.Duration, error) {
	var hosts []HostSpec
	var vms []VMSpec
	for i, v := range job.VMs {
		h := HostSpec{ID: fmt.Sprint("host-", i), Cores: cores}
		if a < 1 {
			h.Background, h.BackgroundRate = cores, tableBackgroundRate
		}
		hosts = append(hosts, h)
		vms = append(vms, VMSpec{ID: v, Owner: job.User, Host: h.ID, Slots: slots})
	}
	start := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	// The agents tick once a minute, as in a Jockey experiment's runs (its
	// control period). The share is bid once for the whole run, so the tick
	// only paces charging: the table is the same to the nanosecond's
	// rounding as with the default 10 s tick, whose agent ticks were most of
	// a table's cost.
	s, err := New(Config{Seed: seed, Start: start, Tick: tableTick}, hosts, vms)
	if err != nil {
		return nil, err
	}
	// Long enough for the whole job: ten times its serial work at its
	// share of (at most) one core, plus an hour.
	serial := float64(job.Maps)*job.Map.Mean + float64(job.Reduces)*(job.Shuffle.Mean+job.Reduce.Mean)
	secs := min(10*serial/(a*min(cores, 1))+3600, 100*365*24*3600) // capped at a century
	horizon := time.Duration(secs * float64(time.Second))
	if a < 1 {
		rate := a * tableBackgroundRate / (1 - a)
		budget := math.Ceil(rate * horizon.Seconds())
		if budget > float64(money.Max) {
			return nil, fmt.Errorf("%w: allocation %v needs a budget above the maximum", ErrSpec, a)
		}
		for _, v := range job.VMs {
			if err := s.Bid(v, "jockey-table-"+v, money.Micro(budget), horizon); err != nil {
				return nil, err
			}
		}
	}
	o := &progressObserver{job: job, progress: progress, first: make([]time.Time, 0, len(progress))}
	s.Observe(o)
	if err := s.Submit(job); err != nil {
		return nil, err
	}
	if _, err := s.Run(horizon); err != nil {
		return nil, err
	}
	if o.finish.IsZero() {
		return nil, fmt.Errorf("sim: job %s did not finish", job.ID)
	}
	rem := make([]time.Duration, len(progress))
	for i, t := range o.first {
		rem[i] = o.finish.Sub(t)
	}
	return rem, nil // points never reached (none, at finish) stay 0
}

// progressObserver follows one job's progress: first[i] is the first time
// it reached progress[i].
type progressObserver struct {
	job           JobSpec
	progress      []float64
	maps, reduces int
	first         []time.Time
	finish        time.Time
}

func (o *progressObserver) reached(at time.Time) {
	p := JobProgress(o.job, o.maps, o.reduces)
	for len(o.first) < len(o.progress) && p >= o.progress[len(o.first)]-1e-9 {
		o.first = append(o.first, at)
	}
}

func (o *progressObserver) JobSubmitted(job JobSpec, at time.Time) {
	if job.ID == o.job.ID {
		o.reached(at)
	}
}

func (o *progressObserver) TaskStarted(string, bool, int, string, time.Time) {}

func (o *progressObserver) TaskFinished(job string, reduce bool, _ int, _ string, at time.Time, ok bool) {
	if job != o.job.ID || !ok {
		return
	}
	if reduce {
		o.reduces++
	} else {
		o.maps++
	}
	o.reached(at)
}

func (o *progressObserver) JobFinished(job string, at time.Time) {
	if job == o.job.ID {
		o.finish = at
	}
}

// mix64 is splitmix64's finaliser: it spreads a seed's bits.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// WireTable is a C(p, a) table as a job file carries it (seconds).
func WireTable(t strategies.CTable) *wire.JockeyTable {
	out := &wire.JockeyTable{Progress: append([]float64(nil), t.Progress...), Alloc: append([]float64(nil), t.Alloc...)}
	for _, row := range t.Remaining {
		secs := make([]float64, len(row))
		for k, d := range row {
			secs[k] = d.Seconds()
		}
		out.Remaining = append(out.Remaining, secs)
	}
	return out
}
