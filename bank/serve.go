package bank

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// Serve answers the bank's subjects on nc in the bank's queue group, so
// replicas share the load. stop unsubscribes.
func Serve(nc *nats.Conn, b *Bank) (stop func(), err error) {
	var subs []*nats.Subscription
	stop = func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}
	observe := func(op string) func(string) {
		return func(code string) { b.metrics.Request("bank", op, code) }
	}
	add := func(s *nats.Subscription, err error) error {
		if err == nil {
			subs = append(subs, s)
		}
		return err
	}
	q := wire.QueueBank
	for _, err := range []error{
		add(wire.ServeObserved(nc, wire.BankGrant, q, observe("grant"), func(ctx context.Context, r *wire.GrantRequest) (any, error) { return b.Grant(ctx, r) })),
		add(wire.ServeObserved(nc, wire.BankHold, q, observe("hold"), func(ctx context.Context, r *wire.HoldRequest) (any, error) { return b.Hold(ctx, r) })),
		add(wire.ServeObserved(nc, wire.BankCapture, q, observe("capture"), func(ctx context.Context, r *wire.CaptureBatch) (any, error) { return b.Capture(ctx, r) })),
		add(wire.ServeObserved(nc, wire.BankRelease, q, observe("release"), func(ctx context.Context, r *wire.ReleaseRequest) (any, error) { return b.Release(ctx, r) })),
		add(wire.ServeObserved(nc, wire.BankBalance, q, observe("balance"), func(ctx context.Context, r *wire.BalanceRequest) (any, error) { return b.Balance(ctx, r) })),
		add(wire.ServeObserved(nc, wire.BankLedger, q, observe("ledger"), func(ctx context.Context, _ *wire.LedgerRequest) (any, error) { return b.Ledger(ctx) })),
	} {
		if err != nil {
			stop()
			return nil, err
		}
	}
	if err := nc.Flush(); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// Client is the bank over NATS. Its methods set each request's version.
type Client struct{ NC *nats.Conn }

// Grant mints money into a user's account.
func (c Client) Grant(ctx context.Context, req *wire.GrantRequest) (rep wire.GrantReply, err error) {
	req.V = wire.Version
	return rep, wire.Call(ctx, c.NC, wire.BankGrant, req, &rep)
}

// Hold moves a user's money into escrow.
func (c Client) Hold(ctx context.Context, req *wire.HoldRequest) (rep wire.HoldReply, err error) {
	req.V = wire.Version
	return rep, wire.Call(ctx, c.NC, wire.BankHold, req, &rep)
}

// Capture sends one tick's capture batch.
func (c Client) Capture(ctx context.Context, req *wire.CaptureBatch) (rep wire.CaptureReply, err error) {
	req.V = wire.Version
	return rep, wire.Call(ctx, c.NC, wire.BankCapture, req, &rep)
}

// Release closes a hold and returns its remainder.
func (c Client) Release(ctx context.Context, req *wire.ReleaseRequest) (rep wire.ReleaseReply, err error) {
	req.V = wire.Version
	return rep, wire.Call(ctx, c.NC, wire.BankRelease, req, &rep)
}

// Balance reports a user's account.
func (c Client) Balance(ctx context.Context, req *wire.BalanceRequest) (rep wire.BalanceReply, err error) {
	req.V = wire.Version
	return rep, wire.Call(ctx, c.NC, wire.BankBalance, req, &rep)
}

// Ledger returns the ledger and its invariant check.
func (c Client) Ledger(ctx context.Context) (rep wire.LedgerReply, err error) {
	return rep, wire.Call(ctx, c.NC, wire.BankLedger, &wire.LedgerRequest{Versioned: wire.Versioned{V: wire.Version}}, &rep)
}
