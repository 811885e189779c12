package cli_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/natsauth"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestNATSAssetsAndConnectionLimits: on a `mrmarket nats serve` node, the
// broker's key cannot create the plans bucket and `mrmarket nats assets`
// with it is refused; with the admin's it creates every stream and bucket.
// The node holds a user's key to its role's connection limit.
func TestNATSAssetsAndConnectionLimits(t *testing.T) {
	data := t.TempDir()
	keys := signing.CredsDir(filepath.Join(data, "creds"))
	b, err := bank.Open(filepath.Join(data, "bank.db"), bank.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range [][2]string{{wire.RoleAdmin, "admin"}, {wire.RoleBroker, "broker"}, {wire.RoleUser, "alice"}} {
		s, err := keys.Ensure(p[0], p[1])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.AddPrincipal(context.Background(), &wire.PrincipalRequest{Key: s.Public(), Name: p[1], Role: p[0]}); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	listen := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	startDaemon(t, "mrmarket nats serve: node", "nats", "serve", "--data", data, "--listen", listen, "--quiet", "--follow", "100ms")
	url, ca := "tls://"+listen, filepath.Join(data, "tls", "ca.pem")

	brokerOnly := signing.CredsDir(t.TempDir()) // the broker's host: broker.nk and nothing else
	bk, err := keys.Signer(wire.RoleBroker, "broker")
	if err != nil {
		t.Fatal(err)
	}
	if err := signing.SaveSigner(signing.CredsPath(string(brokerOnly), "broker"), bk); err != nil {
		t.Fatal(err)
	}
	if r := mrmarket("nats", "assets", "--nats", url, "--creds", string(brokerOnly), "--tls-ca", ca); r.code == 0 {
		t.Fatalf("nats assets without the admin's key: %+v", r)
	}
	nc, err := natsutil.ConnectWith(url, natsutil.ConnectOptions{Signer: bk, CAFile: ca})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := natsutil.EnsureAssets(ctx, nc); err == nil {
		t.Fatal("the broker's key created the buckets")
	}

	r := mrmarket("nats", "assets", "--nats", url, "--creds", string(keys), "--tls-ca", ca)
	if r.code != 0 || !strings.Contains(r.stdout, "MRM_EVENTS R1, MRM_HOSTS R1, MRM_NONCES R1, MRM_PLANS R1") {
		t.Fatalf("nats assets: %+v", r)
	}
	if _, err := natsutil.OpenBrokerAssets(context.Background(), nc, 5*time.Second); err != nil {
		t.Fatalf("the broker opens what the admin made: %v", err)
	}

	alice, err := keys.Signer(wire.RoleUser, "alice")
	if err != nil {
		t.Fatal(err)
	}
	limit := natsauth.MaxConnections[wire.RoleUser]
	var conns []*nats.Conn
	for range limit + 5 {
		c, err := nats.Connect(url, nats.Nkey(alice.Public(), alice.SignNonce), nats.RootCAs(ca), nats.MaxReconnects(0))
		if err != nil {
			continue // closed as it connected: fine
		}
		defer c.Close()
		conns = append(conns, c)
	}
	testpoll.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		open := 0
		for _, c := range conns {
			if !c.IsClosed() {
				open++
			}
		}
		if open > limit {
			return fmt.Errorf("alice holds %d connections to the node, her limit is %d", open, limit)
		}
		return nil
	})
}
