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
	down     bool // holds fail as unavailable
}

func (k *recBank) Hold(_ context.Context, req *wire.HoldRequest) (wire.HoldReply, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.down {
		return wire.HoldReply{}, wire.Errorf(wire.ErrUnavailable, "bank down")
	}
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

// TestHalfStartedSpend: a spend whose record was written but that never got
// further (its replica restarted, or the bank or an agent did not answer
// in time) is listed with the money it holds, cancellable, carried on to
// running by a retry with its id or, left alone, by its replica's round —
// and failed with its hold released only once it has been starting for
// startingTimeout, never stuck in "starting".
func TestHalfStartedSpend(t *testing.T) {
	ctx := context.Background()
	clock := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	for _, then := range []string{"cancel", "retry", "round", "outage"} {
		t.Run(then, func(t *testing.T) {
			bk := &recBank{held: map[string]money.Micro{}, released: map[string]money.Micro{}}
			b, err := New(Config{Agents: noAgents{}, Bank: bk, Now: func() time.Time { return clock }, Replica: "r1", Tick: time.Second})
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
			status := func() string { v, _ := b.store.get("p1"); return v.rec.Plan.Status }
			switch then {
			case "cancel":
				p, err := b.Cancel(ctx, &wire.CancelRequest{Plan: "p1", User: "alice"})
				if err != nil || p.Status != wire.PlanCancelled || p.Released != 500 {
					t.Fatalf("cancel of a starting plan: %+v %v", p, err)
				}
			case "retry":
				if rep, err := b.Spend(ctx, req); err != nil || rep.Plan.ID != "p1" || rep.Plan.Status != wire.PlanRunning {
					t.Fatalf("retried spend: %+v %v", rep.Plan, err)
				}
				if len(bk.held) != 1 || bk.held[rec.Plan.Hold] != 500 {
					t.Fatalf("held after the retry: %v", bk.held)
				}
			case "round":
				if err := b.Tick(ctx, clock.Add(time.Second)); err != nil {
					t.Fatal(err)
				}
				if st := status(); st != planStarting {
					t.Fatalf("a plan just starting was touched: %s", st)
				}
				if err := b.Tick(ctx, clock.Add(3*time.Second)); err != nil {
					t.Fatal(err)
				}
				if st := status(); st != wire.PlanRunning {
					t.Fatalf("a plan its spend left starting, after two ticks: %s", st)
				}
			case "outage":
				bk.down = true
				b.Tick(ctx, clock.Add(3*time.Second))
				if st := status(); st != planStarting {
					t.Fatalf("a plan whose bank is down: %s", st)
				}
				if _, err := b.Spend(ctx, req); !errors.Is(err, wire.ErrUnavailable) {
					t.Fatalf("retried spend while the bank is down: %v", err)
				}
				if st := status(); st != planStarting {
					t.Fatalf("a plan whose bank is down, retried: %s", st)
				}
				bk.down = false
				if err := b.Tick(ctx, clock.Add(startingTimeout+time.Second)); err != nil {
					t.Fatal(err)
				}
				if st := status(); st != wire.PlanFailed || bk.released[rec.Plan.Hold] != 500 {
					t.Fatalf("a stuck starting plan: %s, released %v", st, bk.released)
				}
			}
		})
	}
}
