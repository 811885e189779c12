package natstest

import (
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/natsauth"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Secured is an embedded NATS as `mrmarket up` runs it: TLS with a CA of
// its own, and only NKey users with the permissions package natsauth
// generates from the service tables, for the principals Add registered —
// but with no limit on one principal's connections, which tests of
// permissions (a connection per refused subscription) would exceed.
type Secured struct {
	Server *server.Server
	URL    string
	// CAFile verifies the server (natsutil.ConnectOptions.CAFile).
	CAFile string
	// Keys holds the credentials of every principal Add made.
	Keys signing.CredsDir

	tables natsauth.Tables
	opts   natsutil.ServerOptions
	mu     sync.Mutex
	ps     []wire.Principal
}

// SecureServer starts a secured server on a free port of 127.0.0.1 that
// knows tables (bank.Endpoints(nil).List() and so on: natstest cannot
// import them) and, at first, only an admin (role admin, name "admin");
// it shuts down when t ends.
func SecureServer(t testing.TB, tables natsauth.Tables) *Secured {
	t.Helper()
	dir := t.TempDir()
	files, err := natsauth.EnsureTLS(filepath.Join(dir, "tls"))
	if err != nil {
		t.Fatal(err)
	}
	tlsConf, err := natsauth.ServerConfig(files)
	if err != nil {
		t.Fatal(err)
	}
	s := &Secured{CAFile: files.CA, Keys: signing.CredsDir(filepath.Join(dir, "creds")), tables: tables,
		opts: natsutil.ServerOptions{Dir: filepath.Join(dir, "nats"), Port: -1, TLS: tlsConf}}
	admin, err := s.Keys.Ensure(wire.RoleAdmin, "admin")
	if err != nil {
		t.Fatal(err)
	}
	s.ps = []wire.Principal{{Key: admin.Public(), Name: "admin", Role: wire.RoleAdmin}}
	s.opts.Users = natsauth.Users(tables, s.ps)
	ns, err := natsutil.StartServer(s.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	s.Server, s.URL = ns, ns.ClientURL()
	return s
}

// Add makes credentials for (role, name) in Keys, adds the principal to
// the server's users (a reload, no restart) and returns its signer.
func (s *Secured) Add(t testing.TB, role, name string) *signing.Signer {
	t.Helper()
	return s.AddMany(t, role, name)[0]
}

// AddMany is Add for several principals of one role, with one reload.
func (s *Secured) AddMany(t testing.TB, role string, names ...string) []*signing.Signer {
	t.Helper()
	signers := make([]*signing.Signer, len(names))
	ps := make([]wire.Principal, len(names))
	for i, name := range names {
		signer, err := s.Keys.Ensure(role, name)
		if err != nil {
			t.Fatal(err)
		}
		signers[i], ps[i] = signer, wire.Principal{Key: signer.Public(), Name: name, Role: role}
	}
	s.AddPrincipal(t, ps...)
	return signers
}

// AddPrincipal adds principals (whose keys may be anyone's) to the
// server's users, with one reload.
func (s *Secured) AddPrincipal(t testing.TB, ps ...wire.Principal) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ps = append(s.ps, ps...)
	s.opts.Users = natsauth.Users(s.tables, s.ps)
	if err := natsutil.Reload(s.Server, s.opts); err != nil {
		t.Fatal(err)
	}
}

// Remove drops the principals of keys from the server's users, with one
// reload: their connections are closed (a revocation).
func (s *Secured) Remove(t testing.TB, keys ...string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ps = slices.DeleteFunc(s.ps, func(p wire.Principal) bool { return slices.Contains(keys, p.Key) })
	s.opts.Users = natsauth.Users(s.tables, s.ps)
	if err := natsutil.Reload(s.Server, s.opts); err != nil {
		t.Fatal(err)
	}
}

// Signer is the signer of a principal Add made.
func (s *Secured) Signer(t testing.TB, role, name string) *signing.Signer {
	t.Helper()
	signer, err := s.Keys.Signer(role, name)
	if err != nil {
		t.Fatal(err)
	}
	return signer
}

// ConnectAs connects as signer over TLS (closed when t ends); an error
// (a refused connection) is returned, not fatal.
func (s *Secured) ConnectAs(t testing.TB, signer *signing.Signer) (*nats.Conn, error) {
	t.Helper()
	nc, err := natsutil.ConnectWith(s.URL, natsutil.ConnectOptions{Name: "test", Signer: signer, CAFile: s.CAFile})
	if err != nil {
		return nil, err
	}
	t.Cleanup(nc.Close)
	return nc, nil
}

// Connect connects as the principal Add made for (role, name); fatal if
// refused.
func (s *Secured) Connect(t testing.TB, role, name string) *nats.Conn {
	t.Helper()
	nc, err := s.ConnectAs(t, s.Signer(t, role, name))
	if err != nil {
		t.Fatal(err)
	}
	return nc
}
