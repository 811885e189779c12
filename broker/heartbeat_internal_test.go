package broker

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// slowAgents answers each bid after delay, unsuccessfully, so every round
// of a plan sends its bids again; with stuck set, it answers none until
// the round's context ends.
type slowAgents struct {
	delay time.Duration
	mu    sync.Mutex
	stuck bool
}

func (a *slowAgents) Bid(ctx context.Context, host string, reqs []*wire.BidRequest) []error {
	return eachChange(ctx, host, reqs, a.bid)
}

func (a *slowAgents) bid(ctx context.Context, _ string, _ *wire.BidRequest) error {
	a.mu.Lock()
	stuck := a.stuck
	a.mu.Unlock()
	if stuck {
		<-ctx.Done()
		return ctx.Err()
	}
	select {
	case <-time.After(a.delay):
		return wire.Errorf(wire.ErrUnavailable, "agent slow")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestSlowRoundKeepsItsPlans: a replica whose rounds take five ticks (its
// agent answers slowly) is alive, and the other replica leaves its plan
// alone; only once its round has run for roundStall does the other take
// the plan over. Mutation: without the heartbeat loop of Run (a heartbeat
// only as each round starts), the other replica takes the plan over within
// the first slow round, and the two trade it at every round after.
func TestSlowRoundKeepsItsPlans(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tick = 200 * time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		bk := &recBank{held: map[string]money.Micro{}, released: map[string]money.Micro{}}
		mem := NewMemoryPlans()
		slow := &slowAgents{delay: 5 * tick}
		newReplica := func(name string, agents Agents) *Broker {
			b, err := New(Config{Agents: agents, Bank: bk, Replica: name, Tick: tick, Memory: mem})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		busy, other := newReplica("r1", slow), newReplica("r2", noAgents{})
		req := &wire.SpendRequest{ID: "p1", User: "alice", Budget: 500, Duration: wire.Duration(time.Hour), VMs: []string{"a1"}, Strategy: wire.StrategyFair}
		rec := busy.newPlan("p1", spendFingerprint(req), req, []wire.PlanVM{{VM: "a1", Host: "h1"}}, time.Now(), nil)
		rec.Plan.Status = wire.PlanRunning
		if _, err := busy.store.create(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if _, err := bk.Hold(ctx, &wire.HoldRequest{ID: rec.Plan.Hold, User: "alice", Amount: 500}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		defer func() { cancel(); wg.Wait() }()
		for _, b := range []*Broker{busy, other} {
			if err := b.beat(ctx, time.Now()); err != nil { // heard before the plan is seen
				t.Fatal(err)
			}
			b.Observe(wire.HostState{Host: "h1", Time: time.Now(), VMs: []wire.VMState{{VM: "a1", Owner: "alice", Util: 1}}})
			wg.Go(func() { Run(ctx, b) })
		}
		owner := func() string { v, _ := mem.s.get(planRef{"alice", "p1"}); return v.rec.Plan.Owner }
		for range 40 { // 8 s: eight of its slow rounds
			time.Sleep(tick)
			if o := owner(); o != "r1" {
				t.Fatalf("after %s the plan of a replica whose rounds are slow is %s's", time.Since(rec.Plan.Start), o)
			}
		}
		slow.mu.Lock()
		slow.stuck = true
		slow.mu.Unlock()
		stuckAt := time.Now()
		for owner() == "r1" {
			if time.Since(stuckAt) > roundStall+2*busy.cfg.Tick+5*tick {
				t.Fatalf("the plan of a replica whose round is stuck was not taken over within %s", time.Since(stuckAt))
			}
			time.Sleep(tick)
		}
		if took := time.Since(stuckAt); took < roundStall {
			t.Fatalf("taken over %s after the round stuck, before roundStall", took)
		}
	})
}
