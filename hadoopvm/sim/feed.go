package sim

import (
	"context"
	"strings"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// StageListener is told when a workflow's stage starts (broker.Broker).
type StageListener interface {
	StageStarted(ctx context.Context, user, workflow, stage string) error
}

// StageFeed is an Observer that tells l about every job submitted whose
// name is "workflow:stage", as the YARN monitor does in production.
func StageFeed(l StageListener) Observer { return stageFeed{l} }

type stageFeed struct{ l StageListener }

func (f stageFeed) JobSubmitted(j JobSpec, _ time.Time) {
	if wf, stage, ok := strings.Cut(j.Name, ":"); ok {
		_ = f.l.StageStarted(context.Background(), j.User, wf, stage)
	}
}
func (stageFeed) TaskStarted(string, bool, int, string, time.Time)        {}
func (stageFeed) TaskFinished(string, bool, int, string, time.Time, bool) {}
func (stageFeed) JobFinished(string, time.Time)                           {}

// ProgressListener is told a deadline job's progress (broker.Broker).
type ProgressListener interface {
	JobProgress(ctx context.Context, req *wire.ProgressRequest) (wire.Job, error)
}

// ProgressFeed is an Observer that reports every job's progress to l as
// its tasks finish (JobProgress: Jockey's indicator), and its end, as the
// YARN monitor does in production. Reports for jobs l does not know (not
// admitted with a deadline) are refused by l and ignored here.
func ProgressFeed(l ProgressListener) Observer {
	return &progressFeed{l: l, jobs: map[string]*feedJob{}}
}

type feedJob struct {
	spec       JobSpec
	maps, reds int
}

type progressFeed struct {
	l    ProgressListener
	jobs map[string]*feedJob
}

func (f *progressFeed) report(j *feedJob, done bool) {
	_, _ = f.l.JobProgress(context.Background(), &wire.ProgressRequest{User: j.spec.User, Job: j.spec.Name,
		Progress: JobProgress(j.spec, j.maps, j.reds), MapsDone: j.maps, ReducesDone: j.reds, Done: done})
}

func (f *progressFeed) JobSubmitted(j JobSpec, _ time.Time)              { f.jobs[j.ID] = &feedJob{spec: j} }
func (f *progressFeed) TaskStarted(string, bool, int, string, time.Time) {}
func (f *progressFeed) TaskFinished(job string, reduce bool, _ int, _ string, _ time.Time, ok bool) {
	j := f.jobs[job]
	if j == nil || !ok {
		return
	}
	if reduce {
		j.reds++
	} else {
		j.maps++
	}
	f.report(j, false)
}
func (f *progressFeed) JobFinished(job string, _ time.Time) {
	if j := f.jobs[job]; j != nil {
		f.report(j, true)
		delete(f.jobs, job)
	}
}
