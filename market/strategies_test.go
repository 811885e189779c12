package market_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

// TestBottleneckAgainstFairShare: on four hosts, each with a VM of a
// strategic user (bottleneck elimination, f = 0.9) and one of a fair-share
// user, the strategic user's VMs on two hosts go idle. Its idle VMs drop
// their spending, its busy VMs gain share over the fair user's, both plans
// stay within budget and the ledger invariant holds throughout.
func TestBottleneckAgainstFairShare(t *testing.T) {
	ctx := context.Background()
	clock := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	var hosts []market.HostSpec
	for h := 1; h <= 4; h++ {
		hosts = append(hosts, market.HostSpec{ID: fmt.Sprintf("host-%d", h), CPUs: 1, VMs: []agent.VM{
			{ID: fmt.Sprintf("s%d", h), Owner: "strat"}, {ID: fmt.Sprintf("f%d", h), Owner: "fair"}}})
	}
	m, err := market.Start(ctx, market.Config{Dir: t.TempDir(), NATSPort: -1, Now: func() time.Time { return clock }, TickPeriod: 10 * time.Second, Hosts: hosts})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	nc, err := m.NC("strategies-test")
	if err != nil {
		t.Fatal(err)
	}
	bc, brc := bank.Client{NC: nc, Keys: m.Keys()}, broker.Client{NC: nc, Keys: m.Keys()}
	for _, u := range []string{"strat", "fair"} {
		if _, err := bc.Grant(ctx, &wire.GrantRequest{ID: "g-" + u, User: u, Amount: credits(t, "100")}); err != nil {
			t.Fatal(err)
		}
	}
	budget := credits(t, "40")
	if _, err := brc.Spend(ctx, &wire.SpendRequest{ID: "p-strat", User: "strat", Budget: budget, Duration: wire.Duration(40 * time.Minute),
		VMs: []string{"s1", "s2", "s3", "s4"}, Strategy: wire.StrategyBottleneck, Boost: 0.9}); err != nil {
		t.Fatal(err)
	}
	if _, err := brc.Spend(ctx, &wire.SpendRequest{ID: "p-fair", User: "fair", Budget: budget, Duration: wire.Duration(40 * time.Minute),
		VMs: []string{"f1", "f2", "f3", "f4"}, Strategy: wire.StrategyFair}); err != nil {
		t.Fatal(err)
	}
	// The strategic user's VMs on host-3 and host-4 have nothing to do.
	m.Sims["host-3"].SetDemand("s3", 0.01)
	m.Sims["host-4"].SetDemand("s4", 0.01)

	rate := func(vm string) (rate, share float64) {
		for _, v := range m.Broker.VMs(&wire.VMsRequest{}).VMs {
			if v.VM == vm {
				return v.Rate, v.Share
			}
		}
		t.Fatalf("no VM %s", vm)
		return 0, 0
	}
	flat := float64(budget) / (40 * time.Minute).Seconds() / 4
	start := clock
	for clock.Sub(start) < 20*time.Minute {
		clock = clock.Add(10 * time.Second)
		if err := m.Tick(ctx, clock); err != nil {
			t.Fatal(err)
		}
		checkLedger(t, bc)
	}
	// Halfway: the broker has moved the strategic user's money.
	if err := m.Tick(ctx, clock); err != nil { // the agents publish the last bids
		t.Fatal(err)
	}
	for _, vm := range []string{"s3", "s4"} {
		if r, _ := rate(vm); r > 0.2*flat {
			t.Errorf("idle %s still spends %.1f µ/s (flat %.1f)", vm, r, flat)
		}
	}
	for _, h := range []string{"1", "2"} {
		rs, qs := rate("s" + h)
		rf, qf := rate("f" + h)
		if rs < 1.5*flat || qs <= qf || qs < 0.6 {
			t.Errorf("host-%s: busy strategic VM rate %.1f share %.3f vs fair %.1f / %.3f (flat %.1f)", h, rs, qs, rf, qf, flat)
		}
		t.Logf("host-%s: strategic busy VM %.1f µ/s, share %.3f; fair VM %.1f µ/s, share %.3f", h, rs, qs, rf, qf)
	}
	for clock.Sub(start) < 41*time.Minute {
		clock = clock.Add(10 * time.Second)
		if err := m.Tick(ctx, clock); err != nil {
			t.Fatal(err)
		}
		checkLedger(t, bc)
	}
	for _, u := range []string{"strat", "fair"} {
		bal, err := bc.Balance(ctx, &wire.BalanceRequest{User: u})
		if err != nil {
			t.Fatal(err)
		}
		if bal.Spent > budget || bal.Held != 0 {
			t.Fatalf("%s spent %s of a %s budget (held %s)", u, bal.Spent, budget, bal.Held)
		}
		t.Logf("%s spent %s of %s", u, bal.Spent, budget)
		if u == "fair" && bal.Spent != budget {
			t.Fatalf("the fair plan spent %s, not its whole budget", bal.Spent)
		}
		if u == "strat" && math.Abs(float64(bal.Spent-budget)) > 0.1*float64(budget) {
			t.Fatalf("the strategic plan spent %s: its mean rate should stay near b/d", bal.Spent)
		}
	}
}
