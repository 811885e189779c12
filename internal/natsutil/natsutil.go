// Package natsutil starts mrmarket's embedded NATS server and creates the
// JetStream assets the components share (the MRM_HOSTS KV bucket and the
// MRM_EVENTS stream). Production points every component at an external NATS
// cluster instead; nothing else in the code assumes an embedded server.
package natsutil

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
}

// StartServer starts an embedded NATS server with JetStream in opts.Dir and
// waits until it accepts connections.
func StartServer(opts ServerOptions) (*server.Server, error) {
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
	ns, err := server.NewServer(&server.Options{
		ServerName: "mrmarket",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   opts.Dir,
		NoSigs:     true,
		NoLog:      true,
	})
	if err != nil {
		return nil, fmt.Errorf("natsutil: configuring embedded NATS: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("natsutil: embedded NATS on %s:%d did not start (port in use?)", host, port)
	}
	return ns, nil
}

// Connect connects to url with mrmarket's reconnect policy: retry forever
// with a short wait, so a component rides out a NATS restart.
func Connect(url, name string) (*nats.Conn, error) {
	nc, err := nats.Connect(url,
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.RetryOnFailedConnect(false),
	)
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS at %s: %w", url, err)
	}
	return nc, nil
}

// Assets are the shared JetStream assets.
type Assets struct {
	JS     jetstream.JetStream
	Hosts  jetstream.KeyValue
	Plans  jetstream.KeyValue
	Events jetstream.Stream
}

// EnsureAssets creates (or opens) the MRM_HOSTS bucket and the MRM_EVENTS
// stream. Safe to call from every component at start.
func EnsureAssets(ctx context.Context, nc *nats.Conn) (*Assets, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natsutil: jetstream: %w", err)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      wire.BucketHosts,
		Description: "last published state of every host",
		History:     1,
	})
	if err != nil {
		return nil, fmt.Errorf("natsutil: bucket %s: %w", wire.BucketHosts, err)
	}
	plans, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      wire.BucketPlans,
		Description: "the broker's spend plans and its replicas' heartbeats",
		History:     1,
	})
	if err != nil {
		return nil, fmt.Errorf("natsutil: bucket %s: %w", wire.BucketPlans, err)
	}
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        wire.StreamEvents,
		Description: "audit events of bank, broker and agents",
		Subjects:    []string{wire.AllEvents},
		MaxAge:      30 * 24 * time.Hour,
		MaxBytes:    256 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("natsutil: stream %s: %w", wire.StreamEvents, err)
	}
	return &Assets{JS: js, Hosts: kv, Plans: plans, Events: st}, nil
}
