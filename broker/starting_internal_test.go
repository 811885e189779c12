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

func (noAgents) Bid(_ context.Context, _ string, reqs []*wire.BidRequest) []error {
	return make([]error, len(reqs))
}

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
			status := func() string { v, _ := b.store.get(planRef{"alice", "p1"}); return v.rec.Plan.Status }
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

// eachChange answers a batch of bid changes one change at a time with bid.
func eachChange(ctx context.Context, host string, reqs []*wire.BidRequest, bid func(context.Context, string, *wire.BidRequest) error) []error {
	errs := make([]error, len(reqs))
	for i, req := range reqs {
		errs[i] = bid(ctx, host, req)
	}
	return errs
}

// raceAgents is a book of bids by host and (VM, plan), like an agent's;
// once armed, the first bid set lands only after onSet ran (a cancel that
// overtakes a round's bids on their way).
type raceAgents struct {
	mu    sync.Mutex
	book  map[string]bool // host/vm/plan
	onSet func()
}

func (a *raceAgents) Bid(ctx context.Context, host string, reqs []*wire.BidRequest) []error {
	return eachChange(ctx, host, reqs, a.bid)
}

func (a *raceAgents) bid(_ context.Context, host string, req *wire.BidRequest) error {
	a.mu.Lock()
	hook := a.onSet
	if len(req.Set) > 0 {
		a.onSet = nil
	}
	a.mu.Unlock()
	if hook != nil && len(req.Set) > 0 {
		hook()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, vm := range req.Cancel {
		delete(a.book, host+"/"+vm+"/"+req.Plan)
	}
	for _, bid := range req.Set {
		a.book[host+"/"+bid.VM+"/"+bid.Plan] = true
	}
	return nil
}

// TestCancelOvertakingARoundLeavesNoBid: a round taking a plan over sends
// its bids; the owner's cancel wins the record while they are on their way
// and reaches the agent first. The round's write then loses, and it
// withdraws the bids it set: no bid is left charging a cancelled plan.
func TestCancelOvertakingARoundLeavesNoBid(t *testing.T) {
	ctx := context.Background()
	clock := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	bk := &recBank{held: map[string]money.Micro{}, released: map[string]money.Micro{}}
	agents := &raceAgents{book: map[string]bool{}}
	mem := NewMemoryPlans()
	newReplica := func(name string) *Broker {
		b, err := New(Config{Agents: agents, Bank: bk, Now: func() time.Time { return clock }, Replica: name, Tick: time.Second, Memory: mem})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	dead, survivor := newReplica("r0"), newReplica("r1")
	req := &wire.SpendRequest{ID: "p1", User: "alice", Budget: 500, Duration: wire.Duration(time.Hour), VMs: []string{"a1"}, Strategy: wire.StrategyFair}
	rec := dead.newPlan("p1", spendFingerprint(req), req, []wire.PlanVM{{VM: "a1", Host: "h1"}}, clock, nil)
	rec.Plan.Status = wire.PlanRunning
	if _, err := dead.store.create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if _, err := bk.Hold(ctx, &wire.HoldRequest{ID: rec.Plan.Hold, User: "alice", Amount: 500}); err != nil {
		t.Fatal(err)
	}
	var cancelErr error
	agents.onSet = func() {
		_, cancelErr = survivor.Cancel(ctx, &wire.CancelRequest{Versioned: wire.Versioned{V: wire.Version}, Plan: "p1", User: "alice"})
	}
	clock = clock.Add(5 * time.Second) // r0 is silent
	survivor.Observe(wire.HostState{Host: "h1", Time: clock, VMs: []wire.VMState{{VM: "a1", Owner: "alice", Util: 1}}})
	if err := survivor.Tick(ctx, clock); err != nil {
		t.Fatal(err)
	}
	if cancelErr != nil {
		t.Fatal(cancelErr)
	}
	if agents.onSet != nil {
		t.Fatal("the round sent no bid: nothing raced")
	}
	if v, _ := survivor.store.get(planRef{"alice", "p1"}); v.rec.Plan.Status != wire.PlanCancelled {
		t.Fatalf("plan %s, want cancelled", v.rec.Plan.Status)
	}
	if len(agents.book) != 0 {
		t.Fatalf("bids left at the agents for a cancelled plan: %v", agents.book)
	}
}
