package bank

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// Serve answers the bank's subjects on nc in the bank's queue group, so
// replicas share the load. Every mutating request must be signed by a
// registered principal whose role allows it, and each signature is usable
// once (see authorize); reads (balance, statement, ledger, whois) are open
// to any client of the NATS account. stop unsubscribes.
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
		add(wire.ServeSigned(nc, wire.BankGrant, q, observe("grant"), func(ctx context.Context, r *wire.GrantRequest, c wire.Caller) (any, error) {
			if err := b.authorize(ctx, c, "grant", adminOnly); err != nil {
				return nil, err
			}
			return b.Grant(ctx, r)
		})),
		add(wire.ServeSigned(nc, wire.BankIncome, q, observe("income"), func(ctx context.Context, r *wire.IncomeSetRequest, c wire.Caller) (any, error) {
			if err := b.authorize(ctx, c, "set income", adminOnly); err != nil {
				return nil, err
			}
			return b.SetIncome(ctx, r)
		})),
		add(wire.ServeSigned(nc, wire.BankPrincipal, q, observe("principal"), func(ctx context.Context, r *wire.PrincipalRequest, c wire.Caller) (any, error) {
			if err := b.authorize(ctx, c, "register principals", adminOnly); err != nil {
				return nil, err
			}
			return b.AddPrincipal(ctx, r)
		})),
		add(wire.ServeSigned(nc, wire.BankHold, q, observe("hold"), func(ctx context.Context, r *wire.HoldRequest, c wire.Caller) (any, error) {
			if err := b.authorize(ctx, c, "hold money of "+r.User, userOrBroker(r.User)); err != nil {
				return nil, err
			}
			return b.Hold(ctx, r)
		})),
		add(wire.ServeSigned(nc, wire.BankRelease, q, observe("release"), func(ctx context.Context, r *wire.ReleaseRequest, c wire.Caller) (any, error) {
			if err := b.authorize(ctx, c, "release holds of "+r.User, userOrBroker(r.User)); err != nil {
				return nil, err
			}
			return b.Release(ctx, r)
		})),
		add(wire.ServeSigned(nc, wire.BankExtend, q, observe("extend"), func(ctx context.Context, r *wire.ExtendRequest, c wire.Caller) (any, error) {
			if err := b.authorize(ctx, c, "extend holds of "+r.User, userOrBroker(r.User)); err != nil {
				return nil, err
			}
			return b.Extend(ctx, r)
		})),
		add(wire.ServeSigned(nc, wire.BankTransfer, q, observe("transfer"), func(ctx context.Context, r *wire.TransferRequest, c wire.Caller) (any, error) {
			if err := b.authorize(ctx, c, "move money of "+r.From, user(r.From)); err != nil {
				return nil, err
			}
			return b.Transfer(ctx, r)
		})),
		add(wire.ServeSigned(nc, wire.BankCapture, q, observe("capture"), func(ctx context.Context, r *wire.CaptureBatch, c wire.Caller) (any, error) {
			if err := b.authorize(ctx, c, "capture for host "+r.Host, agentOf(r.Host)); err != nil {
				return nil, err
			}
			return b.Capture(ctx, r)
		})),
		add(wire.ServeObserved(nc, wire.BankBalance, q, observe("balance"), func(ctx context.Context, r *wire.BalanceRequest) (any, error) { return b.Balance(ctx, r) })),
		add(wire.ServeObserved(nc, wire.BankStatement, q, observe("statement"), func(ctx context.Context, r *wire.StatementRequest) (any, error) { return b.Statement(ctx, r) })),
		add(wire.ServeObserved(nc, wire.BankLedger, q, observe("ledger"), func(ctx context.Context, _ *wire.LedgerRequest) (any, error) { return b.Ledger(ctx) })),
		add(wire.ServeObserved(nc, wire.BankWhois, q, observe("whois"), func(ctx context.Context, r *wire.WhoisRequest) (any, error) { return b.Whois(ctx, r.Key) })),
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

// A policy says whether a principal may do something.
type policy func(p wire.Principal) bool

func adminOnly(p wire.Principal) bool { return p.Role == wire.RoleAdmin }

// user allows the user named and admins.
func user(name string) policy {
	return func(p wire.Principal) bool {
		return p.Role == wire.RoleAdmin || p.Role == wire.RoleUser && p.Name == name
	}
}

// userOrBroker allows the user named, the broker (which acts on users'
// signed spend requests) and admins.
func userOrBroker(name string) policy {
	return func(p wire.Principal) bool { return p.Role == wire.RoleBroker || user(name)(p) }
}

// agentOf allows only the agent of host: a host's provider account is
// credited by its own agent and nobody else.
func agentOf(host string) policy {
	return func(p wire.Principal) bool { return p.Role == wire.RoleAgent && p.Name == host }
}

// authorize checks that c signed the request, is a registered principal
// allowed by may, and has not used this signature before.
func (b *Bank) authorize(ctx context.Context, c wire.Caller, what string, may policy) error {
	if !c.Signed() {
		return wire.ErrUnsigned
	}
	p, err := b.Whois(ctx, c.Key)
	if err != nil {
		return err
	}
	if !may(p) {
		return fmt.Errorf("%w: %s (%s) may not %s", wire.ErrRole, p.Name, p.Role, what)
	}
	return b.useNonce(ctx, c)
}
