package bank_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// BenchmarkCapture measures captured legs per second at batch sizes 1, 100
// and 1,000 on each store: every iteration is one batch raising each leg's
// cumulative total, as an agent's tick does.
func BenchmarkCapture(b *testing.B) {
	for _, s := range stores {
		for _, n := range []int{1, 100, 1000} {
			b.Run(fmt.Sprintf("store=%s/legs=%d", s.name, n), func(b *testing.B) {
				ctx := context.Background()
				clock := t0
				bk, err := bank.Open(s.new(b), bank.Options{Now: func() time.Time { return clock }})
				if err != nil {
					b.Fatal(err)
				}
				defer bk.Close()
				if _, err := bk.Grant(ctx, &wire.GrantRequest{ID: "g", User: "alice", Amount: 1_000_000_000_000}); err != nil {
					b.Fatal(err)
				}
				if _, err := bk.Hold(ctx, &wire.HoldRequest{ID: "h", User: "alice", Amount: 1_000_000_000_000, Expires: t0.Add(24 * time.Hour)}); err != nil {
					b.Fatal(err)
				}
				round := int64(0)
				b.ResetTimer()
				start := time.Now()
				for b.Loop() {
					round++
					batch := &wire.CaptureBatch{Host: "host-1", Tick: round, Legs: make([]wire.CaptureLeg, n)}
					for i := range batch.Legs {
						batch.Legs[i] = wire.CaptureLeg{ID: fmt.Sprintf("h/host-1/vm%d/%d", i, round), Hold: "h", VM: fmt.Sprintf("vm%d", i), Cumulative: money.Micro(round)}
					}
					rep, err := bk.Capture(ctx, batch)
					if err != nil || rep.Applied != money.Micro(n) {
						b.Fatalf("round %d: %+v %v", round, rep.Applied, err)
					}
				}
				b.ReportMetric(float64(round)*float64(n)/time.Since(start).Seconds(), "legs/s")
			})
		}
	}
}

// BenchmarkSignedHold is the round trip of a signed hold over NATS (sign,
// verify, authorise, nonce, transaction, reply), with p50 and p99.
func BenchmarkSignedHold(b *testing.B) {
	for _, s := range stores {
		b.Run("store="+s.name, func(b *testing.B) {
			srv := serveBank(b, s.new(b))
			ctx := context.Background()
			c := bank.Client{NC: srv.nc, Keys: srv.keys}
			if _, err := c.Grant(ctx, &wire.GrantRequest{ID: "g", User: "alice", Amount: 1_000_000_000_000}); err != nil {
				b.Fatal(err)
			}
			var lat []time.Duration
			i := 0
			b.ResetTimer()
			for b.Loop() {
				i++
				t0 := time.Now()
				if _, err := c.Hold(ctx, &wire.HoldRequest{ID: fmt.Sprintf("h%d", i), User: "alice", Amount: 1, Expires: time.Now().Add(time.Hour)}); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
