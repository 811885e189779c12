package broker

import (
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// The deadline service's execution: EDF over the admitted jobs
// (strategies.EDF), each job's round by the registered "deadline" strategy
// (strategies.DeadlineEDF) over what is gathered here, and the accounting
// of the share-seconds each job held.

// jobRec is an admitted job, kept on its plan's record so every replica
// sees it and a survivor runs it.
type jobRec struct {
	Spec     wire.JobSpec `json:"spec"`
	Work     float64      `json:"work"` // seconds at a full share admission planned: the estimate's upper bound, with its margin (estimate)
	Admitted time.Time    `json:"admitted"`
	Deadline time.Time    `json:"deadline"`
	Price    money.Micro  `json:"price"`
	// Request is what the submit asked (submitFingerprint): its id again
	// with another job, deadline or budget is refused. Empty in a record of
	// an older broker.
	Request string `json:"request,omitempty"`
	// Commit is the admission's token on its hosts' commitment records
	// (commit.go).
	Commit   string    `json:"commit,omitempty"`
	Progress float64   `json:"progress"`
	MapsDone int       `json:"maps_done"`
	RedsDone int       `json:"reduces_done"`
	Done     bool      `json:"done,omitempty"`
	Finished time.Time `json:"finished,omitzero"`
	// Share is what the control loop (Jockey with a C(p, a) table, else ARIA
	// over the tasks left) last said the job needs; the job holds at least
	// the reserved share whenever it runs.
	Share   float64   `json:"share,omitempty"`
	Control time.Time `json:"control,omitzero"`
	// Held is the share-seconds the job has held in finished stints,
	// RunFrom when its current stint of holding RunShare began; MapWork
	// what it had held when its maps were done. Once done, Held and
	// MapWork are its measured work, the estimator's training data: what
	// it held or what its VMs used (usedWork), whichever is more — what
	// its bids buy misses the idle cores it ran on, and the work done
	// while it waited, most of a small job's under load.
	Held     float64   `json:"held"`
	RunFrom  time.Time `json:"run_from,omitzero"`
	RunShare float64   `json:"run_share,omitempty"`
	MapWork  float64   `json:"map_work,omitempty"`
	// UsedFrom is what the job's VMs had used when it was admitted
	// (usedWork), by this replica's count.
	UsedFrom float64 `json:"used_from,omitempty"`
	// Bound is the regression's upper bound the job was admitted at
	// (absent: estimated from its profile); its miss, once done, is Held
	// over Bound.
	Bound float64 `json:"bound,omitempty"`
}

// usedOf is the share-seconds of their hosts vms have used (b.used), over
// the number of hosts, as Held counts a share: the mean over the hosts.
func (b *Broker) usedOf(vms []string) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	hosts := map[string]bool{}
	total := 0.0
	for _, vm := range vms {
		if at, ok := b.vmAt[vm]; ok {
			hosts[at.host] = true
			total += b.used[vm]
		}
	}
	if len(hosts) == 0 {
		return 0
	}
	return total / float64(len(hosts))
}

// usedWork is the share-seconds of its hosts the job's VMs used since it
// was admitted: its tasks' work wherever it ran — on the share it bought,
// and on cores others left idle, while it held bids and while it waited.
// 0 if this replica's count began after the job's (it restarted).
func (b *Broker) usedWork(j *jobRec) float64 {
	return max(b.usedOf(j.Spec.VMs)-j.UsedFrom, 0)
}

// held is the share-seconds the job has held by now.
func (j *jobRec) held(now time.Time) float64 {
	h := j.Held
	if !j.RunFrom.IsZero() {
		h += now.Sub(j.RunFrom).Seconds() * j.RunShare
	}
	return h
}

// liveJob reports whether rec's job may still run at now: not done, its
// plan running or starting and not past its end. A plan past its end is
// settled only Settle later; meanwhile its job holds no host, counts in no
// queue and keeps no name from a new job.
func (rec *planRecord) liveJob(now time.Time) bool {
	st := rec.Plan.Status
	return rec.Job != nil && !rec.Job.Done && (st == wire.PlanRunning || st == planStarting) && rec.Plan.End.After(now)
}

