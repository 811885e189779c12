package natsutil

// Replication of the market's streams and buckets.
//
// Every asset the market creates (MRM_HOSTS, MRM_PLANS, MRM_NONCES,
// MRM_EVENTS) gets a replica count, decided when it is created or opened:
//
//   - an operator's override wins: SetReplicas on the connection that
//     creates it (the daemons' --js-replicas), else the environment variable
//     MRM_JS_REPLICAS; 0 means "from the cluster";
//   - from the cluster: a server that is not part of a cluster (its INFO
//     names no cluster) gets R1 — it refuses more; a server in a cluster
//     gets R3, the smallest count that survives losing any one server.
//
// A client of an ordinary account cannot ask NATS how many servers the
// JetStream meta group has (that is the system account's $SYS/JSZ), and
// the INFO's connect_urls count addresses, not servers (a server listening
// on 0.0.0.0 advertises every interface). So the cluster size is asked of
// the one component that knows it: the meta leader placing the replicas.
// When it cannot place three (JSClusterNoPeersErr, insufficient resources:
// fewer than three JetStream servers up), a new asset is retried for
// placementGrace — a cluster whose servers are still joining places it a
// moment later — and then created R1, with a warning. Replicas are never
// lowered automatically: an asset already at R3 stays R3 while a server is
// down.
//
// Migration: an existing asset with fewer replicas than wanted is updated
// in place (nats-server moves a stream from R1 to R3 by adding peers and
// catching them up; its messages and sequence numbers stay). When that
// update fails (a server is down), the daemon starts anyway on the stream
// as it is — it has a leader, so the market works — and logs how to raise
// it later (the next start does it, or `nats stream edit`). Nothing blocks
// startup while a stream has a leader somewhere: JetStream API errors that
// say "try again" (no meta leader yet, no responders, timeouts) are retried
// for ensureWait, and only a stream that cannot be created or opened at
// all is an error.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Errors of the replicas (and of a service's wait: ErrNoBucket).
var (
	// ErrNoBucket: an asset the admin creates was not there in time.
	ErrNoBucket = errors.New("natsutil: asset not created by the admin in time")
	// ErrReplicas: an asset could not be created with the replicas asked
	// for (more than the cluster's JetStream servers, or a standalone
	// server asked for more than one).
	ErrReplicas = errors.New("natsutil: replicas not possible")
	// ErrBadReplicas: a replica override out of range (0–5).
	ErrBadReplicas = errors.New("natsutil: replicas must be between 0 (from the cluster) and 5")
)

// EnvReplicas is the environment variable that overrides the replica count
// for every asset a process creates (0 or unset: from the cluster); a
// daemon's --js-replicas flag (SetReplicas) wins over it.
const EnvReplicas = "MRM_JS_REPLICAS"

// MaxReplicas is JetStream's limit.
const MaxReplicas = 5

// ClusterReplicas is the count on a cluster (three or more servers).
const ClusterReplicas = 3

var (
	// placementGrace is how long a new asset waits for the cluster to
	// place its replicas before it is created R1 (or, with an override,
	// refused).
	placementGrace = 10 * time.Second
	// ensureWait bounds the retries of "try again" JetStream errors.
	ensureWait = 30 * time.Second
)

// overrides holds SetReplicas's counts by connection.
var overrides sync.Map // *nats.Conn → int

// SetReplicas makes the assets created through nc get n replicas; 0 means
// from the cluster (the default). It is how --js-replicas of `mrmarket up`
// and `mrmarket nats assets` reaches EnsureAssets.
func SetReplicas(nc *nats.Conn, n int) error {
	if n < 0 || n > MaxReplicas {
		return fmt.Errorf("%w: got %d", ErrBadReplicas, n)
	}
	overrides.Store(nc, n)
	return nil
}

// Override is the replica count asked for through nc: SetReplicas's, else
// MRM_JS_REPLICAS, else 0 (from the cluster).
func Override(nc *nats.Conn) (int, error) {
	if n, ok := overrides.Load(nc); ok {
		return n.(int), nil
	}
	if s := os.Getenv(EnvReplicas); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > MaxReplicas {
			return 0, fmt.Errorf("%w: %s=%q", ErrBadReplicas, EnvReplicas, s)
		}
		return n, nil
	}
	return 0, nil
}

// FromCluster is the replica count for a server nc is connected to, before
// the meta leader is asked: R1 outside a cluster, else ClusterReplicas.
func FromCluster(nc *nats.Conn) int {
	if nc.ConnectedClusterName() == "" {
		return 1
	}
	return ClusterReplicas
}

