package signing_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestCredsDir: credentials are where `mrmarket up` writes them, readable
// by their owner only, and load as the same key; a missing one is
// forbidden, and the anchor is admin.pub, else admin.nk's key.
func TestCredsDir(t *testing.T) {
	dir := signing.CredsDir(t.TempDir())
	for _, c := range []struct{ role, name, path string }{
		{wire.RoleAdmin, "admin", "admin.nk"}, {wire.RoleBank, "bank", "bank.nk"}, {wire.RoleBroker, "b", "broker.nk"},
		{wire.RoleAgent, "host-1", "agents/host-1.nk"}, {wire.RoleUser, "alice", "users/alice.nk"},
	} {
		if got := dir.Path(c.role, c.name); got != filepath.Join(string(dir), c.path) {
			t.Errorf("%s %s: %s", c.role, c.name, got)
		}
	}
	if _, err := dir.Signer(wire.RoleUser, "alice"); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("missing credentials: %v", err)
	}
	if k, err := dir.AdminKey(); err != nil || k != "" {
		t.Fatalf("no anchor yet: %q %v", k, err)
	}
	alice, err := dir.Ensure(wire.RoleUser, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir.Path(wire.RoleUser, "alice")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file: %v %v", st.Mode(), err)
	}
	again, err := dir.Ensure(wire.RoleUser, "alice")
	if err != nil || again.Public() != alice.Public() {
		t.Fatalf("ensured twice: %v", err)
	}
	if s, err := signing.SignerFor(nil, dir, wire.RoleUser, "alice"); err != nil || s.Public() != alice.Public() {
		t.Fatalf("from the keyring: %v", err)
	}
	fixed := signer(t)
	if s, err := signing.SignerFor(fixed, dir, wire.RoleUser, "alice"); err != nil || s != fixed {
		t.Fatalf("a fixed signer first: %v", err)
	}
	if s, err := signing.SignerFor(nil, nil, wire.RoleUser, "alice"); err != nil || s != nil {
		t.Fatalf("no keyring: unsigned: %v %v", s, err)
	}
	admin, err := dir.Ensure(wire.RoleAdmin, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if k, err := dir.AdminKey(); err != nil || k != admin.Public() {
		t.Fatalf("the anchor from admin.nk: %q %v", k, err)
	}
	other := signer(t)
	if err := dir.WriteAdminKey(other); err != nil {
		t.Fatal(err)
	}
	if k, err := dir.AdminKey(); err != nil || k != other.Public() {
		t.Fatalf("admin.pub goes first: %q %v", k, err)
	}
	if err := os.WriteFile(filepath.Join(string(dir), signing.AdminPubFile), []byte("not a key\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := dir.AdminKey(); err == nil {
		t.Fatal("a broken admin.pub taken")
	}
}
