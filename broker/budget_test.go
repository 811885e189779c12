package broker_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestNoStrategyOverspends runs a plan of every strategy through its whole
// duration on four hosts whose VMs go idle and busy at random, whose prices
// move (a competitor's plan), and whose budget is raised and lowered while
// it runs: no round ever commits more than the budget left, the bank never
// charges more than the budget, and the ledger invariant holds.
func TestNoStrategyOverspends(t *testing.T) {
	for _, strategy := range wire.Strategies {
		t.Run(strategy, func(t *testing.T) { noOverspend(t, strategy) })
	}
}

func noOverspend(t *testing.T, strategy string) {
	ctx := context.Background()
	clock := t0
	now := func() time.Time { return clock }
	rng := rand.New(rand.NewPCG(uint64(len(strategy)), 3))
	_, nc := natstest.Start(t)
	bk, err := bank.Open(filepath.Join(t.TempDir(), "bank.db"), bank.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	defer bk.Close()
	for _, u := range []string{"alice", "carol"} {
		if _, err := bk.Grant(ctx, &wire.GrantRequest{ID: "g-" + u, User: u, Amount: 100_000_000}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := broker.New(broker.Config{NC: nc, Bank: bk, Now: now, Tick: 10 * time.Second, Settle: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var agents []*agent.Agent
	var sims []*agent.SimEnforcer
	var mine []string
	for h := 1; h <= 4; h++ {
		host := fmt.Sprintf("host-%d", h)
		vms := []agent.VM{{ID: fmt.Sprintf("a%d", h), Owner: "alice"}, {ID: fmt.Sprintf("a%db", h), Owner: "alice"}, {ID: fmt.Sprintf("c%d", h), Owner: "carol"}}
		mine = append(mine, vms[0].ID, vms[1].ID)
		sim := agent.NewSimEnforcer(now, 1, vms...)
		a, err := agent.New(agent.Config{Host: host, Enforcer: sim, Capturer: bk, Now: now, IdleTicks: 1})
		if err != nil {
			t.Fatal(err)
		}
		stop, err := agent.Serve(nc, a)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		agents, sims = append(agents, a), append(sims, sim)
		b.Observe(a.State())
	}
	req := &wire.SpendRequest{ID: "p", User: "alice", Budget: 10_000_000, Duration: wire.Duration(30 * time.Minute), Strategy: strategy, Boost: 0.8}
	switch strategy {
	case wire.StrategyWorkflow, wire.StrategyStage, wire.StrategyStageCarry, wire.StrategyStageBottleneck:
		req.Workflows = []wire.WorkflowSpec{
			{Name: "w1", Weight: 2, Stages: []wire.StageSpec{{Name: "s1", Weight: 5, VMs: mine[0:2]}, {Name: "s2", Weight: 1, VMs: mine[2:4]}}},
			{Name: "w2", Weight: 1, Stages: []wire.StageSpec{{Name: "s1", Weight: 1, VMs: mine[4:6]}, {Name: "s2", Weight: 3, VMs: mine[6:8]}}},
		}
	default:
		req.VMs = mine
	}
	if _, err := b.Spend(ctx, req); err != nil {
		t.Fatal(err)
	}
	// A competitor on every host, so prices differ and move.
	if _, err := b.Spend(ctx, &wire.SpendRequest{ID: "q", User: "carol", Budget: 5_000_000, Duration: wire.Duration(20 * time.Minute),
		VMs: []string{"c1", "c2", "c3"}, Strategy: wire.StrategyFair}); err != nil {
		t.Fatal(err)
	}
	budget := money.Micro(10_000_000)
	for i := 0; clock.Before(t0.Add(31 * time.Minute)); i++ {
		clock = clock.Add(10 * time.Second)
		for _, s := range sims {
			for _, vm := range mine {
				if rng.IntN(8) == 0 {
					s.SetDemand(vm, float64(rng.IntN(2)))
				}
			}
		}
		for _, a := range agents {
			st, err := a.Tick(ctx, clock)
			if err != nil {
				t.Fatal(err)
			}
			b.Observe(st)
		}
		if err := b.Tick(ctx, clock); err != nil {
			t.Fatal(err)
		}
		switch i {
		case 40:
			if _, err := b.Adjust(ctx, &wire.AdjustRequest{Plan: "p", User: "alice", ID: "more", More: 2_000_000}); err != nil {
				t.Fatal(err)
			}
			budget += 2_000_000
		case 80:
			if _, err := b.Adjust(ctx, &wire.AdjustRequest{Plan: "p", User: "alice", ID: "less", Less: 1_000_000}); err != nil {
				t.Fatal(err)
			}
			budget -= 1_000_000
		}
		// What the plan has committed: spent, plus every bid in force in full.
		var committed money.Micro
		p := b.Plans(&wire.PlansRequest{User: "alice"}).Plans[0]
		committed = p.Spent
		for _, v := range p.VMs {
			committed += v.Budget
		}
		if p.Status == wire.PlanRunning && committed > budget {
			t.Fatalf("round %d: the plan committed %s of a %s budget", i, committed, budget)
		}
		bal, err := bk.Balance(ctx, &wire.BalanceRequest{User: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		if bal.Spent > budget {
			t.Fatalf("round %d: alice was charged %s of a %s budget", i, bal.Spent, budget)
		}
	}
	p := b.Plans(&wire.PlansRequest{User: "alice"}).Plans[0]
	bal, _ := bk.Balance(ctx, &wire.BalanceRequest{User: "alice"})
	l, err := bk.Ledger(ctx)
	if err != nil || len(l.Violations) > 0 {
		t.Fatalf("ledger: %v %v", l.Violations, err)
	}
	if p.Status != wire.PlanDone || bal.Held != 0 {
		t.Fatalf("at the end: %+v, alice %+v", p, bal)
	}
	t.Logf("%s: charged %s of %s", strategy, bal.Spent, budget)
}
