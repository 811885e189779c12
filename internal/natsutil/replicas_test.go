package natsutil_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// streams are the streams of every asset the market creates.
var streams = []string{"KV_" + wire.BucketHosts, "KV_" + wire.BucketPlans, "KV_" + wire.BucketNonces, wire.StreamEvents}

func ensureAll(t *testing.T, nc *nats.Conn) *natsutil.Assets {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := natsutil.EnsureAssets(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := natsutil.EnsureNonces(ctx, a.JS); err != nil {
		t.Fatal(err)
	}
	return a
}

// replicas checks that every asset's stream has want replicas, all of
// them current.
func replicas(js jetstream.JetStream, want int) error {
	for _, name := range streams {
		s, err := js.Stream(context.Background(), name)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		info := s.CachedInfo()
		if info.Config.Replicas != want {
			return fmt.Errorf("%s: %d replicas configured, want %d", name, info.Config.Replicas, want)
		}
		if want == 1 {
			continue
		}
		if info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != want-1 {
			return fmt.Errorf("%s: cluster %+v, want a leader and %d followers", name, info.Cluster, want-1)
		}
		for _, p := range info.Cluster.Replicas {
			if !p.Current || p.Offline {
				return fmt.Errorf("%s: follower %s not current", name, p.Name)
			}
		}
	}
	return nil
}

// TestReplicasStandalone: one server, not clustered: every asset is R1, and
// an override of 3 is refused with a clear error.
func TestReplicasStandalone(t *testing.T) {
	_, nc := natstest.Start(t)
	a := ensureAll(t, nc)
	if err := replicas(a.JS, 1); err != nil {
		t.Fatal(err)
	}
	if a.Replicas[wire.BucketHosts] != 1 || a.Replicas[wire.StreamEvents] != 1 || a.Replicas[wire.BucketPlans] != 1 {
		t.Fatalf("replicas reported %v", a.Replicas)
	}
	nc2 := natstest.Connect(t, natstest.Server(t))
	if err := natsutil.SetReplicas(nc2, 3); err != nil {
		t.Fatal(err)
	}
	_, err := natsutil.EnsureAssets(context.Background(), nc2)
	if !errors.Is(err, natsutil.ErrReplicas) {
		t.Fatalf("R3 on a standalone server: %v, want ErrReplicas", err)
	}
	if err := natsutil.SetReplicas(nc2, 6); !errors.Is(err, natsutil.ErrBadReplicas) {
		t.Fatalf("SetReplicas(6): %v", err)
	}
}

// TestReplicasCluster: on a 3-node cluster every asset comes up R3, all
// replicas current; the plans bucket re-created after a loss gets R3 too.
func TestReplicasCluster(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	nc := c.Connect(t)
	a := ensureAll(t, nc)
	testpoll.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error { return replicas(a.JS, 3) })
	// The admin makes a lost plans bucket again (the broker may not).
	if err := a.JS.DeleteKeyValue(context.Background(), wire.BucketPlans); err != nil {
		t.Fatal(err)
	}
	again := ensureAll(t, nc)
	if again.Replicas[wire.BucketPlans] != 3 {
		t.Fatalf("plans re-created with %d replicas", again.Replicas[wire.BucketPlans])
	}
}

// TestMigrateR1ToR3: assets created R1 on a cluster (an old market, or
// --js-replicas 1) are raised to R3 by the next start with the cluster's
// count, keeping their data.
func TestMigrateR1ToR3(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	old := c.Connect(t)
	if err := natsutil.SetReplicas(old, 1); err != nil {
		t.Fatal(err)
	}
	a := ensureAll(t, old)
	if err := replicas(a.JS, 1); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 20 {
		if _, err := a.Hosts.Put(ctx, fmt.Sprintf("host-%d", i), []byte("state")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.JS.Publish(ctx, "mrm.v1.events.test", []byte("{}")); err != nil {
		t.Fatal(err)
	}

	b := ensureAll(t, c.Connect(t)) // from the cluster: 3
	if b.Replicas[wire.BucketHosts] != 3 || b.Replicas[wire.StreamEvents] != 3 {
		t.Fatalf("replicas after migration %v", b.Replicas)
	}
	testpoll.CheckFor(t, 15*time.Second, 50*time.Millisecond, func() error { return replicas(b.JS, 3) })
	for i := range 20 {
		e, err := b.Hosts.Get(ctx, fmt.Sprintf("host-%d", i))
		if err != nil || string(e.Value()) != "state" {
			t.Fatalf("host-%d after migration: %v", i, err)
		}
	}
	ev, err := b.JS.Stream(ctx, wire.StreamEvents)
	if err != nil || ev.CachedInfo().State.Msgs != 1 {
		t.Fatalf("events after migration: %v", err)
	}
}

// TestBucketSurvivesLeaderKill: the node leading MRM_HOSTS is stopped;
// writes and reads of the market's KV continue within seconds through the
// other two (the client, given every URL, fails over). The longest gap is
// logged.
func TestBucketSurvivesLeaderKill(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	nc := c.Connect(t)
	a := ensureAll(t, nc)
	testpoll.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error { return replicas(a.JS, 3) })
	ctx := context.Background()
	s, err := a.JS.Stream(ctx, "KV_"+wire.BucketHosts)
	if err != nil {
		t.Fatal(err)
	}
	leader := c.Index(s.CachedInfo().Cluster.Leader)
	if leader < 0 {
		t.Fatalf("leader %q is not a node", s.CachedInfo().Cluster.Leader)
	}
	if _, err := a.Hosts.Put(ctx, "host-1", []byte("0")); err != nil {
		t.Fatal(err)
	}

	killed := time.Now()
	c.Kill(leader)
	var firstOK time.Time
	var lastErr error
	n := 0
	testpoll.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		n++
		opCtx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		v := fmt.Sprint(n)
		if _, err := a.Hosts.Put(opCtx, "host-1", []byte(v)); err != nil {
			lastErr = err
			return fmt.Errorf("put after killing the leader: %w", err)
		}
		e, err := a.Hosts.Get(opCtx, "host-1")
		if err != nil || string(e.Value()) != v {
			lastErr = err
			return fmt.Errorf("get after killing the leader: %v", err)
		}
		firstOK = time.Now()
		return nil
	})
	gap := firstOK.Sub(killed)
	t.Logf("KV writes+reads resumed %s after the bucket's leader %s was stopped (last error: %v)", gap.Round(time.Millisecond), s.CachedInfo().Cluster.Leader, lastErr)
	if gap > 10*time.Second {
		t.Fatalf("KV unavailable for %s after losing its leader", gap)
	}
	s2, err := a.JS.Stream(ctx, "KV_"+wire.BucketHosts)
	if err != nil {
		t.Fatal(err)
	}
	if l := s2.CachedInfo().Cluster.Leader; l == "" || l == s.CachedInfo().Cluster.Leader {
		t.Fatalf("leader after the kill: %q", l)
	}
	// A daemon starting now (one node down) opens the R3 assets without
	// lowering them.
	b := ensureAll(t, c.Connect(t))
	if b.Replicas[wire.BucketHosts] != 3 {
		t.Fatalf("replicas with a node down: %v", b.Replicas)
	}
}
