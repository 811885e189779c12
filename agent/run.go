package agent

import (
	"context"
	"time"

	"github.com/mrmarket/mrmarket/internal/stop"
)

// Run ticks a every period until ctx ends, in the daemons' one loop
// (stop.Ticker: the cadence never changes and the next tick retries; a
// failed tick is counted as an "agent"/"tick" error and logged on
// Config.Logger with the host, the log lines backing off; Tick has already
// counted each failed phase by its kind). The wall ticker only paces the
// rounds; each tick runs at a.Now(), the agent's own clock.
func Run(ctx context.Context, a *Agent, period time.Duration) {
	loop := stop.Ticker{Component: "agent", Period: period, Now: a.Now, Metrics: a.cfg.Metrics, Logger: a.cfg.Logger, Attrs: []any{"host", a.cfg.Host}}
	loop.Run(ctx, func(ctx context.Context, now time.Time) error {
		_, err := a.Tick(ctx, now)
		return err
	})
}
