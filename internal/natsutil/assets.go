package natsutil

// The market's JetStream assets, and who makes them.
//
// The admin creates and configures every stream and bucket (EnsureAssets:
// `mrmarket up`, which holds the admin's key, and `mrmarket nats assets`
// for a standalone deployment); each service only opens the ones it uses,
// waiting a bounded time for the admin to have made them (OpenBankAssets,
// OpenBrokerAssets, OpenHosts), so the daemons may start in any order
// after the admin's step. A service's NATS permissions (natsauth) hold no
// right to create, update, delete or purge a stream: a stream's
// configuration decides what it records and keeps, and a service that may
// change it may make it record everyone's replies.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/internal/retry"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Assets are the shared JetStream assets a call made or opened; those it
// did not are nil.
type Assets struct {
	JS     jetstream.JetStream
	Hosts  jetstream.KeyValue
	Plans  jetstream.KeyValue
	Nonces jetstream.KeyValue
	Events jetstream.Stream
	// Replicas are the replica counts of the assets EnsureAssets created
	// or updated, by name (MRM_HOSTS, …): see replicas.go.
	Replicas map[string]int
}

// DefaultAssetsWait is how long a service waits for the admin's assets by
// default: long enough for an operator's bring-up, short enough that a
// forgotten step is reported rather than waited on forever.
const DefaultAssetsWait = time.Minute

// EnsureAssets creates, updates or opens every asset of the market — the
// MRM_HOSTS, MRM_PLANS and MRM_NONCES buckets and the MRM_EVENTS stream —
// with their replicas (replicas.go). It is the admin's: with permissions,
// only the admin may; on an open server (tests) anyone may. Safe to call
// again: it raises replicas, and makes again what was deleted.
func EnsureAssets(ctx context.Context, nc *nats.Conn) (*Assets, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natsutil: jetstream: %w", err)
	}
	a := &Assets{JS: js, Replicas: map[string]int{}}
	if a.Hosts, err = ensureKV(ctx, js, hostsConfig, a.Replicas); err != nil {
		return nil, err
	}
	if a.Plans, err = ensureKV(ctx, js, plansConfig, a.Replicas); err != nil {
		return nil, err
	}
	if a.Nonces, err = ensureKV(ctx, js, noncesConfig, a.Replicas); err != nil {
		return nil, err
	}
	if a.Events, err = ensureEvents(ctx, js, a.Replicas); err != nil {
		return nil, err
	}
	return a, nil
}

var (
	hostsConfig = jetstream.KeyValueConfig{
		Bucket:      wire.BucketHosts,
		Description: "last published state of every host",
		History:     1,
	}
	plansConfig = jetstream.KeyValueConfig{
		Bucket:      wire.BucketPlans,
		Description: "the broker's spend plans and its replicas' heartbeats",
		History:     1,
	}
	noncesConfig = jetstream.KeyValueConfig{
		Bucket:      wire.BucketNonces,
		Description: "nonces of the signed requests broker replicas served",
		History:     1,
		TTL:         NonceTTL,
	}
	eventsConfig = jetstream.StreamConfig{
		Name:        wire.StreamEvents,
		Description: "audit events of bank, broker and agents",
		Subjects:    []string{wire.AllEvents},
		MaxAge:      30 * 24 * time.Hour,
		MaxBytes:    256 << 20,
	}
)

// NonceTTL is how long MRM_NONCES keeps a nonce: past twice the signature
// skew, so a request is stale before its nonce is forgotten.
const NonceTTL = 2*signing.MaxSkew + signing.MaxSkew/2

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
	replicas[cfg.Bucket] = n
	return kv, nil
}

// ensureEvents creates, updates or opens the MRM_EVENTS stream.
func ensureEvents(ctx context.Context, js jetstream.JetStream, replicas map[string]int) (jetstream.Stream, error) {
	var st jetstream.Stream
	n, err := ensure(ctx, js, asset{name: wire.StreamEvents, stream: wire.StreamEvents, apply: func(ctx context.Context, r int) error {
		cfg := eventsConfig
		cfg.Replicas = r
		s, err := js.CreateOrUpdateStream(ctx, cfg)
		if err == nil {
			st = s
		}
		return err
	}})
	if err != nil {
		return nil, err
	}
	if st == nil { // not updated (see ensure): open it as it is
		if st, err = js.Stream(ctx, wire.StreamEvents); err != nil {
			return nil, fmt.Errorf("natsutil: stream %s: %w", wire.StreamEvents, err)
		}
	}
	replicas[wire.StreamEvents] = n
	return st, nil
}

