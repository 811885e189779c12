package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/pgtest"
	"github.com/mrmarket/mrmarket/internal/retry"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/testproc"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

// The market's layout: hosts with one VM of each spending user.
const (
	hosts = 3
	// tick is every daemon's period: short, so plans end and holds close
	// within the test.
	tick = "200ms"
)

var (
	// spenders own the VMs: they spend (alice, bob) and submit deadline
	// jobs (carol).
	spenders = []string{"alice", "bob", "carol"}
	// payers only transfer to each other, so their balances are exactly
	// their grants plus the acknowledged transfers.
	payers = []string{"t1", "t2", "t3", "t4"}
)

// grantEach is every user's grant.
const grantEach = 1000 * money.PerCredit

// cluster is the distributed market, each daemon its own process.
type cluster struct {
	dir, creds, ca, url string
	bin                 string // the mrmarket the daemons and the CLI's users run
	keys                signing.CredsDir
	admin               *signing.Signer
	pg                  *pgtest.Patroni
	layout              []market.HostSpec
	replicas            int // of every JetStream asset

	nats, banks, brokers, agents []*testproc.Proc
}

// startCluster bootstraps the credentials and the bank's registry, then
// starts natsNodes NATS nodes (a cluster when more than one), has the
// admin create the JetStream assets, starts two banks, two brokers and the
// agents, and waits until the assets are replicated on every node (at most
// three).
func startCluster(t testing.TB, natsNodes int) *cluster {
	t.Helper()
	bin := testproc.Binary(t)
	c := &cluster{dir: t.TempDir(), bin: bin, pg: pgtest.StartPatroni(t)}
	store := c.pg.DSN(t, "bank")
	c.creds = filepath.Join(c.dir, "creds")
	c.keys = signing.CredsDir(c.creds)
	c.ca = filepath.Join(c.dir, "tls", "ca.pem")
	var err error
	if c.layout, err = market.Layout(hosts, len(spenders), spenders); err != nil {
		t.Fatal(err)
	}
	c.bootstrap(t, store)
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range slices.Concat(c.nats, c.banks, c.brokers, c.agents) {
				t.Logf("--- %s (%s):\n%s", p.Name, p.Log, p.Tail())
			}
		}
		keepLogs(t, c.dir)
	})

	clients, routes := make([]string, natsNodes), make([]string, natsNodes)
	for i := range clients {
		clients[i] = fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", natstest.FreePort(t))
	}
	urls := make([]string, len(clients))
	for i, cl := range clients {
		urls[i] = "tls://" + cl
	}
	c.url = strings.Join(urls, ",")
	add := func(list *[]*testproc.Proc, name, ready string, args ...string) *testproc.Proc {
		p := &testproc.Proc{Name: name, Bin: bin, Args: args, Ready: ready, Log: filepath.Join(c.dir, name+".log")}
		*list = append(*list, p)
		t.Cleanup(p.Stop)
		return p
	}
	for i := range clients {
		args := []string{"nats", "serve", "--data", c.dir, "--name", fmt.Sprintf("n%d", i+1), "--listen", clients[i],
			"--store-dir", filepath.Join(c.dir, fmt.Sprintf("js-n%d", i+1)), "--follow", "1s", "--quiet"}
		if natsNodes > 1 {
			args = append(args, "--cluster-listen", strings.TrimPrefix(routes[i], "nats-route://"))
			for _, r := range routes {
				args = append(args, "--route", r)
			}
		}
		// One at a time: the first creates the TLS directory the others use.
		add(&c.nats, fmt.Sprintf("nats-n%d", i+1), "mrmarket nats serve: node", args...).Start(t)
	}
	common := []string{"--nats", c.url, "--creds", c.creds, "--tls-ca", c.ca}
	c.replicas = min(natsNodes, 3)
	c.makeAssets(t, bin, common)
	for i := range 2 {
		add(&c.banks, fmt.Sprintf("bank-%d", i+1), "mrmarket bank serving",
			append([]string{"bank", "serve", "--store", store, "--http", "", "--tick", "1s"}, common...)...).Start(t)
	}
	for i := range 2 {
		add(&c.brokers, fmt.Sprintf("broker-%d", i+1), "mrmarket broker on",
			append([]string{"broker", "--tick", tick, "--settle", "1s", "--http", ""}, common...)...).Start(t)
	}
	for _, h := range c.layout {
		add(&c.agents, "agent-"+h.ID, "mrmarket agent "+h.ID,
			append([]string{"agent", "--sim", "--host", h.ID, "--vms-per-host", fmt.Sprint(len(spenders)),
				"--users", strings.Join(spenders, ","), "--tick", tick, "--state", filepath.Join(c.dir, "agents", h.ID+".json")}, common...)...).Start(t)
	}
	c.waitReplicated(t, time.Minute)
	return c
}

