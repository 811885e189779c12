package sim

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Ledger takes the agents' captures in the simulator: it keeps each
// (hold, host, vm)'s cumulative total and what each hold has paid, and
// charges by the bank's own capture rule (bank.CaptureLeg), without the
// bank's store, so that simulations of thousands of hosts run fast. The
// agents' charging is the real one; only the ledger's persistence is left
// out.
type Ledger struct {
	mu     sync.Mutex
	totals map[[3]string]money.Micro
	paid   map[string]money.Micro // by hold
	holds  map[string]money.Micro // hold amounts, for a simulated broker
	// balances of the users granted money (Grant); the others are not
	// limited. A hold takes from the balance, a release gives the rest back.
	balances map[string]money.Micro
	holder   map[string]string // hold → user, for users with a balance
}

// ErrInsufficient is a hold above a granted user's balance.
var ErrInsufficient = fmt.Errorf("%w: the hold is above the balance", wire.ErrInsufficient)

// Grant adds to user's balance; from then on the user's holds are limited
// by it, as in the bank.
func (l *Ledger) Grant(user string, m money.Micro) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.balances[user] += m
}

// Balance is a granted user's spendable balance (the broker's quotes ask).
func (l *Ledger) Balance(_ context.Context, r *wire.BalanceRequest) (wire.BalanceReply, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	bal, ok := l.balances[r.User]
	if !ok {
		return wire.BalanceReply{}, fmt.Errorf("%w: %s has no account in the simulation", wire.ErrNotFound, r.User)
	}
	rep := wire.BalanceReply{User: r.User, Balance: bal}
	for h, u := range l.holder {
		if u == r.User {
			rep.Held += max(l.holds[h]-l.paid[h], 0)
		}
	}
	return rep, nil
}

// Holds is how many holds were placed: a test's check that a refused
// request held nothing.
func (l *Ledger) Holds() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.holds)
}

// NewLedger makes an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{totals: map[[3]string]money.Micro{}, paid: map[string]money.Micro{}, holds: map[string]money.Micro{},
		balances: map[string]money.Micro{}, holder: map[string]string{}}
}

// Hold records a plan's hold (a broker's Bank in the simulator; users'
// balances are not simulated).
func (l *Ledger) Hold(_ context.Context, r *wire.HoldRequest) (wire.HoldReply, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.holds[r.ID]; ok {
		return wire.HoldReply{Hold: wire.HoldInfo{ID: r.ID, User: r.User, Amount: l.holds[r.ID], Status: wire.HoldOpen}}, nil
	}
	if bal, ok := l.balances[r.User]; ok {
		if r.Amount > bal {
			return wire.HoldReply{}, fmt.Errorf("%w: %s above %s", ErrInsufficient, r.Amount, bal)
		}
		l.balances[r.User] -= r.Amount
		l.holder[r.ID] = r.User
	}
	l.holds[r.ID] = r.Amount
	return wire.HoldReply{Hold: wire.HoldInfo{ID: r.ID, User: r.User, Amount: r.Amount, Status: wire.HoldOpen}}, nil
}

// Extend adds to a hold.
func (l *Ledger) Extend(_ context.Context, r *wire.ExtendRequest) (wire.HoldReply, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if u, ok := l.holder[r.Hold]; ok {
		if r.Amount > l.balances[u] {
			return wire.HoldReply{}, fmt.Errorf("%w: %s above %s", ErrInsufficient, r.Amount, l.balances[u])
		}
		l.balances[u] -= r.Amount
	}
	l.holds[r.Hold] += r.Amount
	return wire.HoldReply{Hold: wire.HoldInfo{ID: r.Hold, User: r.User, Amount: l.holds[r.Hold], Status: wire.HoldOpen}}, nil
}

// Release reports what a hold did not pay.
func (l *Ledger) Release(_ context.Context, r *wire.ReleaseRequest) (wire.ReleaseReply, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rest := max(l.holds[r.Hold]-l.paid[r.Hold], 0)
	if r.Amount > 0 { // a part (spend --less): the hold stays open
		part := min(r.Amount, rest)
		if u, ok := l.holder[r.Hold]; ok {
			l.balances[u] += part
			l.holds[r.Hold] -= part
		}
		return wire.ReleaseReply{Released: part, Hold: wire.HoldInfo{ID: r.Hold, User: r.User, Amount: l.holds[r.Hold],
			Captured: l.paid[r.Hold], Status: wire.HoldOpen}}, nil
	}
	if u, ok := l.holder[r.Hold]; ok {
		l.balances[u] += rest
		delete(l.holder, r.Hold)
	}
	return wire.ReleaseReply{Released: rest, Hold: wire.HoldInfo{ID: r.Hold, User: r.User, Amount: l.holds[r.Hold],
		Captured: l.paid[r.Hold], Released: rest, Status: wire.HoldClosed}}, nil
}

// Capture applies a batch (agent.Capturer) through the bank's capture rule
// (bank.CaptureLeg). A hold no broker placed here is not capped.
func (l *Ledger) Capture(_ context.Context, b *wire.CaptureBatch) (wire.CaptureReply, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rep := wire.CaptureReply{Legs: make([]wire.LegResult, len(b.Legs))}
	for i, leg := range b.Legs {
		k := [3]string{leg.Hold, b.Host, leg.VM}
		left := money.Micro(math.MaxInt64)
		if amount, held := l.holds[leg.Hold]; held {
			left = amount - l.paid[leg.Hold]
		}
		c := bank.CaptureLeg(l.totals[k], leg.Cumulative, left, bank.NoBound) // no holds here carry a mandate's terms
		l.totals[k] = c.Total
		l.paid[leg.Hold] += c.Applied
		rep.Applied += c.Applied
		rep.Legs[i] = wire.LegResult{ID: leg.ID, Hold: leg.Hold, VM: leg.VM, Applied: c.Applied, Captured: c.Total, Exhausted: c.Exhausted}
		if c.Refused {
			rep.Legs[i].Error = wire.ToError(fmt.Errorf("%w: hold %q is exhausted (%s paid of %s)", bank.ErrHoldExhausted, leg.Hold, l.paid[leg.Hold], l.holds[leg.Hold]))
		}
	}
	return rep, nil
}

// Paid is what a hold (a plan) has paid so far.
func (l *Ledger) Paid(hold string) money.Micro {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.paid[hold]
}
