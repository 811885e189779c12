package broker

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// The deadline service's control: progress reports, the control loop that
// sets the share a job asks for, and the jobs' public view.

// JobProgress records a running job's progress (the YARN monitor, or the
// simulator, reports it): it accounts the share-seconds the job held since
// the last report (its measured work), runs the control loop once a period
// (Jockey over the job's C(p, a) table when it has one, else ARIA's
// minimum slots for the tasks left at the pace measured so far, as a share
// of the job's slots), and
// when the job is done ends its plan, releasing what it did not spend.
func (b *Broker) JobProgress(ctx context.Context, req *wire.ProgressRequest) (wire.Job, error) {
	if err := req.Validate(); err != nil {
		return wire.Job{}, err
	}
	// The live job of that name (liveJob), else the one admitted last: a
	// plan past its end is settled only Settle later, and a job of its
	// name may be admitted meanwhile (clash).
	var best *planRecord
	now := b.cfg.Now()
	b.store.each(func(rec *planRecord, _ uint64) {
		j := rec.Job
		if j == nil || rec.Plan.User != req.User || j.Spec.Name != req.Job || rec.Plan.Status != wire.PlanRunning || j.Done {
			return
		}
		if best == nil || rec.liveJob(now) && !best.liveJob(now) || rec.liveJob(now) == best.liveJob(now) && j.Admitted.After(best.Job.Admitted) {
			best = rec
		}
	})
	if best == nil {
		return wire.Job{}, fmt.Errorf("%w %q of %s", ErrUnknownJob, req.Job, req.User)
	}
	ref := refOf(&best.Plan)
	var finished bool // this report is the one that finished the job
	rec, err := b.mutate(ctx, ref, func(rec *planRecord) error {
		j := rec.Job
		finished = req.Done && !j.Done
		nj := *j
		nj.Progress = max(j.Progress, req.Progress)
		nj.MapsDone, nj.RedsDone = max(j.MapsDone, req.MapsDone), max(j.RedsDone, req.ReducesDone)
		if nj.MapWork == 0 && nj.MapsDone >= j.Spec.Maps {
			nj.MapWork = max(j.held(now), b.usedWork(j))
		}
		if req.Done {
			nj.Done, nj.Finished, nj.Progress = true, now, 1
			nj.Held, nj.RunFrom, nj.RunShare = max(j.held(now), b.usedWork(j), nj.MapWork), time.Time{}, 0
			if nj.MapWork == 0 {
				nj.MapWork = nj.Held
			}
			if rec.Plan.End.After(now) {
				rec.Plan.End = now
			}
		} else if !j.Deadline.IsZero() && (j.Control.IsZero() || now.Sub(j.Control) >= jockeyPeriod) {
			nj.Share, nj.Control = b.control(&nj, now), now
		}
		rec.Job = &nj
		return nil
	})
	if err != nil {
		return wire.Job{}, err
	}
	if finished {
		b.cfg.Metrics.JobFinished(rec.Job.Deadline, rec.Job.Finished)
	}
	return b.jobView(rec, now), nil
}

// control is the share the job needs to meet its deadline from where it
// is, smoothed by Jockey's hysteresis.
func (b *Broker) control(j *jobRec, now time.Time) float64 {
	left := j.Deadline.Sub(now)
	var raw float64
	if t := j.Spec.Table; t != nil {
		tbl := strategies.CTable{Progress: t.Progress, Alloc: t.Alloc, Remaining: make([][]time.Duration, len(t.Remaining))}
		for i, row := range t.Remaining {
			for _, s := range row {
				tbl.Remaining[i] = append(tbl.Remaining[i], time.Duration(s*float64(time.Second)))
			}
		}
		// One period of Jockey's loop: elapsed 0 against the time left, so
		// the controller needs no state beyond the smoothed share.
		jk := strategies.Jockey{Table: tbl, Deadline: left, Slack: controlSlack, DeadZone: min(3*time.Minute, left/10)}
		_, r, err := jk.Step(0, j.Progress)
		if err != nil {
			return j.Share
		}
		raw = r
	} else {
		s := j.Spec
		// The profile's task times, stretched by how much slower the job
		// has been than they say (its measured work against ARIA's mean
		// for the progress made).
		prof := s.Profile
		if j.Progress > 0.05 {
			_, _, avg := strategies.ARIABounds(prof, s.Maps, s.Reduces, s.MapSlots, max(s.ReduceSlots, 1))
			if f := j.held(now) / (avg * j.Progress); f > 1 && avg > 0 {
				prof = prof.Scaled(f)
			}
		}
		m, r, err := strategies.ARIASlots(prof, max(s.Maps-j.MapsDone, 0), max(s.Reduces-j.RedsDone, 0),
			left.Seconds()/controlSlack, math.MaxInt32, math.MaxInt32)
		if err != nil {
			raw = 1
		} else {
			raw = float64(m) / float64(s.MapSlots)
			if s.Reduces > 0 {
				raw = max(raw, float64(r)/float64(s.ReduceSlots))
			}
		}
	}
	raw = min(raw, 1)
	if j.Control.IsZero() {
		return raw
	}
	return j.Share + 0.2*(raw-j.Share)
}

