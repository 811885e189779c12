package virt_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/agent/virt"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// BenchmarkBidToLibvirt is the latency of a bid change on 1, 4 and 16 real
// (paused) QEMU domains: a broker-signed bid message over NATS, verified,
// applied to every domain through libvirt, answered. It reports the p50 and
// p99 of the whole round trip ("rtt") and of the agent's part, from the
// decoded message to the last libvirt call returning ("agent").
func BenchmarkBidToLibvirt(b *testing.B) {
	conn := needQEMU(b)
	initrd := buildInitramfs(b)
	for _, n := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("domains=%d", n), func(b *testing.B) {
			prefix := fmt.Sprintf("mrm-bench-%d-", n)
			for i := range n {
				startGuest(b, conn, fmt.Sprintf("%sg%d", prefix, i), "alice", initrd, true)
			}
			_, nc := natstest.Start(b)
			bk, err := bank.Open(filepath.Join(b.TempDir(), "bank.db"), bank.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer bk.Close()
			stopBank, err := bank.Serve(nc, bk)
			if err != nil {
				b.Fatal(err)
			}
			defer stopBank()
			brokerKey, err := signing.NewUserSigner()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := bk.AddPrincipal(context.Background(), &wire.PrincipalRequest{Key: brokerKey.Public(), Name: "broker", Role: wire.RoleBroker}); err != nil {
				b.Fatal(err)
			}
			alice, err := signing.NewUserSigner()
			if err != nil {
				b.Fatal(err)
			}
			if _, err := bk.AddPrincipal(context.Background(), &wire.PrincipalRequest{Key: alice.Public(), Name: "alice", Role: wire.RoleUser}); err != nil {
				b.Fatal(err)
			}
			var vms []string
			for k := range n {
				vms = append(vms, fmt.Sprintf("%sg%d", prefix, k))
			}
			signed, err := mandate.Sign(alice, wire.BrokerSpend, &wire.SpendRequest{ID: "p", User: "alice", Budget: money.Max,
				Duration: wire.Duration(24 * time.Hour), VMs: vms, Strategy: wire.StrategyFair})
			if err != nil {
				b.Fatal(err)
			}
			enf, err := virt.New(virt.Config{URI: qemuURI})
			if err != nil {
				b.Fatal(err)
			}
			defer enf.Close()
			timed := &timedEnforcer{Enforcer: enf}
			a, err := agent.New(agent.Config{Host: "host-1", Enforcer: timed, Capturer: bank.Client{NC: nc}, Identities: bank.Client{NC: nc}})
			if err != nil {
				b.Fatal(err)
			}
			stop, err := agent.Serve(nc, a)
			if err != nil {
				b.Fatal(err)
			}
			defer stop()
			var rtt, inAgent []time.Duration
			i := 0
			b.ResetTimer()
			for b.Loop() {
				i++
				req := &wire.BidRequest{Versioned: wire.Versioned{V: 1}}
				for k := range n {
					req.Set = append(req.Set, wire.Bid{VM: fmt.Sprintf("%sg%d", prefix, k), Owner: "alice", Plan: "p", Hold: mandate.HoldIDFor("alice", "p"),
						Budget: money.Micro(1000 * (1 + (i+k)%7)), Duration: wire.Duration(time.Hour)})
				}
				req.Set[0].Mandate = signed
				t0 := time.Now()
				if _, err := rpc.Request[struct{}](context.Background(), nc, wire.AgentBidSubject("host-1"), req, rpc.SignedBy(brokerKey)); err != nil {
					b.Fatal(err)
				}
				rtt = append(rtt, time.Since(t0))
				inAgent = append(inAgent, time.Duration(timed.last.Load()))
			}
			b.StopTimer()
			for name, l := range map[string][]time.Duration{"rtt": rtt, "apply": inAgent} {
				slices.Sort(l)
				b.ReportMetric(float64(l[len(l)/2].Microseconds()), name+"-p50-µs")
				b.ReportMetric(float64(l[len(l)*99/100].Microseconds()), name+"-p99-µs")
			}
		})
	}
}

// timedEnforcer records how long the last Apply (all libvirt calls) took.
type timedEnforcer struct {
	*virt.Enforcer
	last atomic.Int64 // ns
}

func (t *timedEnforcer) Apply(ctx context.Context, shares map[string]float64) error {
	start := time.Now()
	err := t.Enforcer.Apply(ctx, shares)
	t.last.Store(int64(time.Since(start)))
	return err
}