// makeAssets does the admin's step of the bring-up (deploy/README.md):
// `mrmarket nats assets` creates the streams and buckets the daemons only
// open, with every node's replicas. A cluster still electing its first
// meta leader cannot place them yet: the command is run again then.
func (c *cluster) makeAssets(t testing.TB, bin string, common []string) {
	t.Helper()
	args := append([]string{"nats", "assets", "--js-replicas", fmt.Sprint(c.replicas)}, common...)
	var out []byte
	err := retry.Do(context.Background(), retry.Options{InitialBackoff: time.Second, MaxTries: 4}, func(error) bool { return true },
		func(context.Context) error {
			var err error
			out, err = exec.Command(bin, args...).CombinedOutput()
			return err
		})
	if err != nil {
		t.Fatalf("mrmarket nats assets: %v\n%s", err, out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
}

// bootstrap does what an operator does once: every principal's
// credentials, registered in the bank's store with the admin's record, and
// every user's grant.
func (c *cluster) bootstrap(t testing.TB, store string) {
	t.Helper()
	var err error
	if c.admin, err = c.keys.Ensure(wire.RoleAdmin, "admin"); err != nil {
		t.Fatal(err)
	}
	if err := c.keys.WriteAdminKey(c.admin); err != nil {
		t.Fatal(err)
	}
	self, err := c.keys.Ensure(wire.RoleBank, "bank")
	if err != nil {
		t.Fatal(err)
	}
	b, err := bank.Open(store, bank.Options{AdminKey: c.admin.Public(), Signer: self})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if _, err := b.AddPrincipal(ctx, &wire.PrincipalRequest{Key: c.admin.Public(), Name: "admin", Role: wire.RoleAdmin}); err != nil {
		t.Fatal(err)
	}
	register := func(role, name string) {
		s, err := c.keys.Ensure(role, name)
		if err != nil {
			t.Fatal(err)
		}
		req := &wire.PrincipalRequest{Key: s.Public(), Name: name, Role: role, Cert: signing.SealPrincipal(c.admin, s.Public(), name, role)}
		if _, err := b.AddPrincipal(ctx, req); err != nil {
			t.Fatalf("registering %s %s: %v", role, name, err)
		}
	}
	register(wire.RoleBank, "bank")
	register(wire.RoleBroker, "broker")
	for _, h := range c.layout {
		register(wire.RoleAgent, h.ID)
	}
	for _, u := range append(append([]string{}, spenders...), payers...) {
		register(wire.RoleUser, u)
		if _, err := b.Grant(ctx, &wire.GrantRequest{ID: "grant-" + u, User: u, Amount: grantEach}); err != nil {
			t.Fatal(err)
		}
	}
}

// connect is a client connection to the cluster as the admin (it signs
// each request as the user it acts for, from the credentials).
func (c *cluster) connect(t testing.TB, name string) *nats.Conn {
	t.Helper()
	nc, err := natsutil.ConnectWith(c.url, natsutil.ConnectOptions{Name: name, Signer: c.admin, CAFile: c.ca})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// bank and broker are the clients the users' commands use, over nc.
func (c *cluster) bank(nc *nats.Conn) bank.Client {
	return bank.Client{NC: nc, Keys: c.keys, AdminKey: c.admin.Public()}
}

func (c *cluster) broker(nc *nats.Conn) broker.Client {
	return broker.Client{NC: nc, Keys: c.keys, AdminKey: c.admin.Public()}
}

// streams are the market's JetStream assets.
var streams = []string{"KV_" + wire.BucketPlans, "KV_" + wire.BucketHosts, "KV_" + wire.BucketNonces, wire.StreamEvents}

// waitReplicated waits until every asset has its replicas, a leader and
// every follower current.
func (c *cluster) waitReplicated(t testing.TB, total time.Duration) {
	t.Helper()
	nc := c.connect(t, "faults-replicas")
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	testpoll.CheckFor(t, total, 100*time.Millisecond, func() error {
		for _, name := range streams {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			s, err := js.Stream(ctx, name)
			cancel()
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			info := s.CachedInfo()
			if info.Config.Replicas != c.replicas || c.replicas > 1 && (info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != c.replicas-1) {
				return fmt.Errorf("%s: %d replicas, cluster %+v", name, info.Config.Replicas, info.Cluster)
			}
			if info.Cluster == nil {
				continue
			}
			for _, r := range info.Cluster.Replicas {
				if !r.Current || r.Offline {
					return fmt.Errorf("%s: replica %s not current", name, r.Name)
				}
			}
		}
		return nil
	})
}

// leaderOf is the node that leads stream name.
func (c *cluster) leaderOf(t testing.TB, name string) int {
	t.Helper()
	nc := c.connect(t, "faults-leader")
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if info := s.CachedInfo(); info.Cluster == nil || func() error { _, err := fmt.Sscanf(info.Cluster.Leader, "n%d", &n); return err }() != nil {
		t.Fatalf("%s: no leader named n<i>: %+v", name, info.Cluster)
	}
	return n - 1
}

// vmsOf are user's VMs, one per host.
func (c *cluster) vmsOf(user string) []string {
	var vms []string
	for _, h := range c.layout {
		for _, vm := range h.VMs {
			if vm.Owner == user {
				vms = append(vms, vm.ID)
			}
		}
	}
	return vms
}

// waitVMs waits until the brokers see every host's VMs.
func (c *cluster) waitVMs(t testing.TB, nc *nats.Conn) {
	t.Helper()
	want := 0
	for _, h := range c.layout {
		want += len(h.VMs)
	}
	testpoll.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		rep, err := c.broker(nc).VMs(ctx, &wire.VMsRequest{})
		if err != nil {
			return err
		}
		if len(rep.VMs) < want {
			return fmt.Errorf("the broker sees %d VMs, want %d", len(rep.VMs), want)
		}
		return nil
	})
}

// logsBetween is what the daemons logged from from to to (slog's text
// lines, by their time= field), at most max lines, each named by its
// daemon: a failed row's account of itself, where the logs are not kept.
func (c *cluster) logsBetween(from, to time.Time, max int) string {
	type line struct {
		at   time.Time
		text string
	}
	logs, _ := filepath.Glob(filepath.Join(c.dir, "*.log"))
	var lines []line
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			continue
		}
		name := strings.TrimSuffix(filepath.Base(l), ".log")
		for text := range strings.Lines(string(b)) {
			rest, ok := strings.CutPrefix(text, "time=")
			if !ok {
				continue
			}
			stamp, rest, _ := strings.Cut(rest, " ")
			at, err := time.Parse(time.RFC3339Nano, stamp)
			if err != nil || at.Before(from) || at.After(to) {
				continue
			}
			lines = append(lines, line{at, at.UTC().Format("15:04:05.000") + " " + name + ": " + strings.TrimSpace(rest)})
		}
	}
	slices.SortStableFunc(lines, func(a, b line) int { return a.at.Compare(b.at) })
	var b strings.Builder
	for i, l := range lines {
		if i == max {
			fmt.Fprintf(&b, "    … %d more\n", len(lines)-max)
			break
		}
		fmt.Fprintf(&b, "    %s\n", l.text)
	}
	return b.String()
}

