package agent_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// ackBank accepts every leg in full: it measures the agent's own work.
type ackBank struct{}

func (ackBank) Capture(_ context.Context, b *wire.CaptureBatch) (wire.CaptureReply, error) {
	rep := wire.CaptureReply{Legs: make([]wire.LegResult, len(b.Legs))}
	for i, l := range b.Legs {
		rep.Legs[i] = wire.LegResult{ID: l.ID, Hold: l.Hold, VM: l.VM, Applied: l.Cumulative, Captured: l.Cumulative}
	}
	return rep, nil
}

// BenchmarkTick is one agent tick (charge every bid, one capture batch,
// reconcile, measure, build the state) on a host with 1, 100 and 1,000
// funded VMs, against an in-memory bank that acknowledges every leg
// ("agent") and against the real SQLite bank ("sqlite-bank").
func BenchmarkTick(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		for _, backend := range []string{"agent", "sqlite-bank"} {
			b.Run(fmt.Sprintf("vms=%d/%s", n, backend), func(b *testing.B) {
				clock := t0
				now := func() time.Time { return clock }
				var vms []agent.VM
				var bids []wire.Bid
				for i := range n {
					vms = append(vms, agent.VM{ID: fmt.Sprintf("vm%d", i), Owner: "alice"})
					bids = append(bids, wire.Bid{VM: vms[i].ID, Owner: "alice", Plan: "p", Hold: "hold",
						Budget: 1_000_000_000, Duration: wire.Duration(365 * 24 * time.Hour)})
				}
				var capt agent.Capturer = ackBank{}
				if backend == "sqlite-bank" {
					bk, err := bank.Open(filepath.Join(b.TempDir(), "bank.db"), bank.Options{Now: now})
					if err != nil {
						b.Fatal(err)
					}
					defer bk.Close()
					ctx := context.Background()
					if _, err := bk.Grant(ctx, &wire.GrantRequest{ID: "g", User: "alice", Amount: 1000000000000000}); err != nil {
						b.Fatal(err)
					}
					if _, err := bk.Hold(ctx, &wire.HoldRequest{ID: "hold", User: "alice", Amount: 1000000000000000, Expires: t0.Add(366 * 24 * time.Hour)}); err != nil {
						b.Fatal(err)
					}
					capt = bk
				}
				sim := agent.NewSimEnforcer(now, 16, vms...)
				a, err := agent.New(agent.Config{Host: "host-1", Enforcer: sim, Capturer: capt, Now: now, Capacity: 16})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := a.SetBids(context.Background(), &wire.BidRequest{Set: bids}); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					clock = clock.Add(time.Second)
					if _, err := a.Tick(context.Background(), clock); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
