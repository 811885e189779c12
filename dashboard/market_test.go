package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/cli"
	"github.com/mrmarket/mrmarket/dashboard"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

var (
	admin = rpc.As{Role: wire.RoleAdmin, Name: wire.RoleAdmin}
	alice = rpc.As{Role: wire.RoleUser, Name: "alice"}
	bob   = rpc.As{Role: wire.RoleUser, Name: "bob"}
)

// live is a market running on the wall clock as `mrmarket up` runs it (a
// 1 s tick, its data directory), and its dashboard served on a loopback
// port, as up serves it.
type live struct {
	nats string
	keys signing.CredsDir
	url  string // the dashboard's, http://127.0.0.1:port
}

// startLive starts two hosts with a VM of alice and one of bob each, and
// the dashboard with the admin's view warm.
func startLive(t *testing.T) *live {
	t.Helper()
	hosts, err := market.Layout(2, 2, []string{"alice", "bob"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := market.Start(context.Background(), market.Config{Dir: t.TempDir(), NATSPort: -1, Hosts: hosts,
		Users: []string{"alice", "bob"}, TickPeriod: time.Second, AgentState: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran; m.Close() })
	d, err := dashboard.New(dashboard.Config{Keys: m.Keys(), AdminKey: m.AdminKey(), Warm: []rpc.As{admin},
		Connect: func(name string, s *signing.Signer) (*nats.Conn, error) {
			return natsutil.ConnectWith(m.URL, natsutil.ConnectOptions{Name: name, Signer: s, CAFile: m.CAFile})
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	t.Cleanup(d.Close) // first: it ends the live streams the server waits on
	return &live{nats: m.URL, keys: m.Keys(), url: srv.URL}
}

// mrmarket runs the command line against the market, as a user would in
// another shell, and fails the test if it fails.
func (l *live) mrmarket(t *testing.T, args ...string) string {
	t.Helper()
	var out, errs bytes.Buffer
	full := append(append([]string{"mrmarket"}, args...), "--nats", l.nats, "--creds", string(l.keys))
	if code := cli.Main(full, &out, &errs); code != 0 {
		t.Fatalf("mrmarket %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errs.String())
	}
	return out.String()
}

// link is a one-time sign-in link for who, as `mrmarket dashboard login`
// prints it.
func (l *live) link(t *testing.T, who rpc.As) string {
	t.Helper()
	args := []string{"mrmarket", "dashboard", "login", "--creds", string(l.keys), "--url", l.url}
	if who.Role == wire.RoleUser {
		args = append(args, "--user", who.Name)
	}
	var out, errs bytes.Buffer
	if code := cli.Main(args, &out, &errs); code != 0 {
		t.Fatalf("dashboard login: exit %d: %s", code, errs.String())
	}
	return strings.TrimSpace(out.String())
}

// session is an HTTP client signed in as who.
func (l *live) session(t *testing.T, who rpc.As) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	resp, err := c.Get(l.link(t, who))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("signing in as %s: %s", who.Name, resp.Status)
	}
	return c
}

// state is the session's /state.json.
func (l *live) state(t *testing.T, c *http.Client) dashboard.Snapshot {
	t.Helper()
	resp, err := c.Get(l.url + "/state.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s dashboard.Snapshot
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("state.json: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// waitState polls the session's state until ok holds, for at most within.
func (l *live) waitState(t *testing.T, c *http.Client, within time.Duration, ok func(dashboard.Snapshot) bool) dashboard.Snapshot {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s := l.state(t, c)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			return s
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// jobFile writes a deadline job on alice's VMs.
func jobFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "etl.json")
	job := `{"name": "etl", "vms": ["h1-vm1", "h2-vm1"], "maps": 16, "reduces": 2, "map_slots": 4, "reduce_slots": 4,
	  "profile": {"map_avg": 20, "map_max": 27, "reduce_avg": 20, "reduce_max": 27}}`
	if err := os.WriteFile(p, []byte(job), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// daemonOutput is a daemon's output, written while the test reads it.
type daemonOutput struct {
	mu sync.Mutex
	b  strings.Builder
}

func (o *daemonOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *daemonOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// runDaemon runs a long-running mrmarket command until the test ends, and
// waits for its output to show ready.
func runDaemon(t *testing.T, ready string, args ...string) *daemonOutput {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, done := &daemonOutput{}, make(chan struct{})
	go func() {
		defer close(done)
		if err := cli.App(out, out).RunContext(ctx, append([]string{"mrmarket"}, args...)); err != nil {
			fmt.Fprintf(out, "EXIT: %v\n", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	testpoll.CheckFor(t, 60*time.Second, 20*time.Millisecond, func() error {
		select {
		case <-done:
			return fmt.Errorf("mrmarket %s exited:\n%s", args[0], out)
		default:
		}
		if !strings.Contains(out.String(), ready) {
			return fmt.Errorf("mrmarket %s did not print %q within 60s:\n%s", args[0], ready, out)
		}
		return nil
	})
	return out
}

// upBanner is what the tests read of up's banner: where NATS and the
// credentials are, where the dashboard is, and the admin's sign-in link.
var upBanner = []*regexp.Regexp{
	regexp.MustCompile(`(?m)^  NATS +(\S+)`),
	regexp.MustCompile(`(?m)^  creds +(\S+)`),
	regexp.MustCompile(`(?m)^  dashboard (http://\S+)/$`),
	regexp.MustCompile(`(?m)^  sign in as the admin [^:]*: (\S+)$`),
}

// startUp runs `mrmarket up` as the README has a person run it (two hosts
// with a VM of alice and one of bob each, a 1 s tick), on free ports,
// until the test ends; the dashboard is the one up serves on its --http
// address, and adminLink the sign-in link its banner prints.
func startUp(t *testing.T) (l *live, adminLink string) {
	t.Helper()
	out := runDaemon(t, "\ntry:\n", "up", "--data", filepath.Join(t.TempDir(), "data"), "--hosts", "2", "--vms-per-host", "2",
		"--users", "alice,bob", "--listen", fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t)), "--http", "127.0.0.1:0")
	var found []string
	for _, re := range upBanner {
		m := re.FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("up's banner has no %s:\n%s", re, out)
		}
		found = append(found, m[1])
	}
	return &live{nats: found[0], keys: signing.CredsDir(found[1]), url: found[2]}, found[3]
}
