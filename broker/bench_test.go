package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/cputime"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// nullBank accepts every hold: the benchmark measures the broker.
type nullBank struct{}

func (nullBank) Hold(_ context.Context, r *wire.HoldRequest) (wire.HoldReply, error) {
	return wire.HoldReply{Hold: wire.HoldInfo{ID: r.ID, Amount: r.Amount}}, nil
}
func (nullBank) Extend(context.Context, *wire.ExtendRequest) (wire.HoldReply, error) {
	return wire.HoldReply{}, nil
}
func (nullBank) Release(context.Context, *wire.ReleaseRequest) (wire.ReleaseReply, error) {
	return wire.ReleaseReply{}, nil
}

// BenchmarkRound is one broker round over N hosts of 10 VMs each and N/10
// bottleneck-elimination plans of 100 VMs each (on 100 hosts), plans in
// JetStream KV, every agent answered by one NATS responder, at N = 1,000,
// 10,000 and 100,000 (1M VMs, 10k plans; -short runs 1,000 only). "steady"
// is a round in which nothing changed; "churn" a round after 1% of the VMs
// changed idleness, which re-bids every VM of the plans they belong to. It
// reports the CPU time of a round (the broker's, and the agents'
// responders' and the NATS server's in this process: the figure that holds
// on a loaded machine) and the heap per VM once the plans run (the
// broker's, and the NATS server's plan store's).
func BenchmarkRound(b *testing.B) {
	for _, hosts := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("hosts=%d", hosts), func(b *testing.B) {
			if hosts > 1_000 && testing.Short() {
				b.Skip("-short: the small size only")
			}
			benchRound(b, hosts, 10, hosts/10)
		})
	}
}

func benchRound(b *testing.B, hosts, perHost, plans int) {
	ctx := context.Background()
	clock := t0
	now := func() time.Time { return clock }
	ns, agentsNC := natstest.Start(b)
	var bidsSeen, requestsSeen atomic.Int64
	// The hosts' agents answer in parallel; here 8 responders share the
	// load, each taking every change of a batch (counted by its version
	// field: one per change beside the batch's own, the bids carrying no
	// mandate) without decoding it.
	var mu sync.Mutex
	taken := map[int][]byte{}
	for range 8 {
		if _, err := agentsNC.QueueSubscribe("mrm.v1.agent.*.bid", "agents", func(m *nats.Msg) {
			n := bytes.Count(m.Data, []byte(`{"v":1,`)) - 1
			requestsSeen.Add(1)
			bidsSeen.Add(int64(n))
			mu.Lock()
			ok, done := taken[n]
			if !done {
				ok = wire.EncodeReply(wire.BidResults{Errors: make([]*wire.Error, n)}, nil)
				taken[n] = ok
			}
			mu.Unlock()
			_ = m.Respond(ok)
		}); err != nil {
			b.Fatal(err)
		}
	}
	signer, err := signing.NewUserSigner() // bids are signed, as in production
	if err != nil {
		b.Fatal(err)
	}
	nc := natstest.Connect(b, ns)
	assets := natstest.Assets(b, nc)
	// Plan p owns VM k of hosts p*10 … p*10+99 (mod hosts): 100 VMs over 100 hosts.
	states := make([]wire.HostState, hosts)
	for h := range hosts {
		st := wire.HostState{Host: fmt.Sprintf("h%d", h), Time: clock, Price: 1000}
		for k := range perHost {
			st.VMs = append(st.VMs, wire.VMState{VM: fmt.Sprintf("h%d-v%d", h, k), Owner: fmt.Sprintf("u%d", (h/100*perHost+k)%plans)})
		}
		states[h] = st
	}
	owned := map[string][]string{}
	for _, st := range states {
		for _, v := range st.VMs {
			owned[v.Owner] = append(owned[v.Owner], v.VM)
		}
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	// The system-wide boost cap (0.9 by default) would leave each of the
	// plans a boost too small to move a bid; the benchmark measures churn.
	br, err := broker.New(broker.Config{NC: nc, Bank: nullBank{}, Now: now, Tick: 10 * time.Second, Plans: assets.Plans, Replica: "bench",
		MaxBoost: float64(plans), Signer: signer})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	// Each state observed is the broker's own, as one decoded from a message.
	observe := func(st wire.HostState) { st.VMs = slices.Clone(st.VMs); br.Observe(st) }
	for _, st := range states {
		observe(st)
	}
	for p := range plans {
		u := fmt.Sprintf("u%d", p)
		if _, err := br.Spend(ctx, &wire.SpendRequest{ID: "p" + u, User: u, Budget: 100_000_000, Duration: wire.Duration(24 * time.Hour),
			VMs: owned[u], Strategy: wire.StrategyBottleneck, Boost: 0.5}); err != nil {
			b.Fatal(err)
		}
	}
	round := func() {
		clock = clock.Add(10 * time.Second)
		if err := br.Tick(ctx, clock); err != nil {
			b.Fatal(err)
		}
	}
	flip := 0
	churn := func() { // 1% of the VMs change idleness
		for i := 0; i < hosts*perHost/100; i++ {
			h := (flip * 7919) % hosts
			flip++
			st := &states[h]
			st.Time = clock.Add(time.Second)
			st.VMs[flip%perHost].Idle = !st.VMs[flip%perHost].Idle
			observe(*st)
		}
	}
	round()
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	heapPerVM := (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(hosts*perHost)
	b.Run("steady", func(b *testing.B) {
		cpu0 := cputime.Process()
		for b.Loop() {
			round()
		}
		b.ReportMetric((cputime.Process()-cpu0).Seconds()*1000/float64(b.N), "cpu-ms/round")
		b.ReportMetric(heapPerVM, "heap-B/VM")
	})
	b.Run("churn", func(b *testing.B) {
		var elapsed, cpu time.Duration
		sent0, requests0 := bidsSeen.Load(), requestsSeen.Load()
		for b.Loop() {
			b.StopTimer()
			churn()
			b.StartTimer()
			t, cpu0 := time.Now(), cputime.Process()
			round()
			elapsed += time.Since(t)
			cpu += cputime.Process() - cpu0
		}
		b.ReportMetric(cpu.Seconds()*1000/float64(b.N), "cpu-ms/round")
		b.ReportMetric(float64(bidsSeen.Load()-sent0)/elapsed.Seconds(), "bids/s")
		b.ReportMetric(float64(bidsSeen.Load()-sent0)/float64(b.N), "bids/round")
		b.ReportMetric(float64(requestsSeen.Load()-requests0)/float64(b.N), "requests/round")
	})
}
