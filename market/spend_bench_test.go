package market_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/retry"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

// askingAgain is how the benchmark asks a spend again while it answers
// unavailable (its bids still being placed), as the CLI does: short
// pauses, for as long as the spend takes.
var askingAgain = retry.Options{InitialBackoff: 50 * time.Millisecond, Multiplier: 2, MaxBackoff: 250 * time.Millisecond, Jitter: 0.5}

// BenchmarkSpendOverManyHosts is one spend over every VM of the market
// (10 VMs per simulated host, all alice's), asked again by its id while it
// answers unavailable, until it runs: seconds per spend, and the tries it
// took. Each plan is cancelled outside the timer.
//
//	go test -tags libvirt_dlopen -run '^$' -bench SpendOverManyHosts -benchtime 1x ./market/
func BenchmarkSpendOverManyHosts(b *testing.B) {
	for _, hosts := range []int{100, 1000} {
		b.Run(fmt.Sprintf("vms=%d", hosts*10), func(b *testing.B) {
			layout, err := market.Layout(hosts, 10, []string{"alice"})
			if err != nil {
				b.Fatal(err)
			}
			_, _, bc, brc := startAt(b, time.Now(), market.Config{TickPeriod: 5 * time.Second, Hosts: layout})
			ctx := context.Background()
			if _, err := bc.Grant(ctx, &wire.GrantRequest{ID: "g", User: "alice", Amount: credits(b, "1000000")}); err != nil {
				b.Fatal(err)
			}
			var vms []string
			for _, h := range layout {
				for _, v := range h.VMs {
					vms = append(vms, v.ID)
				}
			}
			tries := 0
			b.ResetTimer()
			for i := range b.N {
				req := &wire.SpendRequest{ID: fmt.Sprintf("big-%d-%d", b.N, i), User: "alice", Budget: credits(b, "1000"),
					Duration: wire.Duration(time.Hour), VMs: vms, Strategy: wire.StrategyFair}
				actx, cancel := context.WithTimeout(ctx, 5*time.Minute)
				var rep wire.SpendReply
				for r := retry.Start(actx, askingAgain); r.Next(); {
					tries++
					if rep, err = brc.Spend(actx, req); err == nil || !errors.Is(err, wire.ErrUnavailable) {
						break
					}
				}
				cancel()
				if err != nil || rep.Plan.Status != wire.PlanRunning {
					b.Fatalf("spend over %d VMs: %v (%s)", len(vms), err, rep.Plan.Status)
				}
				b.StopTimer()
				if _, err := brc.Cancel(ctx, &wire.CancelRequest{Plan: rep.Plan.ID, User: "alice"}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(tries)/float64(b.N), "tries/op")
		})
	}
}
