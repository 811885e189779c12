package natsutil_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
)

// TestConnectionsPerKey: a key that opens more connections than its limit
// keeps its oldest ones, the others are closed by the server; another key
// is not touched; a limit raised by a reload admits more.
func TestConnectionsPerKey(t *testing.T) {
	alice, bob := signer(t), signer(t)
	all := &server.SubjectPermission{Allow: []string{">"}}
	users := []*server.NkeyUser{
		{Nkey: alice.Public(), Permissions: &server.Permissions{Publish: all, Subscribe: all}},
		{Nkey: bob.Public(), Permissions: &server.Permissions{Publish: all, Subscribe: all}},
	}
	opts := natsutil.ServerOptions{Dir: t.TempDir(), Port: -1, Users: users, ConnLimits: map[string]int{alice.Public(): 2}}
	ns, err := natsutil.StartServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	dial := func(s *signing.Signer) *nats.Conn {
		t.Helper()
		nc, err := nats.Connect(ns.ClientURL(), nats.Nkey(s.Public(), s.SignNonce), nats.MaxReconnects(0))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	// The first two are within her limit. The limiter may close one
	// beyond it before its client has finished connecting, and the client
	// then sees EOF: refused at once is closed too (nil below).
	conns := []*nats.Conn{dial(alice), dial(alice)}
	for range 4 {
		nc, err := nats.Connect(ns.ClientURL(), nats.Nkey(alice.Public(), alice.SignNonce), nats.MaxReconnects(0))
		if err == nil {
			t.Cleanup(nc.Close)
		}
		conns = append(conns, nc)
	}
	others := []*nats.Conn{dial(bob), dial(bob), dial(bob)}
	testpoll.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if n := openOf(ns, alice.Public()); n != 2 {
			return fmt.Errorf("alice holds %d connections, want her limit 2", n)
		}
		return nil
	})
	if !conns[0].IsConnected() || !conns[1].IsConnected() {
		t.Fatalf("alice's first connections were closed: %v %v", conns[0].Status(), conns[1].Status())
	}
	for i, nc := range conns[2:] {
		testpoll.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
			if nc != nil && nc.IsConnected() {
				return fmt.Errorf("alice's connection %d over her limit is still open", i+3)
			}
			return nil
		})
	}
	for _, nc := range others {
		if !nc.IsConnected() {
			t.Fatal("bob, who has no limit, lost a connection")
		}
	}
	if got := natsutil.Closed(ns); got != 4 {
		t.Fatalf("Closed = %d, want 4", got)
	}

	opts.ConnLimits = map[string]int{alice.Public(): 3}
	if err := natsutil.Reload(ns, opts); err != nil {
		t.Fatal(err)
	}
	third := dial(alice)
	time.Sleep(300 * time.Millisecond) // a few of the limiter's rounds
	if !third.IsConnected() || openOf(ns, alice.Public()) != 3 {
		t.Fatalf("after raising alice's limit to 3: third %v, %d open", third.Status(), openOf(ns, alice.Public()))
	}
}

// openOf is how many connections key holds on ns.
func openOf(ns *server.Server, key string) int {
	cz, err := ns.Connz(&server.ConnzOptions{Username: true, User: key, Limit: 1 << 16})
	if err != nil {
		return -1
	}
	return len(cz.Conns)
}

func signer(t *testing.T) *signing.Signer {
	t.Helper()
	s, err := signing.NewUserSigner()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
