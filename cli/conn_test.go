package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mrmarket/mrmarket/cli"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

// TestCommandsConnectAsTheirPrincipal: a user's machine holds only the
// user's key: user commands connect with it over TLS (the CA found next to
// the credentials by --tls-ca), admin commands have no key to connect with,
// and without the CA the server cannot be verified — each missing piece of
// the local setup is bad input (exit 2), said as such.
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
	if r := mrmarket("balance", n, "--user", "alice"); r.code != cli.ExitBadInput || !strings.Contains(r.stderr, "--tls-ca") {
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
	if r := mrmarket("bank", "grant", n, "--user", "alice", "--amount", "10"); r.code != cli.ExitBadInput || !strings.Contains(r.stderr, "admin") {
		t.Fatalf("grant without the admin's key: %+v", r)
	}
	if r := mrmarket("balance", n, "--user", "bob"); r.code != cli.ExitBadInput || !strings.Contains(r.stderr, "no credentials") {
		t.Fatalf("bob's balance without bob's key: %+v", r)
	}
}

// TestLocalSetupMistakes: a CA file that is not there, holds no
// certificate, or is another market's, and a credentials directory that is
// not there, are each said as what is wrong on this machine (exit 2) while
// the market is up — not "unavailable … start one", not "forbidden".
func TestLocalSetupMistakes(t *testing.T) {
	m, _ := startMarket(t)
	n := "--nats=" + m.URL
	junk := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(junk, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	other, err := market.Start(t.Context(), market.Config{Dir: t.TempDir(), NATSPort: -1, Hosts: []market.HostSpec{{ID: "host-1", CPUs: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	other.Close()
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--tls-ca", filepath.Join(t.TempDir(), "none.pem"), "vms", n}, "cannot be read"},
		{[]string{"--tls-ca", junk, "vms", n}, "holds no PEM certificate"},
		{[]string{"--tls-ca", other.CAFile, "vms", n}, "does not verify"},
		{[]string{"vms", n, "--creds", filepath.Join(t.TempDir(), "none")}, "does not exist"},
		{[]string{"balance", n, "--user", "mallory"}, "no credentials for user mallory"},
	} {
		r := mrmarket(c.args...)
		if r.code != cli.ExitBadInput || !strings.Contains(r.stderr, c.says) || strings.Contains(r.stderr, "mrmarket up`, or set") || strings.Contains(r.stderr, "forbidden") {
			t.Errorf("%v: %+v, want exit 2 saying %q", c.args, r, c.says)
		}
	}
	if r := mrmarket("vms", "--nats=nats://127.0.0.1:1"); r.code != cli.ExitUnavailable || !strings.Contains(r.stderr, "cannot reach the market") {
		t.Errorf("no market: %+v", r)
	}
}