// keepLogs copies the daemons' logs in dir to $MRM_FAULTS_LOGS, when set:
// the test's directory goes with it, and a passing run's slow-request
// lines are worth reading too.
func keepLogs(t testing.TB, dir string) {
	to := os.Getenv("MRM_FAULTS_LOGS")
	if to == "" {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Logf("keeping logs: %v", err)
		return
	}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err == nil {
			err = os.WriteFile(filepath.Join(to, filepath.Base(l)), b, 0o644)
		}
		if err != nil {
			t.Logf("keeping logs: %v", err)
		}
	}
	t.Logf("daemon logs kept in %s", to)
}

// A failed row shows what the daemons logged in its window, in time order
// across the daemons' logs.
func TestLogsBetween(t *testing.T) {
	c := &cluster{dir: t.TempDir()}
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(c.dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("bank-1.log", "=== start bank serve\ntime=2026-11-29T07:25:08.832Z level=WARN msg=\"nats: connection lost\"\ntime=2026-11-29T07:25:10Z level=INFO msg=late\n")
	write("broker-1.log", "time=2026-11-29T07:25:08.83Z level=INFO msg=first\ntime=2026-11-29T07:25:07Z level=INFO msg=early\n")
	from, _ := time.Parse(time.RFC3339, "2026-11-29T07:25:08Z")
	got := c.logsBetween(from, from.Add(time.Second), 10)
	want := "    07:25:08.830 broker-1: level=INFO msg=first\n    07:25:08.832 bank-1: level=WARN msg=\"nats: connection lost\"\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}
