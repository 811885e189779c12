package broker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// recBank is a bank that records holds and releases.
type recBank struct {
	mu       sync.Mutex
	held     map[string]money.Micro
	released map[string]money.Micro
}

func (k *recBank) Hold(_ context.Context, req *wire.HoldRequest) (wire.HoldReply, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.held[req.ID] = req.Amount
	return wire.HoldReply{Hold: wire.HoldInfo{ID: req.ID, User: req.User, Amount: req.Amount}}, nil
}

func (k *recBank) Extend(context.Context, *wire.ExtendRequest) (wire.HoldReply, error) {
	return wire.HoldReply{}, errors.New("no")
}

func (k *recBank) Release(_ context.Context, req *wire.ReleaseRequest) (wire.ReleaseReply, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	amt, ok := k.held[req.Hold]
	if !ok {
		return wire.ReleaseReply{}, wire.ErrNotFound
	}
	delete(k.held, req.Hold)
	k.released[req.Hold] = amt
	return wire.ReleaseReply{Hold: wire.HoldInfo{ID: req.Hold, Released: amt}, Released: amt}, nil
}

type noAgents struct{}

func (noAgents) Bid(context.Context, string, *wire.BidRequest) error { return nil }

// TestHalfStartedSpend: a spend whose hold was placed but that never got
// further (its bids failed and its rollback could not write, or its replica
// restarted) is listed with the money it holds, returned to a retry with
// its id, cancellable, and — left alone — failed by its own replica's round
// with its hold released, never stuck in "starting".
func TestHalfStartedSpend(t *testing.T) {
	ctx := context.Background()
	clock := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	for _, cancel := range []bool{true, false} {
		bk := &recBank{held: map[string]money.Micro{}, released: map[string]money.Micro{}}
		b, err := New(Config{Agents: noAgents{}, Bank: bk, Now: func() time.Time { return clock }, Replica: "r1"})
		if err != nil {
			t.Fatal(err)
		}
		req := &wire.SpendRequest{ID: "p1", User: "alice", Budget: 500, Duration: wire.Duration(time.Hour), VMs: []string{"a1"}, Strategy: wire.StrategyFair}
		rec := b.newPlan("p1", spendFingerprint(req), req, []wire.PlanVM{{VM: "a1", Host: "h1"}}, clock, nil)
		if _, err := b.store.create(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if _, err := bk.Hold(ctx, &wire.HoldRequest{ID: rec.Plan.Hold, User: "alice", Amount: 500}); err != nil {
			t.Fatal(err)
		}
		if ps := b.Plans(&wire.PlansRequest{User: "alice"}).Plans; len(ps) != 1 || ps[0].Status != planStarting {
			t.Fatalf("plans of a half-started spend: %+v", ps)
		}
		if rep, err := b.Spend(ctx, req); err != nil || rep.Plan.ID != "p1" || rep.Plan.Status != planStarting {
			t.Fatalf("retried spend: %+v %v", rep.Plan, err)
		}
		if cancel {
			p, err := b.Cancel(ctx, &wire.CancelRequest{Plan: "p1", User: "alice"})
			if err != nil || p.Status != wire.PlanCancelled || p.Released != 500 {
				t.Fatalf("cancel of a starting plan: %+v %v", p, err)
			}
			continue
		}
		if err := b.Tick(ctx, clock.Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		if v, _ := b.store.get("p1"); v.rec.Plan.Status != planStarting {
			t.Fatalf("a plan just starting was touched: %s", v.rec.Plan.Status)
		}
		if err := b.Tick(ctx, clock.Add(startingTimeout+time.Second)); err != nil {
			t.Fatal(err)
		}
		if v, _ := b.store.get("p1"); v.rec.Plan.Status != wire.PlanFailed || bk.released[rec.Plan.Hold] != 500 {
			t.Fatalf("a stuck starting plan: %s, released %v", v.rec.Plan.Status, bk.released)
		}
	}
}
