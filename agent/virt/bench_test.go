package virt_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"libvirt.org/go/libvirt"

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

// BenchmarkBidToLibvirt is the latency of one VM's bid change on 1, 16 and
// 64 real (paused) QEMU domains: a broker-signed bid message over NATS,
// verified, enforced through libvirt, answered. Two agents govern the same
// domains, one per path, and each iteration sends the same bid to both, in
// alternating order, so the machine's load weighs on both alike:
//   - old: every Apply lists the active domains, reads each one's
//     metadata, sets every domain's cpu_shares and reads back (and
//     removes) its cap;
//   - new: the domain cache, and calls only for weights that change.
//
// It reports, per path, the p50 and p99 of the whole round trip ("rtt")
// and of the agent's part, from the decoded message to the last libvirt
// call returning ("apply"), and those of one libvirt call in the same run
// ("call": reading the bidder's scheduler parameters), the least a bid
// that changes a weight can cost. The old path's writes are, to the new path,
// weights changed behind its back, which it sets again only at a
// reconcile (no tick runs here): its calls per bid are its steady state's.
// -short runs the single domain only.
func BenchmarkBidToLibvirt(b *testing.B) {
	conn := needQEMU(b)
	initrd := buildInitramfs(b)
	for _, n := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("domains=%d", n), func(b *testing.B) {
			if n > 1 && testing.Short() {
				b.Skip("-short: one domain only")
			}
			prefix := fmt.Sprintf("mrm-bench-%d-", n)
			var vms []string
			var doms []*libvirt.Domain
			for i := range n {
				vms = append(vms, fmt.Sprintf("%sg%d", prefix, i))
				doms = append(doms, startGuest(b, conn, vms[i], "alice", initrd, true))
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
			signed, err := mandate.Sign(alice, wire.BrokerSpend, &wire.SpendRequest{ID: "p", User: "alice", Budget: money.Max,
				Duration: wire.Duration(24 * time.Hour), VMs: vms, Strategy: wire.StrategyFair})
			if err != nil {
				b.Fatal(err)
			}
			bid := func(host string, set []wire.Bid) {
				req := &wire.BidRequest{Set: set}
				req.Set[0].Mandate = signed
				// The old path on many domains of a loaded host outlasts a request's default deadline.
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := natstest.Bid(ctx, nc, host, req, rpc.SignedBy(brokerKey)); err != nil {
					b.Fatal(err)
				}
			}
			budget := func(vm string, units int) wire.Bid {
				return wire.Bid{VM: vm, Owner: "alice", Plan: "p", Hold: mandate.HoldIDFor("alice", "p"),
					Budget: money.Micro(1000 * units), Duration: wire.Duration(time.Hour)}
			}
			paths := []string{"old", "new"}
			timed := map[string]*timedEnforcer{}
			for _, path := range paths {
				enf, err := virt.New(virt.Config{URI: qemuURI})
				if err != nil {
					b.Fatal(err)
				}
				defer enf.Close()
				timed[path] = &timedEnforcer{Enforcer: enf, old: path == "old"}
				host := "host-" + path
				a, err := agent.New(agent.Config{Host: host, Enforcer: timed[path], Capturer: bank.Client{NC: nc}, Identities: bank.Client{NC: nc}})
				if err != nil {
					b.Fatal(err)
				}
				stop, err := agent.Serve(nc, a)
				if err != nil {
					b.Fatal(err)
				}
				defer stop()
				var all []wire.Bid // every VM funded, as on a busy host, from the loop's range
				for k, vm := range vms {
					all = append(all, budget(vm, 1+(k+3)%7))
				}
				bid(host, all)
			}
			rtt, apply := map[string][]time.Duration{}, map[string][]time.Duration{}
			var call []time.Duration
			i := 0
			b.ResetTimer()
			for b.Loop() {
				i++
				set := []wire.Bid{budget(vms[i%n], 1+i%7)} // never the VM's last budget
				for j := range paths {
					path := paths[(i+j)%2]
					t0 := time.Now()
					bid("host-"+path, set)
					rtt[path] = append(rtt[path], time.Since(t0))
					apply[path] = append(apply[path], time.Duration(timed[path].last.Load()))
				}
				t0 := time.Now()
				if _, err := doms[i%n].GetSchedulerParametersFlags(libvirt.DOMAIN_AFFECT_LIVE); err != nil {
					b.Fatal(err)
				}
				call = append(call, time.Since(t0))
			}
			b.StopTimer()
			report := func(name string, l []time.Duration) {
				slices.Sort(l)
				b.ReportMetric(float64(l[len(l)/2].Microseconds()), name+"-p50-µs")
				b.ReportMetric(float64(l[len(l)*99/100].Microseconds()), name+"-p99-µs")
			}
			for _, path := range paths {
				report(path+"-rtt", rtt[path])
				report(path+"-apply", apply[path])
			}
			report("call", call)
		})
	}
}

// timedEnforcer records how long the last Apply (all libvirt calls) took;
// old applies by the path before the domain cache.
type timedEnforcer struct {
	*virt.Enforcer
	old  bool
	last atomic.Int64 // ns
}

func (t *timedEnforcer) Apply(ctx context.Context, shares map[string]float64) error {
	start := time.Now()
	var err error
	if t.old {
		err = t.ApplyListingEveryDomain(ctx, shares)
	} else {
		err = t.Enforcer.Apply(ctx, shares)
	}
	t.last.Store(int64(time.Since(start)))
	return err
}
