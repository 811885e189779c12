package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/mrmarket/mrmarket/internal/stop"
)

// A replica's heartbeat says it is alive, not that its round is quick.
// Tick beats as its round starts; while a round runs longer than half a
// tick (many plans, an agent or the bank slow to answer), Run's heartbeat
// loop beats for it, so the other replicas, which take over the plans of
// one whose heartbeat is two ticks old, do not take a busy replica's plans
// — and it takes them back at its next round, the two trading every plan
// (each trade a compare-and-set write of it) while spends of those plans
// lose their races. A round that has run for roundStall is taken as stuck:
// the loop stops beating for it, so a survivor takes its plans over.

// roundStall is how long a round may run before its replica stops
// beating: far beyond a round over thousands of plans (docs/PERF.md), so
// only a stuck one.
const roundStall = time.Minute

// beat writes this replica's heartbeat at now.
func (b *Broker) beat(ctx context.Context, now time.Time) error {
	if err := b.store.heartbeat(ctx, b.cfg.Replica, now); err != nil {
		return err
	}
	b.lastBeat.Store(now.UnixNano())
	return nil
}

// beatDuringRound beats at now if a round runs and the last beat is half a
// tick old; it fails, unbeaten, when the round has run for roundStall.
func (b *Broker) beatDuringRound(ctx context.Context, now time.Time) error {
	since := b.roundSince.Load()
	if since == 0 || now.Sub(time.Unix(0, b.lastBeat.Load())) < b.cfg.Tick/2 {
		return nil
	}
	if ran := now.Sub(time.Unix(0, since)); ran >= roundStall {
		return fmt.Errorf("heartbeat withheld: the round has run for %s, so another replica takes this one's plans over", ran.Round(time.Second))
	}
	return b.beat(ctx, now)
}

// heartbeats is the loop of beatDuringRound: every quarter tick, so a
// round's heartbeat is at most about half a tick late.
func (b *Broker) heartbeats(ctx context.Context) {
	loop := stop.Ticker{Component: "broker", Period: b.cfg.Tick / 4, Now: b.cfg.Now, Metrics: b.cfg.Metrics, Logger: b.cfg.Logger,
		Attrs: []any{"replica", b.cfg.Replica, "loop", "heartbeat"}}
	loop.Run(ctx, b.beatDuringRound)
}