// OpenBankAssets opens what the bank uses: the MRM_EVENTS stream it
// publishes its audit events into (Events), waiting up to wait for the
// admin to have created it.
func OpenBankAssets(ctx context.Context, nc *nats.Conn, wait time.Duration) (*Assets, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natsutil: jetstream: %w", err)
	}
	a := &Assets{JS: js}
	if a.Events, err = await(ctx, wait, wire.StreamEvents, func(ctx context.Context) (jetstream.Stream, error) {
		return js.Stream(ctx, wire.StreamEvents)
	}); err != nil {
		return nil, err
	}
	return a, nil
}

// OpenBrokerAssets opens what a broker uses: the MRM_PLANS and MRM_NONCES
// buckets, waiting up to wait for the admin to have created them, and
// MRM_HOSTS when it is there (Hosts may be nil: the broker catches up from
// the live states).
func OpenBrokerAssets(ctx context.Context, nc *nats.Conn, wait time.Duration) (*Assets, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natsutil: jetstream: %w", err)
	}
	a := &Assets{JS: js}
	if a.Plans, err = awaitKV(ctx, js, wait, wire.BucketPlans); err != nil {
		return nil, err
	}
	if a.Nonces, err = awaitKV(ctx, js, wait, wire.BucketNonces); err != nil {
		return nil, err
	}
	if kv, err := js.KeyValue(ctx, wire.BucketHosts); err == nil {
		a.Hosts = kv
	}
	return a, nil
}

// OpenHosts opens the MRM_HOSTS bucket for an agent, waiting up to wait
// for the admin to have created it; Hosts and JS are set.
func OpenHosts(ctx context.Context, nc *nats.Conn, wait time.Duration) (*Assets, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natsutil: jetstream: %w", err)
	}
	kv, err := awaitKV(ctx, js, wait, wire.BucketHosts)
	if err != nil {
		return nil, err
	}
	return &Assets{JS: js, Hosts: kv}, nil
}

// OpenNonces opens the MRM_NONCES bucket, waiting up to wait for the
// admin to have created it.
func OpenNonces(ctx context.Context, js jetstream.JetStream, wait time.Duration) (jetstream.KeyValue, error) {
	return awaitKV(ctx, js, wait, wire.BucketNonces)
}

func awaitKV(ctx context.Context, js jetstream.JetStream, wait time.Duration, bucket string) (jetstream.KeyValue, error) {
	return await(ctx, wait, bucket, func(ctx context.Context) (jetstream.KeyValue, error) { return js.KeyValue(ctx, bucket) })
}

// assetPoll is how a service looks again for an asset the admin has not
// made yet (or whose stream has no leader yet).
var assetPoll = retry.Options{InitialBackoff: 250 * time.Millisecond, MaxBackoff: 2 * time.Second, Multiplier: 1.5, Jitter: 0.2}

// await opens asset name with open until it is there, for up to wait
// (DefaultAssetsWait when 0). Only "not found" and JetStream's "try again"
// are waited out.
func await[T any](ctx context.Context, wait time.Duration, name string, open func(context.Context) (T, error)) (T, error) {
	if wait <= 0 {
		wait = DefaultAssetsWait
	}
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var v T
	err := retry.Do(waitCtx, assetPoll, func(err error) bool { return isMissing(err) || isTransient(err) }, func(ctx context.Context) error {
		var err error
		v, err = open(ctx)
		return err
	})
	switch {
	case err == nil:
		return v, nil
	case ctx.Err() != nil:
		return v, ctx.Err()
	case isMissing(err) || isTransient(err):
		return v, fmt.Errorf("%w: %s within %s (the admin creates it: mrmarket nats assets, or mrmarket up): %v", ErrNoBucket, name, wait, err)
	default:
		return v, fmt.Errorf("natsutil: opening %s: %w", name, err)
	}
}

func isMissing(err error) bool {
	return errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound)
}
