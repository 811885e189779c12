package agent

import (
	"context"
	"time"
)

// Run ticks a every period until ctx ends. The wall ticker only paces the
// rounds; each tick runs at a.Now(), the agent's own clock. A failed tick
// is never dropped: it is logged on Config.Logger with the host and counted
// as an "agent"/"tick" error (Tick has already counted each failed phase by
// its kind), and the next tick retries.
func Run(ctx context.Context, a *Agent, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.runTick(ctx)
		}
	}
}

// runTick is one of Run's rounds.
func (a *Agent) runTick(ctx context.Context) {
	if _, err := a.Tick(ctx, a.Now()); err != nil {
		a.cfg.Metrics.Error("agent", "tick")
		a.cfg.Logger.Error("agent: tick failed; the next tick retries", "host", a.cfg.Host, "err", err)
	}
}
