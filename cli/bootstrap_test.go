package cli_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// The deploy bootstrap needs no expected failure: `bank serve --init` makes
// the store, registers the admin and the bank, and exits 0 with no NATS.
func TestBankServeInitBootstraps(t *testing.T) {
	dir := t.TempDir()
	keys := signing.CredsDir(filepath.Join(dir, "creds"))
	admin, err := keys.Ensure(wire.RoleAdmin, "admin")
	if err != nil {
		t.Fatal(err)
	}
	store := "sqlite:" + filepath.Join(dir, "bank.db")
	r := mrmarket("bank", "serve", "--init", "--store", store, "--creds", string(keys), "--nats", "nats://127.0.0.1:1")
	if r.code != 0 || !strings.Contains(r.stdout, "ready") {
		t.Fatalf("bank serve --init: %+v", r)
	}
	b, err := bank.Open(store, bank.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	self, err := keys.Signer(wire.RoleBank, "bank")
	if err != nil {
		t.Fatal(err)
	}
	for key, role := range map[string]string{admin.Public(): wire.RoleAdmin, self.Public(): wire.RoleBank} {
		if p, err := b.Whois(context.Background(), key); err != nil || p.Role != role {
			t.Errorf("%s: %+v, %v; want registered as %s", key, p, err, role)
		}
	}
}
