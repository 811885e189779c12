package natsutil_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/cputime"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// BenchmarkCapacity is what the embedded NATS server (JetStream on disk,
// one replica) carries on this machine of the market's three kinds of
// per-tick traffic, each message the size docs/SCALE.md measured: a host
// state published to one subscriber (core NATS, 4 KB), a host state put in
// the MRM_HOSTS bucket (a JetStream write, acknowledged, 4 KB), and a
// capture event published to the MRM_EVENTS stream (acknowledged, 4.5
// KB). Sixteen publishers at once, as many agents would; an iteration is
// 20,000 messages (2,000 with -short). It reports messages per second and
// the CPU time per message of the whole process (server and clients).
func BenchmarkCapacity(b *testing.B) {
	perIter := 20_000
	if testing.Short() {
		perIter = 2_000
	}
	ns, nc := natstest.Start(b)
	assets := natstest.Assets(b, nc)
	state, event := make([]byte, 4096), make([]byte, 4608)
	conns := make([]*nats.Conn, 16)
	for i := range conns {
		conns[i] = natstest.Connect(b, ns)
	}
	kinds := []struct {
		name string
		send func(ctx context.Context, c int, n int64) error
	}{
		{"state-pub", func(_ context.Context, c int, n int64) error {
			return conns[c].Publish(fmt.Sprintf("mrm.v1.host.h%d.state", n%1000), state)
		}},
		{"state-kv-put", func(ctx context.Context, _ int, n int64) error {
			_, err := assets.Hosts.Put(ctx, fmt.Sprintf("h%d", n%1000), state)
			return err
		}},
		{"event-js-pub", func(ctx context.Context, _ int, _ int64) error {
			_, err := assets.JS.Publish(ctx, wire.EventSubject("bank", "capture"), event)
			return err
		}},
	}
	var received atomic.Int64
	sub, err := nc.Subscribe("mrm.v1.host.*.state", func(*nats.Msg) { received.Add(1) })
	if err != nil {
		b.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		b.Fatal(err)
	}
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			ctx := context.Background()
			var sent int64
			cpu0, start := cputime.Process(), time.Now()
			for b.Loop() {
				var next atomic.Int64
				var wg sync.WaitGroup
				errs := make(chan error, len(conns))
				for c := range conns {
					wg.Go(func() {
						for n := next.Add(1); n <= int64(perIter); n = next.Add(1) {
							if err := k.send(ctx, c, n); err != nil {
								errs <- err
								return
							}
						}
					})
				}
				wg.Wait()
				select {
				case err := <-errs:
					b.Fatal(err)
				default:
				}
				for _, c := range conns {
					if err := c.Flush(); err != nil {
						b.Fatal(err)
					}
				}
				sent += int64(perIter)
			}
			if k.name == "state-pub" { // until the subscriber has them all
				for deadline := time.Now().Add(time.Minute); received.Load() < sent && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
				if got := received.Load(); got < sent {
					b.Fatalf("the subscriber got %d of %d states", got, sent)
				}
			}
			elapsed, cpu := time.Since(start), cputime.Process()-cpu0
			b.ReportMetric(float64(sent)/elapsed.Seconds(), "msgs/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(sent), "cpu-µs/msg")
		})
	}
}