// asset is one stream or bucket to create or update.
type asset struct {
	name   string // as the market names it: MRM_HOSTS
	stream string // its stream: KV_MRM_HOSTS
	// apply creates or updates the asset with replicas.
	apply func(ctx context.Context, replicas int) error
}

// ensure creates or updates a with the replica count of the policy above
// and returns the count it has.
func ensure(ctx context.Context, js jetstream.JetStream, a asset) (int, error) {
	override, err := Override(js.Conn())
	if err != nil {
		return 0, err
	}
	cur, err := currentReplicas(ctx, js, a.stream)
	if err != nil {
		return 0, fmt.Errorf("natsutil: %s: %w", a.name, err)
	}
	want := override
	if want == 0 {
		want = max(FromCluster(js.Conn()), cur) // never lowered automatically
	}
	deadline := time.Now().Add(placementGrace)
	for {
		err = tryTransient(ctx, func() error { return a.apply(ctx, want) })
		if err == nil {
			if cur > 0 && cur != want {
				warnf("%s: replicas %d → %d", a.name, cur, want)
			}
			return want, nil
		}
		// A new asset on a cluster whose servers are still joining: the
		// meta leader places it a moment later (even R1 fails with "peer
		// offline" right after the first election).
		if !isPlacement(err) || apiCode(err) == errReplicasNotSupported || cur > 0 || time.Now().After(deadline) {
			break
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return 0, err
		}
	}
	switch {
	case cur > 0:
		// It exists and has a leader (its info answered): start on it.
		warnf("%s: has %d replica(s), wanted %d: %v; the market runs on it as it is. "+
			"Once %d JetStream servers are up, restart this daemon or run: nats stream edit %s --replicas %d",
			a.name, cur, want, err, want, a.stream, want)
		return cur, nil
	case isPlacement(err) && override == 0 && want > 1:
		// Fewer than three JetStream servers: R1, said loudly.
		if err1 := tryTransient(ctx, func() error { return a.apply(ctx, 1) }); err1 != nil {
			return 0, fmt.Errorf("natsutil: %s: %w", a.name, err1)
		}
		warnf("%s: created with 1 replica: the cluster could not place %d (%v); "+
			"it is raised when a daemon starts on a cluster of %d, or run: nats stream edit %s --replicas %d",
			a.name, want, err, want, a.stream, want)
		return 1, nil
	case isPlacement(err):
		return 0, fmt.Errorf("%w: %s with %d replicas: %v (a standalone server takes 1, a cluster at most its JetStream servers: "+
			"set --js-replicas or %s to 0 for the cluster's count)", ErrReplicas, a.name, want, err, EnvReplicas)
	default:
		return 0, fmt.Errorf("natsutil: %s: %w", a.name, err)
	}
}

// currentReplicas is stream's replica count, 0 when it does not exist.
func currentReplicas(ctx context.Context, js jetstream.JetStream, stream string) (int, error) {
	var n int
	err := tryTransient(ctx, func() error {
		s, err := js.Stream(ctx, stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			n = 0
			return nil
		}
		if err != nil {
			return err
		}
		n = max(s.CachedInfo().Config.Replicas, 1)
		return nil
	})
	return n, err
}

// tryTransient calls f until it succeeds, fails with an error that is not
// transient, ctx ends or ensureWait passes.
func tryTransient(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(ensureWait)
	for {
		err := f()
		if err == nil || !isTransient(err) || time.Now().After(deadline) {
			return err
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// JetStream API error codes (nats-server's jetstream_errors_generated.go).
const (
	errClusterNoPeers        = 10005 // no suitable peers for placement
	errClusterNotAvail       = 10008 // JetStream system temporarily unavailable
	errClusterNotLeader      = 10009 // JetStream cluster can not handle request
	errInsufficientResources = 10023
	errReplicasNotSupported  = 10074 // replicas > 1 in non-clustered mode
	errPeerRemap             = 10075
	errStreamOffline         = 10118
	errStreamOfflineReason   = 10194
)

func apiCode(err error) int {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return int(apiErr.ErrorCode)
	}
	return 0
}

// isPlacement: the cluster cannot place the replicas asked for.
func isPlacement(err error) bool {
	switch apiCode(err) {
	case errClusterNoPeers, errInsufficientResources, errReplicasNotSupported, errPeerRemap:
		return true
	}
	return false
}

// isTransient: JetStream says try again (no meta leader yet, a leader
// moving, a server restarting).
func isTransient(err error) bool {
	switch apiCode(err) {
	case errClusterNotAvail, errClusterNotLeader, errStreamOffline, errStreamOfflineReason:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected)
}

// warnf logs what an operator should know about the replicas.
var warnf = func(format string, args ...any) { log.Printf("natsutil: "+format, args...) }
