// Package natstest is the tests' embedded NATS: one server per test or
// benchmark (natsutil.StartServer on a free port, JetStream in the test's
// temporary directory), client connections to it, and optionally the shared
// JetStream assets. Everything it starts is stopped by the test's cleanup,
// connections before the server, so a test declares what it needs in one
// line and never writes the shutdown itself.
//
// Server and Start run an open server (no authentication, no TLS) for
// tests that are not about the transport; SecureServer runs one as
// `mrmarket up` does (TLS with its own CA, only NKey users with the
// permissions package natsauth generates), for tests of the transport's
// security and attack tests.
//
// Bid sends an agent one bid change as a broker does.
//
// Waiting for something to happen over NATS is package testpoll's.
package natstest

import (
	"context"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/natsutil"
)

// Server starts an embedded NATS server with JetStream on a free port of
// 127.0.0.1; it shuts down when t ends.
func Server(t testing.TB) *server.Server {
	t.Helper()
	ns, err := natsutil.StartServer(natsutil.ServerOptions{Dir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	return ns
}

// Connect connects a plain client (nats.go's defaults) to ns; it closes when
// t ends, before ns shuts down.
func Connect(t testing.TB, ns *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Start is Server and one Connect: the common case.
func Start(t testing.TB) (*server.Server, *nats.Conn) {
	t.Helper()
	ns := Server(t)
	return ns, Connect(t, ns)
}

// Assets creates (or opens) the JetStream assets the components share
// (natsutil.EnsureAssets) through nc.
func Assets(t testing.TB, nc *nats.Conn) *natsutil.Assets {
	t.Helper()
	assets, err := natsutil.EnsureAssets(context.Background(), nc)
	if err != nil {
		t.Fatal(err)
	}
	return assets
}
