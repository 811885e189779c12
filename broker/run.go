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
// also how the other replicas know this one lives; a round longer than
// half a tick is beaten for by a second loop (heartbeat.go).
func Run(ctx context.Context, b *Broker) {
	ctx, cancel := context.WithCancel(ctx)
	beating := make(chan struct{})
	go func() { defer close(beating); b.heartbeats(ctx) }()
	defer func() { cancel(); <-beating }()
	loop := stop.Ticker{Component: "broker", Period: b.cfg.Tick, Now: b.cfg.Now, Metrics: b.cfg.Metrics, Logger: b.cfg.Logger,
		Attrs: []any{"replica", b.cfg.Replica}}
	loop.Run(ctx, b.Tick)
}
