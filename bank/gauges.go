package bank

import (
	"context"

	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Gauges are the bank's figures a scrape reads (obs.Metrics.SetBank): the
// escrow account, the open holds and what they hold, and how many of the
// ledger's invariants are violated — Ledger's check, so a scrape sees
// what `mrmarket ledger` would print.
func (b *Bank) Gauges(ctx context.Context) (obs.BankFigures, error) {
	led, err := b.Ledger(ctx)
	if err != nil {
		return obs.BankFigures{}, err
	}
	f := obs.BankFigures{Held: led.OpenHolds.Credits(), Violations: len(led.Violations)}
	for _, a := range led.Accounts {
		if a.Kind == wire.AccountEscrow {
			f.Escrow += a.Balance.Credits()
		}
	}
	err = b.st.run(ctx, func(t tx) error {
		return t.queryRow(ctx, `SELECT count(*) FROM holds WHERE status = 'open'`).Scan(&f.OpenHolds)
	})
	return f, err
}
