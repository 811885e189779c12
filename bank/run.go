package bank

import (
	"context"
	"time"

	"github.com/mrmarket/mrmarket/internal/stop"
)

// Run ticks b every period until ctx ends, at b's clock (Options.Now), in
// the daemons' one loop (stop.Ticker): hold expiry and income are
// level-triggered, so a failed tick is counted as a "bank"/"tick" error,
// logged on Options.Logger (backing off) and redone by the next.
func Run(ctx context.Context, b *Bank, period time.Duration) {
	loop := stop.Ticker{Component: "bank", Period: period, Now: b.now, Metrics: b.metrics, Logger: b.logger}
	loop.Run(ctx, func(ctx context.Context, now time.Time) error {
		_, err := b.Tick(ctx, now)
		return err
	})
}
