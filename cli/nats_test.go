package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestNATSConfig: `mrmarket nats config` prints a configuration a
// nats-server parses (here the embedded server's parser), with TLS, the
// limits and one NKey user per principal; a principal added later appears
// once it is regenerated, and the server started from it admits it.
func TestNATSConfig(t *testing.T) {
	data := t.TempDir()
	keys := signing.CredsDir(filepath.Join(data, "creds"))
	b, err := bank.Open(filepath.Join(data, "bank.db"), bank.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	register := func(role, name string) *signing.Signer {
		s, err := keys.Ensure(role, name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.AddPrincipal(context.Background(), &wire.PrincipalRequest{Key: s.Public(), Name: name, Role: role}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	admin := register(wire.RoleAdmin, "admin")
	alice := register(wire.RoleUser, "alice")
	agent := register(wire.RoleAgent, "host-1")

	conf := filepath.Join(data, "nats.conf")
	parse := func() *server.Options {
		t.Helper()
		r := mrmarket("nats", "config", "--data", data, "--listen", "127.0.0.1:-1", "--out", conf)
		if r.code != 0 {
			t.Fatalf("nats config: %+v", r)
		}
		o, err := server.ProcessConfigFile(conf)
		if err != nil {
			text, _ := os.ReadFile(conf)
			t.Fatalf("the server does not parse the configuration: %v\n%s", err, text)
		}
		return o
	}
	o := parse()
	if o.TLSConfig == nil || o.MaxPayload != natsutil.DefaultLimits.MaxPayload || o.MaxSubs != natsutil.DefaultLimits.MaxSubs || !o.JetStream {
		t.Fatalf("TLS %v, max payload %d, max subs %d, JetStream %v", o.TLSConfig != nil, o.MaxPayload, o.MaxSubs, o.JetStream)
	}
	users := map[string]*server.NkeyUser{}
	for _, u := range o.Nkeys {
		users[u.Nkey] = u
	}
	if len(users) != 3 || users[admin.Public()] == nil || users[alice.Public()] == nil || users[agent.Public()] == nil {
		t.Fatalf("users: %v", o.Nkeys)
	}
	ap := users[agent.Public()].Permissions
	if ap == nil || ap.Response == nil || !contains(ap.Publish.Allow, wire.HostStateSubject("host-1")) || contains(ap.Publish.Allow, wire.AllHostStates) {
		t.Fatalf("host-1's permissions: %+v", ap)
	}
	up := users[alice.Public()].Permissions
	if !contains(up.Subscribe.Allow, wire.InboxPrefix(alice.Public())+".>") || len(up.Subscribe.Allow) != 1 {
		t.Fatalf("alice subscribes to %v", up.Subscribe.Allow)
	}
	for _, s := range up.Publish.Allow {
		if strings.HasPrefix(s, "$JS") || strings.HasPrefix(s, "$KV") || s == ">" {
			t.Fatalf("alice may publish on %s", s)
		}
	}

	carol := register(wire.RoleUser, "carol")
	o = parse()
	found := false
	for _, u := range o.Nkeys {
		found = found || u.Nkey == carol.Public()
	}
	if !found {
		t.Fatal("carol, added after the first configuration, is not in the regenerated one")
	}

	// A server run from the file admits carol and nobody unknown.
	o.Port, o.NoLog, o.NoSigs = -1, true, true
	o.StoreDir = t.TempDir()
	ns, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10e9) {
		t.Fatal("nats-server from the configuration did not start")
	}
	defer ns.Shutdown()
	ca := filepath.Join(data, "tls", "ca.pem")
	nc, err := natsutil.ConnectWith(ns.ClientURL(), natsutil.ConnectOptions{Signer: carol, CAFile: ca})
	if err != nil {
		t.Fatalf("carol connects: %v", err)
	}
	nc.Close()
	stranger, _ := signing.NewUserSigner()
	if nc, err := natsutil.ConnectWith(ns.ClientURL(), natsutil.ConnectOptions{Signer: stranger, CAFile: ca}); err == nil {
		nc.Close()
		t.Fatal("an unknown key connected")
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
