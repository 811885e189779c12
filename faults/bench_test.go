package faults

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// BenchmarkMarket measures transfers/s and spends/s through the market
// running as separate processes — two banks on a PostgreSQL primary with a
// synchronous standby, two brokers, three simulated agents — on one NATS
// server (JetStream R1) and on a cluster of three (R3): what replication
// costs. Eight clients at once, each on its own connection; p50 and p99
// latencies beside the rate. -short runs the single server only.
//
//	go test -tags libvirt_dlopen -run '^$' -bench Market -benchtime 10s ./faults/
func BenchmarkMarket(b *testing.B) {
	for _, nodes := range []int{1, 3} {
		b.Run(fmt.Sprintf("nats=%d", nodes), func(b *testing.B) {
			if nodes > 1 && testing.Short() {
				b.Skip("-short: one NATS server only")
			}
			c := startCluster(b, nodes)
			conns := make([]*nats.Conn, 8)
			for i := range conns {
				conns[i] = c.connect(b, fmt.Sprintf("bench-%d", i))
			}
			c.waitVMs(b, conns[0])
			b.Run("transfers", func(b *testing.B) {
				benchOps(b, conns, func(ctx context.Context, nc *nats.Conn, n int64) error {
					from, to := payers[n%int64(len(payers))], payers[(n+1)%int64(len(payers))]
					_, err := c.bank(nc).Transfer(ctx, &wire.TransferRequest{ID: fmt.Sprintf("bt-%d", n), From: from, To: to, Amount: 1})
					return err
				})
			})
			b.Run("spends", func(b *testing.B) {
				benchOps(b, conns, func(ctx context.Context, nc *nats.Conn, n int64) error {
					user := spenders[n%2]
					vms := c.vmsOf(user)
					_, err := c.broker(nc).Spend(ctx, &wire.SpendRequest{ID: fmt.Sprintf("bs-%d", n), User: user, Budget: money.PerCredit / 100,
						Duration: wire.Duration(10 * time.Second), VMs: vms[n%int64(len(vms)):][:1], Strategy: wire.StrategyFair})
					return err
				})
			})
		})
	}
}

// benchSeq numbers the benchmark's operations across its runs (ids are
// never reused).
var benchSeq atomic.Int64

// benchOps runs op b.N times from len(conns) clients at once, and reports
// the rate and the latencies.
func benchOps(b *testing.B, conns []*nats.Conn, op func(ctx context.Context, nc *nats.Conn, n int64) error) {
	var (
		mu   sync.Mutex
		lats []time.Duration
		next atomic.Int64
		wg   sync.WaitGroup
		errs = make(chan error, len(conns))
	)
	b.ResetTimer()
	start := time.Now()
	for _, nc := range conns {
		wg.Go(func() {
			var mine []time.Duration
			for next.Add(1) <= int64(b.N) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				t0 := time.Now()
				err := op(ctx, nc, benchSeq.Add(1))
				mine = append(mine, time.Since(t0))
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	slices.Sort(lats)
	at := func(q float64) float64 { return float64(lats[int(q*float64(len(lats)-1))].Microseconds()) / 1000 }
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
	b.ReportMetric(at(0.5), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}
