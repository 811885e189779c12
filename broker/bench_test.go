package broker_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/broker"
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

// BenchmarkRound is one broker round over 10,000 hosts, 100,000 VMs and
// 1,000 bottleneck-elimination plans of 100 VMs each, plans in JetStream
// KV, every agent answered by one NATS responder. "steady" is a round in
// which nothing changed; "churn" a round after 1% of the VMs changed
// idleness, which re-bids every VM of the plans they belong to.
func BenchmarkRound(b *testing.B) {
	hosts, perHost, plans := benchScale()
	ctx := context.Background()
	clock := t0
	now := func() time.Time { return clock }
	ns, agentsNC := natstest.Start(b)
	ok := wire.EncodeReply(struct{}{}, nil)
	var bidsSeen atomic.Int64
	// 10,000 agents answer in parallel; here 8 responders share the load.
	for range 8 {
		if _, err := agentsNC.QueueSubscribe("mrm.v1.agent.*.bid", "agents", func(m *nats.Msg) { bidsSeen.Add(1); _ = m.Respond(ok) }); err != nil {
			b.Fatal(err)
		}
	}
	signer, err := signing.NewUserSigner() // bids are signed, as in production
	if err != nil {
		b.Fatal(err)
	}
	nc := natstest.Connect(b, ns)
	assets := natstest.Assets(b, nc)
	// The system-wide boost cap (0.9 by default) would leave each of 1,000
	// plans a boost too small to move a bid; the benchmark measures churn.
	br, err := broker.New(broker.Config{NC: nc, Bank: nullBank{}, Now: now, Tick: 10 * time.Second, Plans: assets.Plans, Replica: "bench", MaxBoost: 1000, Signer: signer})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	// Plan p owns VM k of hosts p*10 … p*10+99 (mod hosts): 100 VMs over 100 hosts.
	states := make([]wire.HostState, hosts)
	for h := range hosts {
		st := wire.HostState{Host: fmt.Sprintf("h%d", h), Time: clock, Price: 1000}
		for k := range perHost {
			st.VMs = append(st.VMs, wire.VMState{VM: fmt.Sprintf("h%d-v%d", h, k), Owner: fmt.Sprintf("u%d", (h/100*perHost+k)%plans)})
		}
		states[h] = st
		br.Observe(st)
	}
	owned := map[string][]string{}
	for _, st := range states {
		for _, v := range st.VMs {
			owned[v.Owner] = append(owned[v.Owner], v.VM)
		}
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
			br.Observe(*st)
		}
	}
	round()
	b.Run("steady", func(b *testing.B) {
		for b.Loop() {
			round()
		}
	})
	b.Run("churn", func(b *testing.B) {
		var elapsed time.Duration
		sent0 := bidsSeen.Load()
		for b.Loop() {
			b.StopTimer()
			churn()
			b.StartTimer()
			t := time.Now()
			round()
			elapsed += time.Since(t)
		}
		b.ReportMetric(float64(bidsSeen.Load()-sent0)/elapsed.Seconds(), "bids/s")
		b.ReportMetric(float64(bidsSeen.Load()-sent0)/float64(b.N), "bids/round")
	})
}

// benchScale is the benchmark's size; MRM_BENCH_SMALL=1 makes it 10× smaller
// for profiling.
func benchScale() (hosts, perHost, plans int) {
	if os.Getenv("MRM_BENCH_SMALL") != "" {
		return 1_000, 10, 100
	}
	return 10_000, 10, 1_000
}
