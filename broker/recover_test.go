package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestPlansLostByTheStoreAreRecoveredFromTheBank: a replica that starts
// with an empty plan store (the bucket lost while no broker ran) finds the
// open holds brokers placed that no plan knows, releases them and lists
// the plans as cancelled — the money is not held silently until expiry.
func TestPlansLostByTheStoreAreRecoveredFromTheBank(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, []string{"host-1"}, nil)
	if _, err := f.spend("p1", 500, "a-host-1"); err != nil {
		t.Fatal(err)
	}
	if bal := f.balance(t); bal.Held != 500 {
		t.Fatalf("held %s", bal.Held)
	}
	fresh, err := broker.New(broker.Config{Agents: noBids{}, Bank: f.bank, Now: func() time.Time { return *f.clock }, Replica: "fresh"})
	if err != nil {
		t.Fatal(err)
	}
	// A plan just placed is left alone (it may be starting on another
	// replica); the same replica looks again startingTimeout later.
	if err := fresh.Tick(ctx, *f.clock); err != nil {
		t.Fatal(err)
	}
	if ps := fresh.Plans(&wire.PlansRequest{}).Plans; len(ps) != 0 {
		t.Fatalf("recovered a plan just placed: %+v", ps)
	}
	if err := fresh.Tick(ctx, f.clock.Add(3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	ps := fresh.Plans(&wire.PlansRequest{User: "alice"}).Plans
	if len(ps) != 1 || ps[0].ID != "p1" || ps[0].Status != wire.PlanCancelled || ps[0].Released == 0 {
		t.Fatalf("recovered plans: %+v", ps)
	}
	if bal := f.balance(t); bal.Held != 0 {
		t.Fatalf("still held after recovery: %+v", bal)
	}
}

type noBids struct{}

func (noBids) Bid(_ context.Context, _ string, reqs []*wire.BidRequest) []error {
	return make([]error, len(reqs))
}