// jobView is the public view of an admitted job.
func (b *Broker) jobView(rec *planRecord, now time.Time) wire.Job {
	j := rec.Job
	v := wire.Job{ID: rec.Plan.ID, User: rec.Plan.User, Name: j.Spec.Name, Admitted: j.Admitted, Deadline: j.Deadline,
		Finished: j.Finished, Progress: j.Progress, Work: j.Work, Price: j.Price, Spent: rec.Plan.Spent}
	for _, bid := range rec.Bids {
		v.Spent += bid.charged(now)
	}
	phi := b.cfg.DeadlineShare
	late := !j.Deadline.IsZero() && (j.Done && j.Finished.After(j.Deadline) || !j.Done && now.After(j.Deadline))
	switch {
	case j.Done:
		v.Status, v.Predict = wire.JobDone, j.Finished
	case len(rec.Bids) > 0:
		v.Status, v.Share = wire.JobRunning, b.vmsShare(rec)
		v.Predict = at(now, j.Work*(1-j.Progress)/max(v.Share, 0.01))
	default:
		v.Status, v.Share = wire.JobQueued, b.vmsShare(rec)
		v.Predict = at(now, j.Work*(1-j.Progress)/phi)
	}
	if late {
		v.Status = wire.JobLate
	}
	if rec.Plan.Status == wire.PlanCancelled {
		v.Status = wire.PlanCancelled
	}
	return v
}

// vmsShare is the share a job's VMs get, the mean over the job's hosts:
// on each, what the job's VMs are funded with — the job's own bids as the
// plan placed them, and any other plan's bids on those VMs as the host last
// reported them — against the rest of the host's price.
func (b *Broker) vmsShare(rec *planRecord) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	type funds struct{ mine, rest float64 }
	var hosts []string // in the job's VM order, so the sum is the same every time
	on := map[string]*funds{}
	for _, vm := range rec.Job.Spec.VMs {
		host, st, ok := b.vmInfo(vm)
		if !ok {
			continue
		}
		f := on[host]
		if f == nil {
			f = &funds{rest: b.hosts[host].Price}
			on[host], hosts = f, append(hosts, host)
		}
		own, _ := st.Bid(rec.Plan.ID)
		f.mine += max(st.Rate-own.Rate, 0)
		if bid, ok := rec.Bids[vm]; ok {
			f.mine += bid.rate()
		}
		f.rest -= st.Rate
	}
	total := 0.0
	for _, h := range hosts {
		if f := on[h]; f.mine > 0 {
			total += f.mine / (f.mine + max(f.rest, 0))
		}
	}
	return total / float64(max(len(hosts), 1))
}

// Jobs lists admitted jobs, of req.User when set, earliest deadline first.
func (b *Broker) Jobs(req *wire.JobsRequest) wire.JobsReply {
	now := b.cfg.Now()
	rep := wire.JobsReply{Jobs: []wire.Job{}}
	b.store.each(func(rec *planRecord, _ uint64) {
		if rec.Job == nil || rec.Plan.Status == planStarting || rec.Plan.Status == wire.PlanFailed || req.User != "" && rec.Plan.User != req.User {
			return
		}
		rep.Jobs = append(rep.Jobs, b.jobView(rec, now))
	})
	sort.Slice(rep.Jobs, func(i, k int) bool {
		if !rep.Jobs[i].Deadline.Equal(rep.Jobs[k].Deadline) {
			return rep.Jobs[i].Deadline.Before(rep.Jobs[k].Deadline)
		}
		if rep.Jobs[i].ID != rep.Jobs[k].ID {
			return rep.Jobs[i].ID < rep.Jobs[k].ID
		}
		return rep.Jobs[i].User < rep.Jobs[k].User
	})
	return rep
}
