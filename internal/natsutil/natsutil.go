// Package natsutil starts mrmarket's embedded NATS server (with the NKey
// users and TLS of package natsauth, reloaded when principals change),
// runs a node of a NATS cluster from the configuration `mrmarket nats
// config` generates (node.go: `mrmarket nats serve`), connects components
// as their principals (ConnectWith; several URLs, comma-separated, for a
// cluster), and creates the JetStream assets the components share (the
// MRM_HOSTS, MRM_PLANS and MRM_NONCES KV buckets and the MRM_EVENTS
// stream) with replicas from the cluster's size (replicas.go: R3 on a
// cluster, R1 on one server, an override). Production points every
// component at an external NATS cluster instead; nothing else in the code
// assumes an embedded server or a single one.
package natsutil

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// ServerOptions configures the embedded server.
type ServerOptions struct {
	// Dir holds JetStream's files. Required.
	Dir string
	// Host to listen on; default 127.0.0.1 (a local market is not a public service).
	Host string
	// Port to listen on; -1 picks a free port, 0 means the NATS default 4222.
	Port int
	// Users are the NKey users allowed to connect, each with its
	// permissions (package natsauth makes them from the principal
	// registry). Nil runs an open server (unit tests that are not about
	// the transport); set, nobody connects without one of these keys.
	Users []*server.NkeyUser
	// TLS, when set, is the server's TLS configuration, and every client
	// must speak TLS.
	TLS *tls.Config
	// Limits bound what one connection may take from the server; the zero
	// value means DefaultLimits.
	Limits Limits
	// ConnLimits bound the connections of each user's key to this server
	// (natsauth.ConnLimits; connlimit.go); a key not in it has no limit.
	ConnLimits map[string]int
	// Logger hears the connections closed for their key's limit; nil: not
	// logged.
	Logger *slog.Logger
}

// Limits are per-connection limits of the server: no single connection
// can exhaust it.
type Limits struct {
	// MaxPayload is the largest message (a spend may name 100,000 VMs of
	// up to 64 characters each, about 7 MB of JSON, plus its signature).
	MaxPayload int32
	// MaxPending is how many bytes the server buffers for one slow
	// consumer before it drops the connection.
	MaxPending int64
	// MaxSubs is how many subscriptions one connection may hold.
	MaxSubs int
	// MaxConn is how many connections the server takes in all.
	MaxConn int
}

// DefaultLimits are the limits of mrmarket's servers, embedded and
// standalone (natsauth.Config prints the same).
var DefaultLimits = Limits{MaxPayload: 16 << 20, MaxPending: 64 << 20, MaxSubs: 1000, MaxConn: 65536}

func (l Limits) orDefault() Limits {
	if l == (Limits{}) {
		return DefaultLimits
	}
	return l
}

// options are the server options opts stands for; StartServer and Reload
// build them the same way, so a reload changes only what opts changed.
func (opts ServerOptions) options() (*server.Options, error) {
	if opts.Dir == "" {
		return nil, errors.New("natsutil: a JetStream directory is required")
	}
	host := opts.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := opts.Port
	if port == 0 {
		port = 4222
	}
	o := &server.Options{
		ServerName: "mrmarket",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   opts.Dir,
		NoSigs:     true,
		NoLog:      true,
		// An open server still sends a nonce, so components that connect
		// with their NKeys (ConnectWith) work against it too.
		AlwaysEnableNonce: true,
	}
	if opts.Users != nil {
		lim := opts.Limits.orDefault()
		o.Nkeys = opts.Users
		o.MaxPayload, o.MaxPending, o.MaxSubs, o.MaxConn = lim.MaxPayload, lim.MaxPending, lim.MaxSubs, lim.MaxConn
		o.NoAuthUser = ""
	}
	if opts.TLS != nil {
		o.TLSConfig = opts.TLS
		o.TLS, o.TLSVerify = true, opts.TLS.ClientAuth == tls.RequireAndVerifyClientCert
		o.TLSTimeout = 5
	}
	return o, nil
}

