package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/cli"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestPrincipalLifecycle: `bank principal` adds, lists, rotates and
// revokes. A second key for a name that has one is refused; a rotation
// writes the new key in place of the old, which the market then refuses,
// and the user's money stays hers; a revocation sets the key file aside;
// the anchor is never revoked.
func TestPrincipalLifecycle(t *testing.T) {
	m, _ := startMarket(t)
	n := "--nats=" + m.URL
	keys := m.Keys()
	if r := mrmarket("bank", "principal", "add", n, "--name", "carol"); r.code != 0 {
		t.Fatalf("principal add carol: %+v", r)
	}
	grant(t, n, "7", "carol")
	first, err := keys.Signer(wire.RoleUser, "carol")
	if err != nil {
		t.Fatal(err)
	}
	list := func(args ...string) wire.PrincipalsReply {
		t.Helper()
		r := mrmarket(append([]string{"bank", "principal", "list", n, "--json", "--name", "carol"}, args...)...)
		var rep wire.PrincipalsReply
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil {
			t.Fatalf("principal list: %+v", r)
		}
		return rep
	}
	if rep := list(); len(rep.Principals) != 1 || rep.Principals[0].Key != first.Public() || rep.Principals[0].Revoked != nil {
		t.Fatalf("carol listed: %+v", rep)
	}

	// Another key for carol: refused, whoever holds it.
	other, _ := signing.NewUserSigner()
	path := keys.Path(wire.RoleUser, "carol")
	if err := os.Rename(path, path+".mine"); err != nil {
		t.Fatal(err)
	}
	if err := signing.SaveSigner(path, other); err != nil {
		t.Fatal(err)
	}
	if r := mrmarket("bank", "principal", "add", n, "--name", "carol"); r.code != cli.ExitRefused || !strings.Contains(r.stderr, "rotate") {
		t.Fatalf("a second key for carol: %+v", r)
	}
	if err := os.Rename(path+".mine", path); err != nil {
		t.Fatal(err)
	}

	r := mrmarket("bank", "principal", "rotate", n, "--name", "carol")
	if r.code != 0 {
		t.Fatalf("principal rotate carol: %+v", r)
	}
	rotated, err := keys.Signer(wire.RoleUser, "carol")
	if err != nil || rotated.Public() == first.Public() || !strings.Contains(r.stdout, rotated.Public()) {
		t.Fatalf("carol's credentials after the rotation: %v %v\n%s", rotated, err, r.stdout)
	}
	byKey := map[string]wire.PrincipalInfo{}
	for _, p := range list().Principals {
		byKey[p.Key] = p
	}
	if old := byKey[first.Public()]; old.Revoked == nil || old.ReplacedBy != rotated.Public() || byKey[rotated.Public()].Revoked != nil {
		t.Fatalf("carol's keys after the rotation: %+v", byKey)
	}
	if rep := list("--live"); len(rep.Principals) != 1 || rep.Principals[0].Key != rotated.Public() {
		t.Fatalf("carol's live keys: %+v", rep)
	}
	if r := mrmarket("balance", n, "--user", "carol"); r.code != 0 || !strings.Contains(r.stdout, "7") {
		t.Fatalf("carol's balance with her new key: %+v", r)
	}
	if _, err := natsutil.ConnectWith(m.URL, natsutil.ConnectOptions{Signer: first, CAFile: m.CAFile, Timeout: time.Second}); err == nil {
		t.Fatal("carol's old key still connects")
	}

	r = mrmarket("bank", "principal", "revoke", n, "--name", "carol")
	if r.code != 0 || !strings.Contains(r.stdout, rotated.Public()+" revoked") {
		t.Fatalf("principal revoke carol: %+v", r)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("carol's revoked key file is still in place: %v", err)
	}
	if set, err := signing.LoadSigner(path + ".revoked"); err != nil || set.Public() != rotated.Public() {
		t.Fatalf("carol's revoked key set aside: %v", err)
	}
	if rep := list("--live"); len(rep.Principals) != 0 {
		t.Fatalf("carol's live keys after the revocation: %+v", rep)
	}
	if r := mrmarket("bank", "principal", "revoke", n, "--name", "admin", "--role", "admin"); r.code != cli.ExitRefused {
		t.Fatalf("the anchor revoked: %+v", r)
	}
	if r := mrmarket("bank", "principal", "rotate", n, "--name", "nobody"); r.code != cli.ExitRefused {
		t.Fatalf("rotating nobody: %+v", r)
	}
	// Carol's name is free again: a new key, her old account.
	if r := mrmarket("bank", "principal", "add", n, "--name", "carol"); r.code != 0 {
		t.Fatalf("carol added again: %+v", r)
	}
	if r := mrmarket("balance", n, "--user", "carol"); r.code != 0 || !strings.Contains(r.stdout, "7") {
		t.Fatalf("carol's balance under her third key: %+v", r)
	}
}

// TestNATSFollowDropsRevokedKeys: `nats serve` following the registry
// closes a revoked key's connection within its --follow period and
// refuses the key's reconnects, though the key's credentials file is
// still in the data directory; `nats config` leaves the key out.
func TestNATSFollowDropsRevokedKeys(t *testing.T) {
	data := t.TempDir()
	keys := signing.CredsDir(filepath.Join(data, "creds"))
	b, err := bank.Open(filepath.Join(data, "bank.db"), bank.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	register := func(role, name string) *signing.Signer {
		s, err := keys.Ensure(role, name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.AddPrincipal(ctx, &wire.PrincipalRequest{Key: s.Public(), Name: name, Role: role}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	register(wire.RoleAdmin, "admin")
	alice := register(wire.RoleUser, "alice")
	bobKey := register(wire.RoleUser, "bob")

	listen := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	const follow = 100 * time.Millisecond
	startDaemon(t, "mrmarket nats serve: node", "nats", "serve", "--data", data, "--listen", listen, "--follow", follow.String(), "--quiet")
	ca := filepath.Join(data, "tls", "ca.pem")
	connect := func(s *signing.Signer) (*nats.Conn, error) {
		return natsutil.ConnectWith("tls://"+listen, natsutil.ConnectOptions{Signer: s, CAFile: ca, Timeout: time.Second})
	}
	held, err := connect(alice)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	held.SetErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}) // the refusals are expected
	bob, err := connect(bobKey)
	if err != nil {
		t.Fatal(err)
	}
	defer bob.Close()

	revoked := time.Now()
	if _, err := b.RevokePrincipal(ctx, &wire.RevokeRequest{Key: alice.Public(), Name: "alice", Role: wire.RoleUser}); err != nil {
		t.Fatal(err)
	}
	testpoll.CheckFor(t, 10*follow+time.Second, 10*time.Millisecond, func() error {
		if held.IsConnected() {
			return fmt.Errorf("alice's connection still open %s after her revocation", time.Since(revoked))
		}
		return nil
	})
	t.Logf("alice's connection closed %s after her revocation (--follow %s)", time.Since(revoked).Round(time.Millisecond), follow)
	time.Sleep(time.Second) // nats.go tries to reconnect meanwhile
	if held.IsConnected() {
		t.Fatal("alice reconnected")
	}
	if _, err := connect(alice); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("alice connecting anew: %v", err)
	}
	if !bob.IsConnected() {
		t.Fatalf("bob's connection: %s", bob.Status())
	}
	r := mrmarket("nats", "config", "--data", data)
	if r.code != 0 || strings.Contains(r.stdout, alice.Public()) || !strings.Contains(r.stdout, "user bob") {
		t.Fatalf("nats config after alice's revocation: %+v", r)
	}
}
