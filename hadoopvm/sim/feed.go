package sim

import (
	"context"
	"strings"
	"time"
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
