package stop

import (
	"context"
	"fmt"
	"log/slog"
	"math/bits"
	"time"

	"github.com/mrmarket/mrmarket/internal/obs"
)

// TickFunc is one round of a periodic loop at now.
type TickFunc func(ctx context.Context, now time.Time) error

// Ticker is a periodic loop with the one policy of the package doc.
type Ticker struct {
	// Component names the loop: the error metric's component and the
	// prefix of its log lines ("agent", "bank", "broker").
	Component string
	// Period is the cadence; it never changes.
	Period time.Duration
	// Now is the time each tick runs at (a component's own clock); nil is
	// the wall time the tick fired at. The wall ticker only paces.
	Now func() time.Time
	// Metrics counts every failed tick; nil counts nothing.
	Metrics *obs.Metrics
	// Logger logs failures as the policy says; nil logs nothing.
	Logger *slog.Logger
	// Attrs are added to every line (the agent's host).
	Attrs []any
}

// Run calls tick every Period until ctx ends.
func (t Ticker) Run(ctx context.Context, tick TickFunc) {
	tk := time.NewTicker(t.Period)
	defer tk.Stop()
	var failures int
	for {
		select {
		case <-ctx.Done():
			return
		case fired := <-tk.C:
			now := fired
			if t.Now != nil {
				now = t.Now()
			}
			failures = t.round(ctx, tick, now, failures)
		}
	}
}

// round runs one tick after failures consecutive failed ones and returns
// the count after it.
func (t Ticker) round(ctx context.Context, tick TickFunc, now time.Time, failures int) int {
	err := tick(ctx, now)
	switch {
	case err == nil:
		if failures > 0 {
			t.log(slog.LevelInfo, fmt.Sprintf("tick recovered after %d failures", failures), "failures", failures)
		}
		return 0
	case ctx.Err() != nil:
		return failures // stopping: not a failure of the loop
	}
	failures++
	t.Metrics.Error(t.Component, "tick")
	if failures == 1 {
		t.log(slog.LevelError, "tick failed; the next tick retries", "err", err)
	} else if bits.OnesCount(uint(failures)) == 1 { // 2, 4, 8, …
		t.log(slog.LevelError, "tick failed again; the next tick retries", "failures", failures, "err", err)
	}
	return failures
}

func (t Ticker) log(level slog.Level, msg string, attrs ...any) {
	if t.Logger == nil {
		return
	}
	t.Logger.Log(context.Background(), level, t.Component+": "+msg, append(attrs, t.Attrs...)...)
}

// RunTicker runs t as a task of s named name (see RunTask).
func (s *Stopper) RunTicker(ctx context.Context, name string, t Ticker, tick TickFunc) error {
	return s.RunTask(ctx, name, func(ctx context.Context) { t.Run(ctx, tick) })
}