// StartServer starts an embedded NATS server with JetStream in opts.Dir and
// waits until it accepts connections. With Users, it holds each key to its
// ConnLimits (connlimit.go).
func StartServer(opts ServerOptions) (*server.Server, error) {
	so, err := opts.options()
	if err != nil {
		return nil, err
	}
	ns, err := startWith(so)
	if err != nil {
		return nil, err
	}
	if opts.Users != nil {
		limitConnections(ns, opts.ConnLimits, opts.logf)
	}
	return ns, nil
}

// logf logs on opts.Logger, when there is one.
func (opts ServerOptions) logf(_ *server.Server, format string, args ...any) {
	if opts.Logger != nil {
		opts.Logger.Warn(fmt.Sprintf(format, args...))
	}
}

// startWith starts an embedded server with so and waits until it accepts
// connections (StartServer, StartNode).
func startWith(so *server.Options) (*server.Server, error) {
	ns, err := server.NewServer(so)
	if err != nil {
		return nil, fmt.Errorf("natsutil: configuring embedded NATS: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("natsutil: embedded NATS on %s:%d did not start (port in use?)", so.Host, so.Port)
	}
	return ns, nil
}

// Reload applies opts to a running server started by StartServer with the
// same options but for Users and ConnLimits (the TLS configuration must be
// the same pointer): a principal added or changed at the bank connects at
// once, without a restart, and connections whose key is gone are closed.
func Reload(ns *server.Server, opts ServerOptions) error {
	so, err := opts.options()
	if err != nil {
		return err
	}
	setConnLimits(ns, opts.ConnLimits)
	if err := ns.ReloadOptions(so); err != nil {
		return fmt.Errorf("natsutil: reloading the embedded NATS's users: %w", err)
	}
	return nil
}

// Connect connects to url with mrmarket's reconnect policy: retry forever
// with a short wait, so a component rides out a NATS restart. It connects
// anonymously: only an open server (unit tests) takes it; components
// connect with ConnectWith.
func Connect(url, name string) (*nats.Conn, error) {
	return ConnectWith(url, ConnectOptions{Name: name})
}

// ConnectOptions say who connects and how the server is verified.
type ConnectOptions struct {
	// Name is the connection's name, seen in the server's monitoring.
	Name string
	// Signer is the principal connecting: the connection authenticates
	// with its NKey, and its replies come to its own inbox prefix
	// (wire.InboxPrefix), which only it may subscribe to. Nil connects
	// anonymously (an open server only).
	Signer *signing.Signer
	// CAFile is the PEM CA that signed the server's certificate; set, the
	// connection requires TLS and verifies the server with it.
	CAFile string
	// Timeout bounds the connection attempt; 0 is nats.go's default (2s).
	Timeout time.Duration
	// Logger, when set, hears the connection lost and made again (a
	// daemon's reconnects), one line each.
	Logger *slog.Logger
}

// ConnectWith connects to url as o.Signer with mrmarket's reconnect policy
// (retry forever with a short wait, so a component rides out a NATS
// restart).
func ConnectWith(url string, o ConnectOptions) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(false),
	}
	if o.Signer != nil {
		opts = append(opts, nats.Nkey(o.Signer.Public(), o.Signer.SignNonce), nats.CustomInboxPrefix(wire.InboxPrefix(o.Signer.Public())))
	}
	if o.CAFile != "" {
		opts = append(opts, nats.RootCAs(o.CAFile))
	}
	if o.Timeout > 0 {
		opts = append(opts, nats.Timeout(o.Timeout))
	}
	if l := o.Logger; l != nil {
		opts = append(opts, nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: closed on purpose
				l.Warn("nats: connection lost; reconnecting", "conn", o.Name, "err", err)
			}
		}), nats.ReconnectHandler(func(nc *nats.Conn) {
			l.Info("nats: reconnected", "conn", o.Name, "server", nc.ConnectedUrlRedacted())
		}))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		who := "anonymously"
		if o.Signer != nil {
			who = "as " + o.Signer.Public()
		}
		return nil, fmt.Errorf("connecting to NATS at %s %s: %w", url, who, err)
	}
	return nc, nil
}
