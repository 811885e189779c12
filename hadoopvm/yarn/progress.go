package yarn

import (
	"context"
	"fmt"
	"net/url"

	"github.com/mrmarket/mrmarket/strategies"
)

// Progress is a MapReduce application's task counts, what the deadline
// service's progress reports carry.
type Progress struct {
	App, Job             string
	Maps, MapsDone       int
	Reduces, ReducesDone int
	Done                 bool // the application has finished (in any final state)
	Succeeded            bool
}

type jobResponse struct {
	Job *Job `json:"job"`
}

// JobProgress finds user's newest application named name and reads its
// job's task counts: from its AM while it runs, from the history server
// once it has finished (counting every task done if the history server
// does not know the job yet).
func (m *Monitor) JobProgress(ctx context.Context, user, name string) (Progress, error) {
	apps, err := m.Apps(ctx)
	if err != nil {
		return Progress{}, err
	}
	var newest *App
	for i := range apps {
		a := &apps[i]
		if a.User == user && a.Name == name && (newest == nil || a.StartedTime > newest.StartedTime) {
			newest = a
		}
	}
	if newest == nil {
		return Progress{}, fmt.Errorf("%w: no application %q of %s", ErrNotFound, name, user)
	}
	p := Progress{App: newest.ID, Job: JobID(newest.ID)}
	var job *Job
	switch newest.State {
	case StateFinished, StateFailed, StateKilled:
		p.Done, p.Succeeded = true, newest.FinalStatus == "SUCCEEDED"
		if m.History != "" {
			var r jobResponse
			if err := m.get(ctx, m.History, "/ws/v1/history/mapreduce/jobs/"+url.PathEscape(p.Job), &r); err == nil {
				job = r.Job
			}
		}
	case StateRunning:
		jobs, err := m.Jobs(ctx, newest.ID)
		if err != nil {
			return Progress{}, err
		}
		if len(jobs) > 0 {
			job = &jobs[0]
		}
	}
	if job != nil {
		p.Maps, p.MapsDone, p.Reduces, p.ReducesDone = job.MapsTotal, job.MapsCompleted, job.ReducesTotal, job.ReducesCompleted
	}
	return p, nil
}

// Fraction is Jockey's totalworkWithQ over the job's two stages, each
// weighted by its work: tasks times mapSecs or reduceSecs, the profile's
// average task times (queueing left out). A finished job is 1.
func (p Progress) Fraction(mapSecs, reduceSecs float64) float64 {
	if p.Done {
		return 1
	}
	return strategies.MapReduceProgress(p.MapsDone, p.Maps, mapSecs, p.ReducesDone, p.Reduces, reduceSecs)
}
