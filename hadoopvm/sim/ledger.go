package sim

import (
	"context"
	"sync"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Ledger takes the agents' captures in the simulator: it keeps each
// (hold, host, vm)'s cumulative total as the bank does (a leg moves only
// what its cumulative adds) and what each hold has paid, without the bank's
// store, so that simulations of thousands of hosts run fast. The agents'
// charging is the real one; only the ledger's persistence is left out.
type Ledger struct {
	mu     sync.Mutex
	totals map[[3]string]money.Micro
	paid   map[string]money.Micro // by hold
}

// NewLedger makes an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{totals: map[[3]string]money.Micro{}, paid: map[string]money.Micro{}}
}

// Capture applies a batch (agent.Capturer).
func (l *Ledger) Capture(_ context.Context, b *wire.CaptureBatch) (wire.CaptureReply, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rep := wire.CaptureReply{Legs: make([]wire.LegResult, len(b.Legs))}
	for i, leg := range b.Legs {
		k := [3]string{leg.Hold, b.Host, leg.VM}
		d := max(leg.Cumulative-l.totals[k], 0)
		l.totals[k] += d
		l.paid[leg.Hold] += d
		rep.Applied += d
		rep.Legs[i] = wire.LegResult{ID: leg.ID, Hold: leg.Hold, VM: leg.VM, Applied: d, Captured: l.totals[k]}
	}
	return rep, nil
}

// Paid is what a hold (a plan) has paid so far.
func (l *Ledger) Paid(hold string) money.Micro {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.paid[hold]
}
