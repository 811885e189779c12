package service_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// answers is a registry that says whatever the test wants.
type answers map[string]wire.Principal

func (a answers) Whois(_ context.Context, key string) (wire.Principal, error) {
	p, ok := a[key]
	if !ok {
		return p, signing.ErrUnknownKey
	}
	return p, nil
}

func newKey(t *testing.T) *signing.Signer {
	t.Helper()
	s, err := signing.NewUserSigner()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCertifiedBelievesOnlyTheAdminsRecords: an answer counts only with the
// anchor's record of the asked key saying what the answer says, and not
// with a record older than one seen before.
func TestCertifiedBelievesOnlyTheAdminsRecords(t *testing.T) {
	ctx := context.Background()
	admin, alice, mallory := newKey(t), newKey(t), newKey(t)
	clock := time.Now()
	admin.Now = func() time.Time { return clock }
	oldAdmin := signing.SealPrincipal(admin, alice.Public(), "alice", wire.RoleAdmin)
	clock = clock.Add(time.Second)
	user := signing.SealPrincipal(admin, alice.Public(), "alice", wire.RoleUser)
	reg := answers{}
	var refused []string
	ids := service.Certified(reg, admin.Public(), func(key string, _ error) { refused = append(refused, key) })

	if p, err := ids.Whois(ctx, admin.Public()); err != nil || p.Role != wire.RoleAdmin {
		t.Fatalf("the anchor: %+v %v", p, err)
	}
	for name, p := range map[string]wire.Principal{
		"no record":                   {Key: mallory.Public(), Name: "mallory", Role: wire.RoleAdmin},
		"self-sealed":                 {Key: mallory.Public(), Name: "mallory", Role: wire.RoleAdmin, Cert: signing.SealPrincipal(mallory, mallory.Public(), "mallory", wire.RoleAdmin)},
		"another key's record":        {Key: mallory.Public(), Name: "alice", Role: wire.RoleUser, Cert: user},
		"a user's record, said admin": {Key: alice.Public(), Name: "alice", Role: wire.RoleAdmin, Cert: user},
	} {
		reg[p.Key] = p
		if _, err := ids.Whois(ctx, p.Key); !errors.Is(err, signing.ErrUnknownKey) {
			t.Errorf("%s: %v, want an unknown key", name, err)
		}
	}
	if len(refused) != 4 {
		t.Fatalf("refusals heard: %d, want 4", len(refused))
	}
	reg[alice.Public()] = wire.Principal{Key: alice.Public(), Name: "alice", Role: wire.RoleUser, Cert: user}
	if p, err := ids.Whois(ctx, alice.Public()); err != nil || p.Role != wire.RoleUser {
		t.Fatalf("alice's record: %+v %v", p, err)
	}
	// alice was an admin once: that record, replayed, no longer counts.
	reg[alice.Public()] = wire.Principal{Key: alice.Public(), Name: "alice", Role: wire.RoleAdmin, Cert: oldAdmin}
	if _, err := ids.Whois(ctx, alice.Public()); !errors.Is(err, signing.ErrUnknownKey) {
		t.Fatalf("an older record replayed: %v", err)
	}
	// Without an anchor the registry is taken as it is.
	if service.Certified(reg, "", nil) == nil || service.Certified(nil, admin.Public(), nil) != nil {
		t.Fatal("Certified without an anchor or a registry")
	}
}
