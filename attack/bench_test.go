package attack

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

// BenchmarkSignedSpend is one signed spend's round trip through a running
// market, as a user's CLI makes it: alice signs a spend of one credit on
// her VM, the broker verifies it (and whatever the build checks: the
// signer's identity, the nonce), holds the money at the bank and places the
// bid at the host's agent, and the reply comes back. Each plan is cancelled
// outside the timer, so the market stays the same size. It reports ns/op
// and the p50 and p99 of the round trips.
func BenchmarkSignedSpend(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	m, err := market.Start(ctx, market.Config{
		Dir: dir, NATSHost: "127.0.0.1", NATSPort: -1, TickPeriod: tick,
		Hosts: []market.HostSpec{{ID: "host-1", CPUs: 1, VMs: []agent.VM{{ID: "a1", Owner: "alice"}}}},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Close)
	e := &env{t: b, ctx: ctx, m: m, dir: dir}
	admin, alice := e.key(wire.RoleAdmin, "admin"), e.key(wire.RoleUser, "alice")
	adminNC, aliceNC := e.dial(admin, "admin").Conn, e.dial(alice, "alice").Conn
	if _, err := wire.Do[wire.GrantReply](ctx, adminNC, admin, wire.BankGrant, &wire.GrantRequest{ID: "g-bench", User: "alice", Amount: credits(1_000_000)}); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("bench-%d-%d", b.N, i)
		start := time.Now()
		rep, err := wire.Do[wire.SpendReply](ctx, aliceNC, alice, wire.BrokerSpend, &wire.SpendRequest{ID: id, User: "alice", Budget: credits(1),
			Duration: wire.Duration(time.Hour), VMs: []string{"a1"}, Strategy: wire.StrategyFair})
		lat = append(lat, time.Since(start))
		if err != nil {
			b.Fatalf("spend %d: %v", i, err)
		}
		b.StopTimer()
		if _, err := wire.Do[wire.Plan](ctx, aliceNC, alice, wire.BrokerCancel, &wire.CancelRequest{Plan: rep.Plan.ID, User: "alice"}); err != nil {
			b.Fatalf("cancel %d: %v", i, err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Nanoseconds()), "p99-ns")
}
