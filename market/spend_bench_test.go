package market_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/broker"
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
			brc, vms := aliceEverywhere(b, hosts)
			ctx := context.Background()
			tries := 0
			b.ResetTimer()
			for i := range b.N {
				req := &wire.SpendRequest{ID: fmt.Sprintf("big-%d-%d", b.N, i), User: "alice", Budget: credits(b, "1000"),
					Duration: wire.Duration(time.Hour), VMs: vms, Strategy: wire.StrategyFair}
				actx, cancel := context.WithTimeout(ctx, 5*time.Minute)
				var rep wire.SpendReply
				var err error
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

// BenchmarkAnsweredWhileBigSpendPlaces: a spend over every VM of the
// market (10 per simulated host) is sent with the CLI's first attempt (2 s)
// and answered unavailable while its bids are placed; meanwhile the user
// lists her plans (the big one must be there, starting), cancels a small
// plan of hers, then cancels the big one, each asked again while it is
// answered unavailable, as the CLI asks. It reports how long each took to
// be answered (ms, the mean over iterations) beside the market's size: the
// goal is plans and cancel within 5 s, the unfinished spend listed and
// cancelled within 10 s.
//
//	go test -tags libvirt_dlopen -run '^$' -bench AnsweredWhileBigSpend -benchtime 1x ./market/
func BenchmarkAnsweredWhileBigSpendPlaces(b *testing.B) {
	for _, hosts := range []int{100, 300, 1000} {
		b.Run(fmt.Sprintf("vms=%d", hosts*10), func(b *testing.B) {
			brc, vms := aliceEverywhere(b, hosts)
			ctx := context.Background()
			var plans, cancel, cancelBig time.Duration
			b.ResetTimer()
			for i := range b.N {
				small, big := fmt.Sprintf("small-%d-%d", b.N, i), fmt.Sprintf("big-%d-%d", b.N, i)
				if _, err := brc.Spend(ctx, &wire.SpendRequest{ID: small, User: "alice", Budget: credits(b, "1"),
					Duration: wire.Duration(time.Hour), VMs: vms[:1], Strategy: wire.StrategyFair}); err != nil {
					b.Fatal(err)
				}
				tryCtx, stop := context.WithTimeout(ctx, 2*time.Second)
				if _, err := brc.Spend(tryCtx, &wire.SpendRequest{ID: big, User: "alice", Budget: credits(b, "1000"),
					Duration: wire.Duration(time.Hour), VMs: vms, Strategy: wire.StrategyFair}); err != nil && !errors.Is(err, wire.ErrUnavailable) {
					b.Fatal(err)
				}
				stop()
				var rep wire.PlansReply
				plans += answered(b, func(ctx context.Context) (err error) {
					rep, err = brc.Plans(ctx, &wire.PlansRequest{User: "alice"})
					return err
				})
				if !slices.ContainsFunc(rep.Plans, func(p wire.Plan) bool { return p.ID == big }) {
					b.Fatal("the big spend placing its bids is not listed")
				}
				cancel += answered(b, func(ctx context.Context) error {
					_, err := brc.Cancel(ctx, &wire.CancelRequest{Plan: small, User: "alice"})
					return err
				})
				var p wire.Plan
				cancelBig += answered(b, func(ctx context.Context) (err error) {
					p, err = brc.Cancel(ctx, &wire.CancelRequest{Plan: big, User: "alice"})
					return err
				})
				if p.Status != wire.PlanCancelled {
					b.Fatalf("the big spend cancelled: %s", p.Status)
				}
			}
			ms := func(d time.Duration) float64 { return float64(d.Milliseconds()) / float64(b.N) }
			b.ReportMetric(ms(plans), "plans-ms")
			b.ReportMetric(ms(cancel), "cancel-ms")
			b.ReportMetric(ms(cancelBig), "cancel-big-ms")
		})
	}
}

// answered is how long op took to succeed, asked again (askingAgain) while
// it answered unavailable, each try given a request's time.
func answered(b testing.TB, op func(ctx context.Context) error) time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	var err error
	for r := retry.Start(ctx, askingAgain); r.Next(); {
		tctx, stop := context.WithTimeout(ctx, 5*time.Second)
		err = op(tctx)
		stop()
		if err == nil || !errors.Is(err, wire.ErrUnavailable) {
			break
		}
	}
	if err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// aliceEverywhere starts a market of hosts simulated hosts of 10 VMs, all
// alice's, grants her a million credits and gives her broker client and
// every VM.
func aliceEverywhere(b *testing.B, hosts int) (broker.Client, []string) {
	layout, err := market.Layout(hosts, 10, []string{"alice"})
	if err != nil {
		b.Fatal(err)
	}
	_, _, bc, brc := startAt(b, time.Now(), market.Config{TickPeriod: 5 * time.Second, Hosts: layout})
	if _, err := bc.Grant(context.Background(), &wire.GrantRequest{ID: "g", User: "alice", Amount: credits(b, "1000000")}); err != nil {
		b.Fatal(err)
	}
	var vms []string
	for _, h := range layout {
		for _, v := range h.VMs {
			vms = append(vms, v.ID)
		}
	}
	return brc, vms
}