// edf decides which admitted jobs run at now and at what share
// (strategies.EDF over the live jobs).
func (b *Broker) edf(now time.Time) strategies.EDFRun {
	var jobs []strategies.EDFJob
	b.store.each(func(rec *planRecord, _ uint64) {
		if !rec.liveJob(now) {
			return
		}
		j := rec.Job
		e := strategies.EDFJob{ID: edfID(refOf(&rec.Plan)), Deadline: j.Deadline}
		for _, v := range rec.Plan.VMs {
			e.Hosts = append(e.Hosts, v.Host)
		}
		if j.Deadline.IsZero() {
			s := j.Spec
			x, y := s.Profile.OverlapWork(s.Maps, s.Reduces, s.MapSlots, s.ReduceSlots)
			e.Overlap = strategies.OverlapNow{
				OverlapJob: strategies.OverlapJob{Release: j.Admitted.Sub(time.Unix(0, 0)).Seconds(), Map: x, Shuffle: y},
				MapLeft:    x * (1 - frac(j.MapsDone, j.Spec.Maps)), ShuffleLeft: y * (1 - frac(j.RedsDone, j.Spec.Reduces))}
		}
		jobs = append(jobs, e)
	})
	return strategies.EDF(jobs, b.cfg.DeadlineShare, b.cfg.JobOrder)
}

// edfID names plan ref's job to EDF: its id first, so that jobs of equal
// deadlines run in plan id order (EDF breaks ties by name), then its user,
// since plan ids are each user's.
func edfID(ref planRef) string { return ref.id + "\x00" + ref.user }

func frac(done, total int) float64 {
	if total <= 0 {
		return 1
	}
	return min(float64(done)/float64(total), 1)
}

// jobInput is what the deadline strategy reads of a plan's job: its state,
// EDF's decision, and, when it runs, the best-effort prices of the hosts
// of vms (its known VMs); b.mu must be held.
func (b *Broker) jobInput(rec *planRecord, run strategies.EDFRun, vms []strategies.VM) *strategies.Job {
	j := rec.Job
	if j == nil {
		return nil
	}
	in := &strategies.Job{Deadline: !j.Deadline.IsZero(), Done: j.Done, Work: j.Work, Progress: j.Progress, Control: j.Share,
		Share: run.Share[edfID(refOf(&rec.Plan))], HostShares: run.Host, MinDuration: b.cfg.Tick}
	if j.Done || in.Share <= 0 {
		return in // it waits: no prices needed
	}
	in.BestEffort = map[string]float64{}
	for _, v := range vms {
		if _, ok := in.BestEffort[v.Host]; !ok {
			in.BestEffort[v.Host] = b.bestEffortPrice(b.hosts[v.Host])
		}
	}
	return in
}

// accountRun closes the job's stint at now and opens a new one with the
// share its bids buy (share, asked only then), when its bids changed or
// it started or stopped running. It reports whether it changed the record.
func accountRun(rec *planRecord, now time.Time, changed bool, share func() float64) bool {
	j := rec.Job
	if j == nil || j.Done {
		return false
	}
	running := len(rec.Bids) > 0
	if !changed && running == !j.RunFrom.IsZero() {
		return false
	}
	nj := *j
	nj.Held, nj.RunFrom, nj.RunShare = j.held(now), time.Time{}, 0
	if running {
		nj.RunFrom, nj.RunShare = now, share()
	}
	rec.Job = &nj
	return true
}

// heldShare is the mean share of its hosts a plan's bids buy against the
// others' rates there (as the hosts last reported them).
func (b *Broker) heldShare(rec *planRecord) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	mine := map[string]float64{}
	for _, bid := range rec.Bids {
		mine[bid.Host] += bid.rate()
	}
	if len(mine) == 0 {
		return 0
	}
	total := 0.0
	for h, r := range mine {
		st := b.hosts[h]
		y := st.Price
		for _, v := range st.VMs {
			if bid, ok := v.Bid(rec.Plan.ID); ok {
				y -= bid.Rate
			}
		}
		total += r / (r + max(y, 0))
	}
	return total / float64(len(mine))
}
