package broker

import (
	"context"

	"github.com/mrmarket/mrmarket/internal/stop"
)

// Run ticks b every Config.Tick until ctx ends, at b's clock (Config.Now),
// in the daemons' one loop (stop.Ticker): a round ends plans, settles them
// and takes over a silent replica's, each from the plans as they are, so a
// failed tick is counted as a "broker"/"tick" error, logged on
// Config.Logger (backing off) and redone by the next. Ticking on time is
// also how the other replicas know this one lives.
func Run(ctx context.Context, b *Broker) {
	loop := stop.Ticker{Component: "broker", Period: b.cfg.Tick, Now: b.cfg.Now, Metrics: b.cfg.Metrics, Logger: b.cfg.Logger,
		Attrs: []any{"replica", b.cfg.Replica}}
	loop.Run(ctx, b.Tick)
}
