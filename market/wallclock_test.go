package market_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

// TestRunOnTheWallClock is `mrmarket up`: a market on the real clock whose
// components tick by themselves. Spending shows up in the price feed and
// the bank within a few ticks.
func TestRunOnTheWallClock(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := market.Start(ctx, market.Config{
		Dir: t.TempDir(), NATSPort: -1, TickPeriod: 20 * time.Millisecond,
		Hosts: []market.HostSpec{{ID: "host-1", CPUs: 1, VMs: []agent.VM{{ID: "a1", Owner: "alice"}, {ID: "b1", Owner: "bob"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	nc, err := m.NC("wallclock-test")
	if err != nil {
		t.Fatal(err)
	}
	bc, brc := bank.Client{NC: nc, Keys: m.Keys()}, broker.Client{NC: nc, Keys: m.Keys()}
	if _, err := bc.Grant(ctx, &wire.GrantRequest{ID: "g", User: "alice", Amount: 100_000_000}); err != nil {
		t.Fatal(err)
	}
	if _, err := brc.Spend(ctx, &wire.SpendRequest{User: "alice", Budget: 36_000_000, Duration: wire.Duration(time.Hour),
		VMs: []string{"a1"}, Strategy: wire.StrategyFair}); err != nil {
		t.Fatal(err)
	}
	testpoll.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		p, err := brc.Price(ctx, &wire.PriceRequest{Host: "host-1"})
		if err != nil || len(p.Hosts) != 1 || p.Hosts[0].Price != 10_000 {
			return fmt.Errorf("host-1's price is not 10000 within 10s: %+v, %v", p, err)
		}
		bal, err := bc.Balance(ctx, &wire.BalanceRequest{User: "alice"})
		if err == nil && bal.Spent > 0 {
			return nil
		}
		return fmt.Errorf("alice spent nothing within 10s: %+v, %v", bal, err)
	})
	checkLedger(t, bc)
}

// TestStartFailureCleansUp: a market that cannot start returns the error
// and stops what it had started.
func TestStartFailureCleansUp(t *testing.T) {
	_, err := market.Start(context.Background(), market.Config{
		Dir: t.TempDir(), NATSPort: -1,
		Hosts: []market.HostSpec{{ID: "bad.host", CPUs: 1}},
	})
	if err == nil {
		t.Fatal("a host named bad.host was accepted")
	}
}
