package natsauth_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/natsauth"
	"github.com/mrmarket/mrmarket/internal/natsutil"
)

// TestConfigWithoutPrincipalsIsClosed: a configuration written before any
// principal exists (a node started before the bank) admits nobody:
// nats-server would run an empty users list as an open server.
func TestConfigWithoutPrincipalsIsClosed(t *testing.T) {
	var b bytes.Buffer
	err := natsauth.Config(&b, natsauth.ConfigOptions{Listen: "127.0.0.1:-1", StoreDir: t.TempDir(),
		MaxPayload: natsutil.DefaultLimits.MaxPayload, MaxPending: natsutil.DefaultLimits.MaxPending,
		MaxSubs: natsutil.DefaultLimits.MaxSubs, MaxConn: natsutil.DefaultLimits.MaxConn})
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(conf, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	o.NoSigs, o.NoLog = true, true
	ns, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10e9) {
		t.Fatal("server did not start")
	}
	t.Cleanup(ns.Shutdown)
	nc, err := nats.Connect(ns.ClientURL())
	if err == nil {
		nc.Close()
		t.Fatal("an anonymous client connected to a server with no principal")
	}
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("anonymous connect: %v, want an authorization error", err)
	}
}

// TestRouteCert: the certificates EnsureTLS issues authenticate routes
// (clientAuth), which nats-server verifies both ways.
func TestRouteCert(t *testing.T) {
	files, err := natsauth.EnsureTLS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := natsauth.CheckRouteCert(files); err != nil {
		t.Fatal(err)
	}
}
