package cli_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/cli"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// daemon is one mrmarket command line running in this process.
type daemon struct {
	out    *syncBuffer
	cancel context.CancelFunc
	done   chan struct{}
}

// startDaemon runs a command line until stop or the test's end, and waits
// (up to 30s) until its output contains ready. One starts at a time:
// urfave/cli's flag parsing shares state.
func startDaemon(t *testing.T, ready string, args ...string) *daemon {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemon{out: &syncBuffer{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		if err := cli.App(d.out, d.out).RunContext(ctx, append([]string{"mrmarket"}, args...)); err != nil {
			fmt.Fprintf(d.out, "EXIT: %v\n", err)
		}
	}()
	t.Cleanup(d.stop)
	testpoll.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		select {
		case <-d.done:
			return fmt.Errorf("%v exited:\n%s", args[:2], d.out)
		default:
		}
		if strings.Contains(d.out.String(), ready) {
			return nil
		}
		return fmt.Errorf("%v not ready within 30s:\n%s", args[:2], d.out)
	})
	return d
}

func (d *daemon) stop() { d.cancel(); <-d.done }

// TestNATSServeCluster: three `mrmarket nats serve` nodes (TLS, NKey users
// from the data directory, routes verified both ways) and `mrmarket up
// --nats` joining them: the market's streams and buckets come up R3, the
// principals up registers are admitted once the nodes reload them, and
// when the node leading MRM_HOSTS is stopped the agents' writes to it
// resume within seconds while the market keeps answering.
func TestNATSServeCluster(t *testing.T) {
	data := t.TempDir()
	const n = 3
	clients, routes := make([]string, n), make([]string, n)
	for i := range n {
		clients[i] = fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", natstest.FreePort(t))
	}
	nodes := make([]*daemon, n)
	for i := range n {
		args := []string{"nats", "serve", "--data", data, "--name", fmt.Sprintf("n%d", i+1), "--listen", clients[i],
			"--cluster-listen", strings.TrimPrefix(routes[i], "nats-route://"), "--store-dir", filepath.Join(data, fmt.Sprintf("js-n%d", i+1)),
			"--follow", "100ms", "--quiet"}
		for _, r := range routes {
			args = append(args, "--route", r)
		}
		nodes[i] = startDaemon(t, "mrmarket nats serve: node", args...)
	}
	urls := make([]string, n)
	for i, c := range clients {
		urls[i] = "tls://" + c
	}
	url := strings.Join(urls, ",")

	up := startDaemon(t, "mrmarket is up", "up", "--data", data, "--nats", url, "--hosts", "2", "--tick", "100ms", "--http", "127.0.0.1:0")
	if !strings.Contains(up.out.String(), "MRM_HOSTS R3") || !strings.Contains(up.out.String(), "MRM_PLANS R3") || !strings.Contains(up.out.String(), "MRM_EVENTS R3") {
		t.Fatalf("up did not report R3 assets:\n%s", up.out)
	}

	keys := signing.CredsDir(filepath.Join(data, "creds"))
	admin, err := keys.Signer(wire.RoleAdmin, "admin")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := natsutil.ConnectWith(url, natsutil.ConnectOptions{Name: "test", Signer: admin, CAFile: filepath.Join(data, "tls", "ca.pem")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var hostsLeader string
	testpoll.CheckFor(t, 15*time.Second, 50*time.Millisecond, func() error {
		for _, name := range []string{"KV_" + wire.BucketHosts, "KV_" + wire.BucketPlans, "KV_" + wire.BucketNonces, wire.StreamEvents} {
			s, err := js.Stream(ctx, name)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			info := s.CachedInfo()
			if info.Config.Replicas != 3 || info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
				return fmt.Errorf("%s: %d replicas, cluster %+v", name, info.Config.Replicas, info.Cluster)
			}
			if name == "KV_"+wire.BucketHosts {
				hostsLeader = info.Cluster.Leader
			}
		}
		return nil
	})

	// The agents write their states to MRM_HOSTS every tick: see each new
	// revision of host-1's (a poller, not a watch: a watch's consumer
	// lives on one node and is re-created late when that node dies, which
	// would measure the watch, not the writes).
	kv, err := js.KeyValue(ctx, wire.BucketHosts)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var updates []time.Time
	stopPoll := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		var rev uint64
		for {
			select {
			case <-stopPoll:
				return
			case <-time.After(10 * time.Millisecond):
			}
			opCtx, cancel := context.WithTimeout(ctx, time.Second)
			e, err := kv.Get(opCtx, "host-1")
			cancel()
			if err == nil && e.Revision() != rev {
				rev = e.Revision()
				mu.Lock()
				updates = append(updates, time.Now())
				mu.Unlock()
			}
		}
	}()
	defer func() { close(stopPoll); <-polled }()
	updatesSince := func(t0 time.Time) (first time.Time, n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, u := range updates {
			if u.After(t0) {
				if n == 0 {
					first = u
				}
				n++
			}
		}
		return first, n
	}
	testpoll.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if _, k := updatesSince(time.Time{}); k < 3 {
			return fmt.Errorf("%d updates of host-1 before the kill", k)
		}
		return nil
	})

	var leader int
	if _, err := fmt.Sscanf(hostsLeader, "n%d", &leader); err != nil {
		t.Fatalf("leader %q", hostsLeader)
	}
	killed := time.Now()
	nodes[leader-1].stop()
	testpoll.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if _, k := updatesSince(killed); k < 5 {
			return fmt.Errorf("%d updates of host-1 since %s was stopped", k, hostsLeader)
		}
		return nil
	})
	first, _ := updatesSince(killed)
	mu.Lock()
	var gap time.Duration
	for i := 1; i < len(updates); i++ {
		gap = max(gap, updates[i].Sub(updates[i-1]))
	}
	mu.Unlock()
	t.Logf("MRM_HOSTS leader %s stopped: host-1's state seen written again %s after; longest time between two writes seen %s (tick 100ms)",
		hostsLeader, first.Sub(killed).Round(time.Millisecond), gap.Round(time.Millisecond))
	if gap > 10*time.Second {
		t.Fatalf("MRM_HOSTS took %s to take writes again", gap)
	}
	// The market still answers, through the other nodes.
	var r run
	testpoll.CheckFor(t, 15*time.Second, 100*time.Millisecond, func() error {
		r = mrmarket("--tls-ca", filepath.Join(data, "tls", "ca.pem"), "price", "--nats", url, "--creds", string(keys))
		if r.code != 0 || !strings.Contains(r.stdout, "host-2") {
			return fmt.Errorf("price after the kill: %+v", r)
		}
		return nil
	})
}
