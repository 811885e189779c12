package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mrmarket/mrmarket/cli"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestCommandsConnectAsTheirPrincipal: a user's machine holds only the
// user's key: user commands connect with it over TLS (the CA found next to
// the credentials by --tls-ca), admin commands have no key to connect with,
// and without the CA the server cannot be verified.
func TestCommandsConnectAsTheirPrincipal(t *testing.T) {
	m, _ := startMarket(t)
	n := "--nats=" + m.URL
	if r := mrmarket("bank", "grant", n, "--user", "alice", "--amount", "10"); r.code != 0 {
		t.Fatalf("admin grants: %+v", r)
	}
	home := t.TempDir()
	mine := signing.CredsDir(filepath.Join(home, "creds"))
	seed, err := os.ReadFile(m.Keys().Path(wire.RoleUser, "alice"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(mine.Path(wire.RoleUser, "alice")), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mine.Path(wire.RoleUser, "alice"), seed, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MRM_CREDS", string(mine))
	if r := mrmarket("balance", n, "--user", "alice"); r.code != cli.ExitUnavailable || !strings.Contains(r.stderr, "TLS") {
		t.Fatalf("without the CA: %+v", r)
	}
	ca := "--tls-ca=" + m.CAFile
	if r := mrmarket(ca, "balance", n, "--user", "alice"); r.code != 0 || !strings.Contains(r.stdout, "10") {
		t.Fatalf("alice's balance on her own key: %+v", r)
	}
	t.Setenv("MRM_TLS_CA", m.CAFile)
	if r := mrmarket("price", n); r.code != 0 {
		t.Fatalf("price with alice's only key: %+v", r)
	}
	if r := mrmarket("bank", "grant", n, "--user", "alice", "--amount", "10"); r.code != cli.ExitRefused || !strings.Contains(r.stderr, "admin") {
		t.Fatalf("grant without the admin's key: %+v", r)
	}
	if r := mrmarket("balance", n, "--user", "bob"); r.code != cli.ExitRefused {
		t.Fatalf("bob's balance without bob's key: %+v", r)
	}
}
