package bank

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestOwnRecordOutlivesAnOutage: the record the bank attaches to its
// replies is its registered one; while its store cannot be read (the
// principal cache dropped, the database failing over) the record last
// found is still attached, so clients believe its "unavailable, retry";
// once its key is known revoked, none is. Mutation: dropping the record
// when the store fails (the bank before) leaves the second check nil.
func TestOwnRecordOutlivesAnOutage(t *testing.T) {
	admin, err := signing.NewUserSigner()
	if err != nil {
		t.Fatal(err)
	}
	self, err := signing.NewUserSigner()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open("sqlite:"+filepath.Join(t.TempDir(), "bank.db"), Options{AdminKey: admin.Public(), Signer: self})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rec := signing.SealPrincipal(admin, self.Public(), "bank-1", wire.RoleBank)
	if _, err := b.AddPrincipal(context.Background(), &wire.PrincipalRequest{Key: self.Public(), Name: "bank-1", Role: wire.RoleBank, Cert: rec}); err != nil {
		t.Fatal(err)
	}
	if got := b.ownCert(); got == nil || got.Sig != rec.Sig {
		t.Fatalf("registered: record %+v, want the admin's", got)
	}

	b.forgetAll() // as after missed notices, or the cache's TTL
	if err := b.st.db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Whois(context.Background(), self.Public()); !IsUnavailable(err) {
		t.Fatalf("the store is closed, yet whois answered %v", err)
	}
	b.ownMiss.Store(0)
	if got := b.ownCert(); got == nil || got.Sig != rec.Sig {
		t.Errorf("store unavailable: record %+v, want the one last found", got)
	}

	b.remember(wire.Principal{Key: self.Public(), Name: "bank-1", Role: wire.RoleBank, Cert: rec}, true) // a revocation notice
	if got := b.ownCert(); got != nil {
		t.Errorf("revoked: record %+v attached", got)
	}
}
