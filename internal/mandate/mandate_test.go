package mandate_test

import (
	"errors"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

func TestMandates(t *testing.T) {
	alice, err := signing.NewUserSigner()
	if err != nil {
		t.Fatal(err)
	}
	spend := &wire.SpendRequest{ID: "p1", User: "alice", Budget: 500, Duration: wire.Duration(time.Hour), VMs: []string{"a1", "a2"}, Strategy: wire.StrategyFair}
	s, err := mandate.Sign(alice, wire.BrokerSpend, spend)
	if err != nil {
		t.Fatal(err)
	}
	var cache mandate.Cache
	m, err := cache.Read(s)
	if err != nil {
		t.Fatal(err)
	}
	if m.User != "alice" || m.RequestID != "p1" || m.Hold != mandate.HoldIDFor("alice", "p1") || !m.VMs["a2"] || m.VMs["b1"] || m.Budget != 500 ||
		m.Until.Sub(m.Signer.Time) != time.Hour+mandate.Grace || m.Signer.Key != alice.Public() {
		t.Fatalf("mandate: %+v", m)
	}
	if mandate.HoldIDFor("alice", "p1") == mandate.HoldIDFor("bob", "p1") {
		t.Fatal("hold ids of two users' requests with one id are the same")
	}
	// Without an id, the hold is the nonce's.
	spend.ID = ""
	s2, _ := mandate.Sign(alice, wire.BrokerSpend, spend)
	if m2, err := mandate.Read(*s2); err != nil || m2.RequestID != s2.Nonce || m2.Hold != mandate.HoldIDFor("alice", s2.Nonce) {
		t.Fatalf("mandate without an id: %+v %v", m2, err)
	}
	// A changed body or subject no longer checks (through the cache, a
	// known signature gives the terms it really signed, never the new body's).
	forged := *s
	forged.Body = []byte(`{"v":1,"id":"p1","user":"alice","budget_micro":500000,"duration":"1h","vms":["a1"],"strategy":"fair"}`)
	if _, err := mandate.Read(forged); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("forged body: %v", err)
	}
	if mc, err := cache.Read(&forged); err != nil || mc.Budget != 500 || !mc.VMs["a2"] {
		t.Fatalf("forged body through the cache: %+v %v", mc, err)
	}
	other := *s
	other.Subject = wire.BrokerCancel
	if _, err := mandate.Read(other); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("another subject: %v", err)
	}
	// A submit with a deadline: until a quarter of its window past it.
	dl := time.Now().Add(time.Hour).Truncate(time.Second)
	sub, _ := mandate.Sign(alice, wire.BrokerSubmit, &wire.SubmitRequest{ID: "j", User: "alice", Deadline: dl, MaxPrice: 70,
		Job: wire.JobSpec{Name: "etl", VMs: []string{"a1"}}})
	if ms, err := mandate.Read(*sub); err != nil || ms.Budget != 70 || !ms.MarketClock || ms.Until.Before(dl) || ms.Until.After(dl.Add(16*time.Minute+mandate.Grace)) {
		t.Fatalf("submit mandate: %+v %v", ms, err)
	}
}
