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
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
// waits until it accepts connections.
func StartServer(opts ServerOptions) (*server.Server, error) {
	so, err := opts.options()
	if err != nil {
		return nil, err
	}
	return startWith(so)
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
// same options but for Users (the TLS configuration must be the same
// pointer): a principal added or changed at the bank connects at once,
// without a restart, and connections whose key is gone are closed.
func Reload(ns *server.Server, opts ServerOptions) error {
	so, err := opts.options()
	if err != nil {
		return err
	}
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

// Assets are the shared JetStream assets.
type Assets struct {
	JS     jetstream.JetStream
	Hosts  jetstream.KeyValue
	Plans  jetstream.KeyValue
	Events jetstream.Stream
	// Replicas are the replica counts of the assets this call created or
	// opened, by name (MRM_HOSTS, …): see replicas.go.
	Replicas map[string]int
}

// Who creates what. With subject permissions (package natsauth) each role
// creates only the assets it owns, so daemons may start in any order:
//   - the bank creates MRM_HOSTS (agents write it, brokers read it) and the
//     MRM_EVENTS stream (EnsureBankAssets);
//   - the broker creates MRM_PLANS, which only brokers touch
//     (EnsureBrokerAssets);
//   - an agent only opens MRM_HOSTS, waiting a bounded time for the bank to
//     create it (OpenHosts).
//
// EnsureAssets creates all of them, for an admin or an open server (tests).
// Each gets its replicas from the cluster or the override (replicas.go).

// EnsureAssets creates (or opens) the MRM_HOSTS and MRM_PLANS buckets and
// the MRM_EVENTS stream. Safe to call from every component at start on an
// open server; with permissions only admin may.
func EnsureAssets(ctx context.Context, nc *nats.Conn) (*Assets, error) {
	a, err := EnsureBankAssets(ctx, nc)
	if err != nil {
		return nil, err
	}
	if a.Plans, err = ensurePlans(ctx, a.JS, a.Replicas); err != nil {
		return nil, err
	}
	return a, nil
}

// EnsureBankAssets creates (or opens) what the bank owns: the MRM_HOSTS
// bucket and the MRM_EVENTS stream. Plans is nil.
func EnsureBankAssets(ctx context.Context, nc *nats.Conn) (*Assets, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natsutil: jetstream: %w", err)
	}
	a := &Assets{JS: js, Replicas: map[string]int{}}
	if a.Hosts, err = ensureKV(ctx, js, hostsConfig, a.Replicas); err != nil {
		return nil, err
	}
	events := jetstream.StreamConfig{
		Name:        wire.StreamEvents,
		Description: "audit events of bank, broker and agents",
		Subjects:    []string{wire.AllEvents},
		MaxAge:      30 * 24 * time.Hour,
		MaxBytes:    256 << 20,
	}
	n, err := ensure(ctx, js, asset{name: wire.StreamEvents, stream: wire.StreamEvents, apply: func(ctx context.Context, r int) error {
		cfg := events
		cfg.Replicas = r
		st, err := js.CreateOrUpdateStream(ctx, cfg)
		if err == nil {
			a.Events = st
		}
		return err
	}})
	if err != nil {
		return nil, err
	}
	if a.Events == nil { // not updated (see ensure): open it as it is
		if a.Events, err = js.Stream(ctx, wire.StreamEvents); err != nil {
			return nil, fmt.Errorf("natsutil: stream %s: %w", wire.StreamEvents, err)
		}
	}
	a.Replicas[wire.StreamEvents] = n
	return a, nil
}

var hostsConfig = jetstream.KeyValueConfig{
	Bucket:      wire.BucketHosts,
	Description: "last published state of every host",
	History:     1,
}

// ensureKV creates, updates or opens the bucket of cfg with its replicas
// (replicas.go), recording them in replicas.
func ensureKV(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, replicas map[string]int) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	n, err := ensure(ctx, js, asset{name: cfg.Bucket, stream: "KV_" + cfg.Bucket, apply: func(ctx context.Context, r int) error {
		c := cfg
		c.Replicas = r
		b, err := js.CreateOrUpdateKeyValue(ctx, c)
		if err == nil {
			kv = b
		}
		return err
	}})
	if err != nil {
		return nil, fmt.Errorf("natsutil: bucket %s: %w", cfg.Bucket, err)
	}
	if kv == nil { // not updated (see ensure): open it as it is
		if kv, err = js.KeyValue(ctx, cfg.Bucket); err != nil {
			return nil, fmt.Errorf("natsutil: bucket %s: %w", cfg.Bucket, err)
		}
	}
	chosen.Store(chosenKey{js.Conn(), cfg.Bucket}, n)
	if replicas != nil {
		replicas[cfg.Bucket] = n
	}
	return kv, nil
}

// chosen are the replica counts ensureKV chose, by connection and bucket:
// a bucket re-created through the same connection gets the same
// (PlansConfig).
var chosen sync.Map // chosenKey → int

type chosenKey struct {
	nc     *nats.Conn
	bucket string
}

// EnsureBrokerAssets creates (or opens) what the broker owns, the MRM_PLANS
// bucket, and opens MRM_HOSTS (the bank's) when it exists already. Hosts
// and Events may be nil: the broker catches up from the live states.
func EnsureBrokerAssets(ctx context.Context, nc *nats.Conn) (*Assets, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natsutil: jetstream: %w", err)
	}
	a := &Assets{JS: js, Replicas: map[string]int{}}
	if a.Plans, err = ensurePlans(ctx, js, a.Replicas); err != nil {
		return nil, err
	}
	if kv, err := js.KeyValue(ctx, wire.BucketHosts); err == nil {
		a.Hosts = kv
	}
	return a, nil
}

func ensurePlans(ctx context.Context, js jetstream.JetStream, replicas map[string]int) (jetstream.KeyValue, error) {
	return ensureKV(ctx, js, plansConfig(wire.BucketPlans, 0), replicas)
}

func plansConfig(bucket string, replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: "the broker's spend plans and its replicas' heartbeats",
		History:     1,
		Replicas:    replicas,
	}
}

// PlansConfig is the configuration of the plans bucket (named bucket) for
// the broker to create it again over nc after it was lost: the replicas
// EnsureBrokerAssets chose over nc, else the override, else the cluster's.
func PlansConfig(nc *nats.Conn, bucket string) jetstream.KeyValueConfig {
	n, ok := chosen.Load(chosenKey{nc, bucket})
	if !ok {
		o, err := Override(nc)
		if err != nil || o == 0 {
			o = FromCluster(nc)
		}
		n = o
	}
	return plansConfig(bucket, n.(int))
}

// OpenHosts opens the MRM_HOSTS bucket for an agent, waiting up to wait
// for the bank to create it (the agent may start first); Hosts and JS are
// set.
func OpenHosts(ctx context.Context, nc *nats.Conn, wait time.Duration) (*Assets, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natsutil: jetstream: %w", err)
	}
	deadline := time.Now().Add(wait)
	for {
		kv, err := js.KeyValue(ctx, wire.BucketHosts)
		if err == nil {
			return &Assets{JS: js, Hosts: kv}, nil
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) || time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: %s (the bank creates it; is it running?): %v", ErrNoBucket, wire.BucketHosts, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
