package market_test

import (
	"context"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestPlansAddUpAndShowTheBanksFigures: two plans of one user on one VM
// both run — the VM's rate is their sum — and both spend their budgets
// into their own holds; every answer about plans carries the bank's
// figures (spent + released + held = budget, to the micro-credit), and
// --less gives money back at once.
func TestPlansAddUpAndShowTheBanksFigures(t *testing.T) {
	ctx := context.Background()
	m, clock, bc, brc := testMarket(t)
	if _, err := bc.Grant(ctx, &wire.GrantRequest{ID: "g", User: "alice", Amount: credits(t, "100")}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct{ id, budget string }{{"p1", "6"}, {"p2", "3"}} {
		if _, err := brc.Spend(ctx, &wire.SpendRequest{ID: p.id, User: "alice", Budget: credits(t, p.budget),
			Duration: wire.Duration(10 * time.Minute), VMs: []string{"a1"}, Strategy: wire.StrategyFair}); err != nil {
			t.Fatalf("spend %s: %v", p.id, err)
		}
	}
	for _, v := range m.Agents[0].State().VMs {
		if v.VM == "a1" && (len(v.Bids) != 2 || v.Rate < 0.99*float64(credits(t, "9"))/600) {
			t.Fatalf("a1 holds %+v: want both plans' bids adding up", v)
		}
	}
	figures := func() map[string]wire.Plan {
		t.Helper()
		rep, err := brc.Plans(ctx, &wire.PlansRequest{User: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]wire.Plan{}
		for _, p := range rep.Plans {
			if p.Figures != broker.FiguresBank || p.Spent+p.Released+p.Held != p.Budget {
				t.Fatalf("plan %s: budget %s = spent %s + released %s + held %s? (figures %q)", p.ID, p.Budget, p.Spent, p.Released, p.Held, p.Figures)
			}
			out[p.ID] = p
		}
		return out
	}
	start := *clock
	tick := func(until time.Duration) {
		for clock.Sub(start) < until {
			*clock = clock.Add(5 * time.Second)
			if err := m.Tick(ctx, *clock); err != nil {
				t.Fatal(err)
			}
		}
	}
	tick(2 * time.Minute)
	if p := figures(); p["p1"].Spent == 0 || p["p2"].Spent == 0 {
		t.Fatalf("both plans charge: %+v", p)
	}
	before, err := bc.Balance(ctx, &wire.BalanceRequest{User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := brc.Adjust(ctx, &wire.AdjustRequest{Plan: "p1", User: "alice", ID: "less-1", Less: credits(t, "1")}); err != nil {
		t.Fatal(err)
	}
	after, err := bc.Balance(ctx, &wire.BalanceRequest{User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if got := after.Balance - before.Balance; got != credits(t, "1") {
		t.Fatalf("--less 1 gave back %s at once, want 1", got)
	}
	if p := figures()["p1"]; p.Released != credits(t, "1") {
		t.Fatalf("after --less 1: %+v", p)
	}
	tick(12 * time.Minute)
	end := figures()
	if p := end["p2"]; p.Status != wire.PlanDone || p.Spent != credits(t, "3") || p.Held != 0 {
		t.Errorf("p2 on the shared VM: %+v, want its whole 3 spent", p)
	}
	if p := end["p1"]; p.Status != wire.PlanDone || p.Spent < credits(t, "4.99") || p.Spent+p.Released != credits(t, "6") || p.Held != 0 {
		t.Errorf("p1 (6, less 1): %+v, want about 5 spent and the rest released", p)
	}
	checkLedger(t, bc)
}
