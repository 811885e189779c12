package bank_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// BenchmarkCapture measures captured legs per second at batch sizes 1, 100
// and 1,000 on each store: every iteration is one batch raising each leg's
// cumulative total, as an agent's tick does. The legs capture from a hold
// of the old rule (no terms, a bank without identities), or with
// hold=terms from a hold with its mandate's terms, each leg checked against
// its placement and schedule (the bound never bites: the cost of the
// check alone).
func BenchmarkCapture(b *testing.B) {
	for _, s := range stores {
		for _, terms := range []bool{false, true} {
			for _, n := range []int{1, 100, 1000} {
				name := fmt.Sprintf("store=%s/legs=%d", s.name, n)
				if terms {
					name += "/hold=terms"
				}
				b.Run(name, func(b *testing.B) { benchCapture(b, s.new(b), n, terms) })
			}
		}
	}
}

func benchCapture(b *testing.B, target string, n int, terms bool) {
	ctx := context.Background()
	clock := t0
	opts := bank.Options{Now: func() time.Time { return clock }}
	var alice, admin *signing.Signer
	if terms {
		alice, admin = newSigner(b), newSigner(b)
		opts.AdminKey = admin.Public()
	}
	bk, err := bank.Open(target, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer bk.Close()
	hold := &wire.HoldRequest{ID: "h", User: "alice", Amount: 1_000_000_000_000, Expires: t0.Add(24 * time.Hour)}
	if terms {
		if _, err := bk.AddPrincipal(ctx, &wire.PrincipalRequest{Key: alice.Public(), Name: "alice", Role: wire.RoleUser,
			Cert: signing.SealPrincipal(admin, alice.Public(), "alice", wire.RoleUser)}); err != nil {
			b.Fatal(err)
		}
		spend := &wire.SpendRequest{ID: "p", User: "alice", Budget: hold.Amount, Duration: wire.Duration(20 * time.Hour), Strategy: wire.StrategyFair}
		for i := range n {
			spend.VMs = append(spend.VMs, fmt.Sprintf("vm%d", i))
			hold.Placement = append(hold.Placement, wire.Placed{VM: spend.VMs[i], Host: "host-1"})
		}
		if hold.Mandate, err = mandate.Sign(alice, wire.BrokerSpend, spend); err != nil {
			b.Fatal(err)
		}
		hold.ID, hold.Hosts, hold.Expires = mandate.HoldIDFor("alice", "p"), []string{"host-1"}, t0.Add(20*time.Hour)
	}
	if _, err := bk.Grant(ctx, &wire.GrantRequest{ID: "g", User: "alice", Amount: 1_000_000_000_000}); err != nil {
		b.Fatal(err)
	}
	if _, err := bk.Hold(ctx, hold); err != nil {
		b.Fatal(err)
	}
	round := int64(0)
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		round++
		batch := &wire.CaptureBatch{Host: "host-1", Tick: round, Legs: make([]wire.CaptureLeg, n)}
		for i := range batch.Legs {
			batch.Legs[i] = wire.CaptureLeg{ID: fmt.Sprintf("h/host-1/vm%d/%d", i, round), Hold: hold.ID, VM: fmt.Sprintf("vm%d", i), Cumulative: money.Micro(round)}
		}
		rep, err := bk.Capture(ctx, batch)
		if err != nil || rep.Applied != money.Micro(n) {
			b.Fatalf("round %d: %+v %v", round, rep.Applied, err)
		}
	}
	b.ReportMetric(float64(round)*float64(n)/time.Since(start).Seconds(), "legs/s")
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
