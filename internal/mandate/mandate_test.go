package mandate_test

import (
	"errors"
	"fmt"
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
	if m2, err := mandate.Read(*s2); err != nil || m2.RequestID != mandate.NonceID(s2.Nonce) || m2.Hold != mandate.HoldIDFor("alice", mandate.NonceID(s2.Nonce)) {
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

// TestAdjustmentMandate: a signed spend --more allows adding More to its
// plan, and funds no hold of its own.
func TestAdjustmentMandate(t *testing.T) {
	alice, err := signing.NewUserSigner()
	if err != nil {
		t.Fatal(err)
	}
	s, err := mandate.Sign(alice, wire.BrokerAdjust, &wire.AdjustRequest{Plan: "p1", User: "alice", ID: "m1", More: 300})
	if err != nil {
		t.Fatal(err)
	}
	m, err := mandate.Read(*s)
	if err != nil || m.Plan != "p1" || m.Budget != 300 || m.RequestID != "m1" || m.Hold != "" || m.VMs != nil || !m.Until.IsZero() {
		t.Fatalf("adjustment: %+v %v", m, err)
	}
	// A best-effort submit may be charged for at most a year.
	sub, err := mandate.Sign(alice, wire.BrokerSubmit, &wire.SubmitRequest{ID: "j", User: "alice", BestEffort: true, Budget: 50,
		Job: wire.JobSpec{Name: "etl", VMs: []string{"a1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := mandate.Read(*sub); err != nil || m.Budget != 50 || m.MarketClock || m.Until.Sub(m.Signer.Time) != wire.MaxDuration {
		t.Fatalf("best-effort submit: %+v %v", m, err)
	}
	// A body that does not decode allows nothing.
	bad := *s
	bad.Body = []byte(`{"more_micro":"lots"}`)
	if _, err := mandate.Read(bad); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("undecodable body: %v", err)
	}
}

// TestSignedBy: the user whose money a mandate spends may sign it, and an
// admin; another user may not.
func TestSignedBy(t *testing.T) {
	m := mandate.Mandate{User: "alice"}
	for _, c := range []struct {
		p  wire.Principal
		ok bool
	}{
		{wire.Principal{Name: "alice", Role: wire.RoleUser}, true},
		{wire.Principal{Name: "root", Role: wire.RoleAdmin}, true},
		{wire.Principal{Name: "bob", Role: wire.RoleUser}, false},
		{wire.Principal{Name: "alice", Role: wire.RoleBroker}, false},
		{wire.Principal{Name: "alice", Role: wire.RoleAgent}, false},
	} {
		err := m.SignedBy(c.p)
		if c.ok != (err == nil) || err != nil && !errors.Is(err, mandate.ErrNotAllowed) {
			t.Errorf("%s (%s): %v", c.p.Name, c.p.Role, err)
		}
	}
}

// TestCacheStartsOverWhenFull: the cache holds at most Size mandates and
// still reads every one, and remembers nothing it refused.
func TestCacheStartsOverWhenFull(t *testing.T) {
	alice, err := signing.NewUserSigner()
	if err != nil {
		t.Fatal(err)
	}
	cache := mandate.Cache{Size: 2}
	for i := range 5 {
		s, err := mandate.Sign(alice, wire.BrokerSpend, &wire.SpendRequest{ID: fmt.Sprintf("p%d", i), User: "alice", Budget: 10,
			Duration: wire.Duration(time.Hour), VMs: []string{"a1"}, Strategy: wire.StrategyFair})
		if err != nil {
			t.Fatal(err)
		}
		if m, err := cache.Read(s); err != nil || m.RequestID != fmt.Sprintf("p%d", i) {
			t.Fatalf("mandate %d: %+v %v", i, m, err)
		}
	}
	unsigned := &wire.SignedRequest{Subject: wire.BrokerSpend, Body: []byte(`{}`)}
	for range 2 {
		if _, err := cache.Read(unsigned); !errors.Is(err, signing.ErrUnsigned) {
			t.Fatalf("unsigned: %v", err)
		}
	}
}

// TestNonceIDIsAnID: a request without an id is named after its nonce,
// and the name is a valid id whatever the nonce's first character (a
// spend without --id failed "invalid plan id" one time in 32). Mutation:
// using the nonce as it is fails the first two.
func TestNonceIDIsAnID(t *testing.T) {
	for nonce, want := range map[string]string{
		"_y--QP1KeefxXp7whmoO1w": "n_y--QP1KeefxXp7whmoO1w",
		"-abcdefghijklmnopqrstu": "n-abcdefghijklmnopqrstu",
		"Qy--QP1KeefxXp7whmoO1w": "Qy--QP1KeefxXp7whmoO1w",
	} {
		got := mandate.NonceID(nonce)
		if got != want || wire.CheckID("plan id", got) != nil {
			t.Errorf("NonceID(%q) = %q, want %q, a valid id", nonce, got, want)
		}
	}
	// A signed spend whose nonce starts with '-' or '_' (about one in 32:
	// signed until one does) reads as a mandate whose id is valid.
	alice, err := signing.NewUserSigner()
	if err != nil {
		t.Fatal(err)
	}
	spend := &wire.SpendRequest{User: "alice", Budget: 500, Duration: wire.Duration(time.Hour), VMs: []string{"a1"}, Strategy: wire.StrategyFair}
	for range 5000 {
		s, err := mandate.Sign(alice, wire.BrokerSpend, spend)
		if err != nil {
			t.Fatal(err)
		}
		if s.Nonce[0] != '-' && s.Nonce[0] != '_' {
			continue
		}
		m, err := mandate.Read(*s)
		if err != nil || wire.CheckID("plan id", m.RequestID) != nil {
			t.Fatalf("nonce %q: request id %q (%v)", s.Nonce, m.RequestID, err)
		}
		return
	}
	t.Fatal("no nonce started with '-' or '_' in 5000 signatures")
}
