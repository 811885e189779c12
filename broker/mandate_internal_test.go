package broker

import (
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestAllocationsKeepToTheMandate: a plan with a mandate never bids a VM
// faster than the mandate allows one VM (so agents never refuse its bids):
// a plan on schedule bids what its strategy wants, one behind it catches
// up only as fast as its user signed, a signed spend --more raises the
// cap; a plan without a mandate bids what its strategy wants.
func TestAllocationsKeepToTheMandate(t *testing.T) {
	clock := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	b, err := New(Config{Agents: noAgents{}, Bank: &recBank{held: map[string]money.Micro{}, released: map[string]money.Micro{}},
		Now: func() time.Time { return clock }, Replica: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.Observe(wire.HostState{Host: "host-1", Time: clock, VMs: []wire.VMState{{VM: "a1", Owner: "alice"}, {VM: "a2", Owner: "alice"}}})
	alice, err := signing.NewUserSigner()
	if err != nil {
		t.Fatal(err)
	}
	spend := &wire.SpendRequest{ID: "p", User: "alice", Budget: 20_000_000, Duration: wire.Duration(10 * time.Minute), VMs: []string{"a1", "a2"},
		Strategy: wire.StrategyFair}
	if err := mandate.SignCaps(spend); err != nil {
		t.Fatal(err)
	}
	signed, err := mandate.Sign(alice, wire.BrokerSpend, spend)
	if err != nil {
		t.Fatal(err)
	}
	rec := b.newPlan("p", "", spend, []wire.PlanVM{{VM: "a1", Host: "host-1"}, {VM: "a2", Host: "host-1"}}, clock, nil)
	rec.Mandate = signed
	m, _ := mandate.Read(*signed)
	rc := mandate.RateCap(m, nil)
	budgets := func(rec *planRecord) []money.Micro {
		var out []money.Micro
		for _, a := range b.allocate(rec, clock, roundView{}).Allocs {
			if !mandate.Allows(rc, a.Budget, a.Duration) && rec.Mandate != nil && len(rec.More) == 0 {
				t.Errorf("a bid of %s over %s, above %.0f µ/s", a.Budget, a.Duration, rc)
			}
			out = append(out, a.Budget)
		}
		return out
	}
	if got := budgets(rec); len(got) != 2 || got[0] != 10_000_000 || got[1] != 10_000_000 {
		t.Fatalf("on schedule: %v, want 10 credits each", got)
	}
	// Half way with nothing spent (its host did not answer): it may catch
	// up only at the signed rate, the rest released at its end.
	clock = clock.Add(5 * time.Minute)
	want := mandate.Clamp(rc, 10_000_000, 5*time.Minute)
	if got := budgets(rec); len(got) != 2 || got[0] != want || got[1] != want || want >= 10_000_000 {
		t.Fatalf("behind schedule: %v, want %s each", got, want)
	}
	free := rec.clone()
	free.Mandate = nil
	if got := budgets(free); got[0] != 10_000_000 {
		t.Fatalf("without a mandate: %v", got)
	}
	more, err := mandate.Sign(alice, wire.BrokerAdjust, &wire.AdjustRequest{Plan: "p", User: "alice", ID: "m", More: 20_000_000})
	if err != nil {
		t.Fatal(err)
	}
	rec.More = append(rec.More, *more)
	rec.Plan.Budget += 20_000_000
	if got := budgets(rec); got[0] <= want {
		t.Fatalf("with 20 more signed: %v, want above %s", got, want)
	}
}
