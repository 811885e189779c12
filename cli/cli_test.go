package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/cli"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

type run struct {
	code           int
	stdout, stderr string
}

func mrmarket(args ...string) run {
	var out, errb bytes.Buffer
	code := cli.Main(append([]string{"mrmarket"}, args...), &out, &errb)
	return run{code, out.String(), errb.String()}
}

func startMarket(t *testing.T) (*market.Market, *time.Time) {
	t.Helper()
	clock := time.Date(2026, 5, 1, 8, 0, 0, 0, time.UTC)
	m, err := market.Start(context.Background(), market.Config{
		Dir: t.TempDir(), NATSPort: -1, Now: func() time.Time { return clock },
		Hosts: []market.HostSpec{{ID: "host-1", CPUs: 1, VMs: []agent.VM{{ID: "a1", Owner: "alice"}, {ID: "b1", Owner: "bob"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	t.Setenv("MRM_CREDS", string(m.Keys())) // the credentials `up` wrote sign the commands
	return m, &clock
}

// grant has the admin grant each user the amount, on the market at n
// (--nats=URL).
func grant(t *testing.T, n, amount string, users ...string) {
	t.Helper()
	for _, u := range users {
		if r := mrmarket("bank", "grant", n, "--user", u, "--amount", amount); r.code != 0 {
			t.Fatalf("grant %s to %s: %+v", amount, u, r)
		}
	}
}

// ledgerOf is the market's ledger as JSON: equal before and after means
// nothing moved.
func ledgerOf(t *testing.T, m *market.Market) string {
	t.Helper()
	l, err := m.Bank.Ledger(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(l)
	return string(b)
}

func TestCommandsAgainstARunningMarket(t *testing.T) {
	m, clock := startMarket(t)
	n := "--nats=" + m.URL

	r := mrmarket("bank", "grant", n, "--user", "alice", "--amount", "100", "--id", "g1")
	if r.code != 0 || !strings.Contains(r.stdout, "granted 100 to alice") {
		t.Fatalf("grant: %+v", r)
	}
	r = mrmarket("bank", "grant", n, "--user", "alice", "--amount", "100", "--id", "g1")
	if r.code != 0 || !strings.Contains(r.stdout, "already applied") {
		t.Fatalf("repeated grant: %+v", r)
	}
	r = mrmarket("spend", n, "--user", "alice", "--budget", "12", "--duration", "1h", "--vm", "a1", "--json")
	if r.code != 0 {
		t.Fatalf("spend: %+v", r)
	}
	var sp wire.SpendReply
	if err := json.Unmarshal([]byte(r.stdout), &sp); err != nil || sp.Plan.Status != wire.PlanRunning {
		t.Fatalf("spend --json: %v %+v", err, r)
	}
	*clock = clock.Add(30 * time.Minute)
	if err := m.Tick(context.Background(), *clock); err != nil {
		t.Fatal(err)
	}
	r = mrmarket("vms", n)
	if r.code != 0 || !strings.Contains(r.stdout, "a1") || !strings.Contains(r.stdout, sp.Plan.ID) {
		t.Fatalf("vms: %+v", r)
	}
	r = mrmarket("price", n, "--json")
	var pr wire.PriceReply
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &pr) != nil || len(pr.Hosts) != 1 || pr.Hosts[0].Price <= 0 {
		t.Fatalf("price: %+v", r)
	}
	r = mrmarket("balance", n, "--user", "alice", "--json")
	var bal wire.BalanceReply
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &bal) != nil || bal.Spent.String() != "6" || bal.Balance.String() != "88" {
		t.Fatalf("balance after half the plan: %+v (%+v)", bal, r)
	}
	r = mrmarket("plans", n, "--user", "alice")
	if r.code != 0 || !strings.Contains(r.stdout, "running") {
		t.Fatalf("plans: %+v", r)
	}
	r = mrmarket("cancel", n, "--user", "bob", "--plan", sp.Plan.ID)
	if r.code != cli.ExitRefused {
		t.Fatalf("bob cancels alice's plan: %+v", r)
	}
	r = mrmarket("cancel", n, "--user", "alice", "--plan", sp.Plan.ID)
	if r.code != 0 || !strings.Contains(r.stdout, "released") {
		t.Fatalf("cancel: %+v", r)
	}
	r = mrmarket("ledger", n)
	if r.code != 0 || !strings.Contains(r.stdout, "holds") {
		t.Fatalf("ledger: %+v", r)
	}
}

// TestBadInputToEveryCommand: every bad command line exits non-zero with a
// clear message and changes nothing in the bank.
func TestBadInputToEveryCommand(t *testing.T) {
	m, _ := startMarket(t)
	n := "--nats=" + m.URL
	grant(t, n, "10", "alice")
	refuse(t, m, []refusal{
		{[]string{"bank", "grant", n, "--user", "alice", "--amount", "-5"}, cli.ExitBadInput, "greater than zero"},
		{[]string{"bank", "grant", n, "--user", "alice", "--amount", "0"}, cli.ExitBadInput, "greater than zero"},
		{[]string{"bank", "grant", n, "--user", "alice", "--amount", "1e9"}, cli.ExitBadInput, "not a decimal"},
		{[]string{"bank", "grant", n, "--user", "alice", "--amount", "abc"}, cli.ExitBadInput, "not a decimal"},
		{[]string{"bank", "grant", n, "--user", "alice", "--amount", "0.0000001"}, cli.ExitBadInput, "6 decimal"},
		{[]string{"bank", "grant", n, "--user", "alice", "--amount", "99999999999999"}, cli.ExitBadInput, "maximum"},
		{[]string{"bank", "grant", n, "--user", "alice", "--amount", " 5"}, cli.ExitBadInput, "not a decimal"},
		{[]string{"bank", "grant", n, "--user", "alice", "--amount", "+5"}, cli.ExitBadInput, "not a decimal"},
		{[]string{"bank", "grant", n, "--user", "alice"}, cli.ExitBadInput, "--amount is required"},
		{[]string{"bank", "grant", n, "--amount", "5"}, cli.ExitBadInput, "--user"},
		{[]string{"bank", "grant", n, "--user", "a.b", "--amount", "5"}, cli.ExitBadInput, "invalid user"},
		{[]string{"balance", n, "--user", "nobody"}, cli.ExitBadInput, "no credentials for user nobody"},
		{[]string{"up", "--data", t.TempDir(), "--idle-below", "1.5"}, cli.ExitBadInput, "--idle-below must be between 0 and 1"},
		{[]string{"agent", "--host", "host-1", "--idle-below", "0"}, cli.ExitBadInput, "--idle-below must be between 0 and 1"},
		{[]string{"spend", n, "--user", "alice", "--budget", "5", "--duration", "0s", "--vm", "a1"}, cli.ExitBadInput, "duration"},
		{[]string{"spend", n, "--user", "alice", "--budget", "5", "--duration", "soon", "--vm", "a1"}, cli.ExitBadInput, "duration"},
		{[]string{"spend", n, "--user", "alice", "--budget", "5", "--duration", "1y", "--vm", "a1"}, cli.ExitBadInput, `--duration "1y" is not a duration`},
		{[]string{"spend", n, "--user", "alice", "--budget", "-1", "--duration", "1h", "--vm", "a1"}, cli.ExitBadInput, "greater than zero"},
		{[]string{"spend", n, "--user", "alice", "--budget", "5", "--duration", "1h"}, cli.ExitBadInput, "--vm"},
		{[]string{"spend", n, "--user", "alice", "--budget", "5", "--duration", "1h", "--vm", "nope"}, cli.ExitRefused, "nope"},
		{[]string{"spend", n, "--user", "alice", "--budget", "5", "--duration", "1h", "--vm", "b1"}, cli.ExitRefused, "b1"},
		{[]string{"spend", n, "--user", "alice", "--budget", "50", "--duration", "1h", "--vm", "a1"}, cli.ExitRefused, "insufficient"},
		{[]string{"spend", n, "--user", "alice", "--budget", "5", "--duration", "1h", "--vm", "a1", "--strategy", "greedy"}, cli.ExitBadInput, "unknown strategy"},
		{[]string{"cancel", n, "--user", "alice"}, cli.ExitBadInput, "--plan"},
		{[]string{"cancel", n, "--user", "alice", "--plan", "no-such-plan"}, cli.ExitRefused, "no-such-plan"},
		{[]string{"price", n, "--host", "host-9"}, cli.ExitRefused, "host-9"},
		{[]string{"vms", n, "--host", "host-9"}, cli.ExitRefused, `unknown host "host-9"`},
		{[]string{"vms", n, "--owner", "a b"}, cli.ExitBadInput, "invalid owner"},
		{[]string{"transfer", n, "--user", "alice", "--to", "alice", "--amount", "1"}, cli.ExitBadInput, "to itself"},
		{[]string{"transfer", n, "--user", "alice", "--to", "bob", "--amount", "1000"}, cli.ExitRefused, "insufficient"},
		{[]string{"transfer", n, "--user", "alice", "--to", "nobody", "--amount", "1"}, cli.ExitRefused, "nobody"},
		{[]string{"transfer", n, "--user", "mallory", "--to", "alice", "--amount", "1"}, cli.ExitBadInput, "no credentials"},
		{[]string{"statement", n}, cli.ExitBadInput, "exactly one of user or account"},
		{[]string{"statement", n, "--user", "alice", "--limit", "0"}, cli.ExitBadInput, "--limit must be 1 to 10000 (default 100)"},
		{[]string{"statement", n, "--user", "alice", "--limit", "10001"}, cli.ExitBadInput, "--limit must be 1 to 10000 (default 100)"},
		{[]string{"statement", n, "--account", "provider:none"}, cli.ExitRefused, "unknown account"},
		{[]string{"bank", "income", "set", n, "--user", "alice", "--amount", "5", "--every", "1s"}, cli.ExitBadInput, "income period"},
		{[]string{"bank", "income", "set", n, "--user", "alice", "--amount", "-5"}, cli.ExitBadInput, "greater than zero"},
		{[]string{"bank", "principal", "add", n, "--name", "eve", "--role", "king"}, cli.ExitBadInput, "unknown role"},
		{[]string{"bank", "grant", n, "--creds", "/nonexistent", "--user", "alice", "--amount", "5"}, cli.ExitBadInput, "no credentials for admin"},
		{[]string{"up", "--hosts", "0"}, cli.ExitBadInput, "hosts"},
		{[]string{"up", "--tick", "1ns"}, cli.ExitBadInput, "--tick"},
		{[]string{"frobnicate"}, cli.ExitBadInput, ""},
		{[]string{"balance", "--nats=nats://127.0.0.1:1", "--user", "alice"}, cli.ExitUnavailable, "cannot reach the market"},
	})
}

// refusal is a command line that must fail: its exit code and what stderr
// says.
type refusal struct {
	args []string
	code int
	msg  string
}

// refuse runs each refused command line: it exits with its code, says why
// on stderr in one line (no help, nothing on stdout), and the ledger is as
// it was.
func refuse(t *testing.T, m *market.Market, cases []refusal) {
	t.Helper()
	before := ledgerOf(t, m)
	for _, c := range cases {
		r := mrmarket(c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.msg) || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("mrmarket %q: exit %d, stdout %q, stderr %q; want exit %d and one line mentioning %q", c.args, r.code, r.stdout, r.stderr, c.code, c.msg)
		}
	}
	if after := ledgerOf(t, m); after != before {
		t.Fatalf("refused commands changed the ledger:\n%s\n→\n%s", before, after)
	}
}

func TestStrategiesFromTheCommandLine(t *testing.T) {
	m, clock := startMarket(t)
	n := "--nats=" + m.URL
	grant(t, n, "100", "alice")
	planFile := filepath.Join(t.TempDir(), "wf.json")
	if err := os.WriteFile(planFile, []byte(`{"workflows": [{"name": "w", "weight": 1, "stages": [{"name": "one", "weight": 3, "vms": ["a1"]}]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	r := mrmarket("spend", n, "--user", "alice", "--budget", "10", "--duration", "1h", "--plan", planFile, "--strategy", "stage", "--id", "p1", "--json")
	var sp wire.SpendReply
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &sp) != nil || sp.Plan.Strategy != "stage" || sp.Plan.VMs[0].Rate <= 0 {
		t.Fatalf("spend --plan: %+v", r)
	}
	if r = mrmarket("spend", n, "--user", "alice", "--id", "p1", "--more", "5"); r.code != 0 || !strings.Contains(r.stdout, "now spends 15") {
		t.Fatalf("spend --more: %+v", r)
	}
	if r = mrmarket("spend", n, "--user", "alice", "--id", "p1", "--less", "2"); r.code != 0 || !strings.Contains(r.stdout, "now spends 13") {
		t.Fatalf("spend --less: %+v", r)
	}
	if r = mrmarket("spend", n, "--user", "alice", "--id", "p1", "--less", "200"); r.code != cli.ExitRefused {
		t.Fatalf("spend --less beyond the unspent: %+v", r)
	}
	*clock = clock.Add(10 * time.Second)
	if err := m.Tick(context.Background(), *clock); err != nil {
		t.Fatal(err)
	}
	r = mrmarket("price", n, "--host", "host-1", "--what-if", "price", "--performance", "0.5", "--guarantee", "0.9", "--json")
	var pr wire.PredictReply
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &pr) != nil || pr.Observations < 1 || pr.Spending <= 0 {
		t.Fatalf("price --what-if: %+v", r)
	}
	for _, c := range []struct {
		code int
		msg  string
		args []string
	}{
		{cli.ExitBadInput, "no such file", []string{"spend", n, "--user", "alice", "--budget", "1", "--duration", "1h", "--plan", "/nonexistent.json"}},
		{cli.ExitBadInput, "unknown field", []string{"spend", n, "--user", "alice", "--budget", "1", "--duration", "1h", "--plan", writeFile(t, `{"workflows": [], "extra": 1}`)}},
		{cli.ExitBadInput, "boost", []string{"spend", n, "--user", "alice", "--budget", "1", "--duration", "1h", "--vm", "a1", "--strategy", "bottleneck", "--boost", "1"}},
		{cli.ExitBadInput, "needs workflows", []string{"spend", n, "--user", "alice", "--budget", "1", "--duration", "1h", "--vm", "a1", "--strategy", "stage"}},
		{cli.ExitBadInput, "host=weight", []string{"spend", n, "--user", "alice", "--budget", "1", "--duration", "1h", "--vm", "a1", "--strategy", "best-response", "--host-weight", "host-1"}},
		{cli.ExitBadInput, "need the plan's --id", []string{"spend", n, "--user", "alice", "--more", "1"}},
		{cli.ExitRefused, "unknown plan", []string{"spend", n, "--user", "alice", "--id", "nope", "--more", "1"}},
		{cli.ExitBadInput, "unknown what-if", []string{"price", n, "--host", "host-1", "--what-if", "weather"}},
		{cli.ExitBadInput, "guarantee", []string{"price", n, "--host", "host-1", "--what-if", "price", "--performance", "0.5", "--guarantee", "2"}},
	} {
		if r := mrmarket(c.args...); r.code != c.code || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("mrmarket %s: exit %d, stderr %q; want %d mentioning %q", strings.Join(c.args, " "), r.code, r.stderr, c.code, c.msg)
		}
	}
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBankCommands(t *testing.T) {
	m, clock := startMarket(t)
	n := "--nats=" + m.URL
	for _, args := range [][]string{
		{"bank", "grant", n, "--user", "alice", "--amount", "100"},
		{"bank", "grant", n, "--user", "bob", "--amount", "1"},
		{"transfer", n, "--user", "alice", "--to", "bob", "--amount", "2.5", "--id", "t1", "--memo", "thanks"},
		{"bank", "principal", "add", n, "--name", "carol"},
		{"bank", "grant", n, "--user", "carol", "--amount", "7"},
		{"transfer", n, "--user", "carol", "--to", "bob", "--amount", "1"},
		{"bank", "income", "set", n, "--user", "alice", "--amount", "10", "--every", "1h"},
		{"bank", "income", "set", n, "--fair", "--amount", "3", "--every", "24h"},
	} {
		if r := mrmarket(args...); r.code != 0 {
			t.Fatalf("mrmarket %s: %+v", strings.Join(args, " "), r)
		}
	}
	*clock = clock.Add(time.Minute)
	if err := m.Tick(context.Background(), *clock); err != nil {
		t.Fatal(err)
	}
	r := mrmarket("statement", n, "--user", "bob", "--json")
	var st wire.StatementReply
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &st) != nil {
		t.Fatalf("statement: %+v", r)
	}
	// bob: 1 granted, 2.5 from alice, 1 from carol, 1 of the fair 3 (alice, bob, carol).
	if st.Balance.String() != "5.5" || len(st.Entries) != 4 {
		t.Fatalf("bob's statement: %+v", st)
	}
	r = mrmarket("statement", n, "--user", "alice")
	if r.code != 0 || !strings.Contains(r.stdout, "thanks") || !strings.Contains(r.stdout, "-2.5") || !strings.Contains(r.stdout, "income") {
		t.Fatalf("alice's statement: %+v", r)
	}
}

// TestBankServe runs the bank daemon on its own against a NATS server and
// uses it with the credentials it created.
func TestBankServe(t *testing.T) {
	dir := t.TempDir()
	ns := natstest.Server(t)
	natstest.Assets(t, natstest.Connect(t, ns)) // the admin's step: the bank opens the audit stream
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	var out bytes.Buffer
	go func() {
		err := cli.App(&out, &out).RunContext(ctx, []string{"mrmarket", "bank", "serve", "--store", "sqlite:" + filepath.Join(dir, "bank.db"),
			"--nats", ns.ClientURL(), "--creds", filepath.Join(dir, "creds"), "--http", "127.0.0.1:0", "--tick", "50ms"})
		done <- cli.ExitCode(err)
	}()
	defer func() { cancel(); <-done }()
	// A second command line would race with this one on urfave/cli's global
	// help flag, so the client side is the bank client the CLI uses.
	nc := natstest.Connect(t, ns)
	keys := signing.CredsDir(filepath.Join(dir, "creds"))
	bc := bank.Client{NC: nc, Keys: keys}
	var rep wire.GrantReply
	err := testpoll.Wait(10*time.Second, 20*time.Millisecond, func() (err error) {
		// The bank grants only to registered users: dora first, with the
		// admin's record (the admin key is the bank's first start's).
		admin, err := keys.Signer(wire.RoleAdmin, "admin")
		if err != nil {
			return err
		}
		dora, err := keys.Ensure(wire.RoleUser, "dora")
		if err != nil {
			return err
		}
		if _, err := bc.AddPrincipal(ctx, &wire.PrincipalRequest{Key: dora.Public(), Name: "dora", Role: wire.RoleUser,
			Cert: signing.SealPrincipal(admin, dora.Public(), "dora", wire.RoleUser)}); err != nil {
			return err
		}
		rep, err = bc.Grant(ctx, &wire.GrantRequest{ID: "g", User: "dora", Amount: 3_000_000})
		return err
	})
	if err != nil || rep.Balance != 3_000_000 {
		t.Fatalf("grant through bank serve: %+v %v", rep, err)
	}
}

// TestClusterCreate provisions a cluster on libvirt's test driver in one
// command (the driver's state lives in the command's connection).
func TestClusterCreate(t *testing.T) {
	if os.Getenv("CI") != "true" {
		if r := mrmarket("cluster", "list", "--host", "h1=test:///default"); r.code != 0 {
			t.Skipf("libvirt not available (apt-get install libvirt0): %s", r.stderr)
		}
	}
	r := mrmarket("cluster", "create", "--name", "c1", "--owner", "alice", "--workers", "2", "--image", "/img/hadoop.qcow2",
		"--host", "host-1=test:///default", "--seed-dir", t.TempDir(), "--domain-type", "test", "--json")
	var nodes []struct{ VM, Role, Host string }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &nodes) != nil || len(nodes) != 3 || nodes[0].VM != "c1-master-0" {
		t.Fatalf("cluster create: %+v", r)
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"cluster", "create", "--name", "c1", "--owner", "alice"}, "--host"},
		{[]string{"cluster", "create", "--name", "a.b", "--owner", "alice", "--host", "h=test:///default", "--image", "x"}, "cluster name"},
		{[]string{"cluster", "create", "--name", "c1", "--owner", "alice", "--host", "h=test:///default"}, "image"},
		{[]string{"cluster", "list", "--host", "nouri"}, "id=libvirt-uri"},
	} {
		if r := mrmarket(c.args...); r.code != cli.ExitBadInput || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("mrmarket %v: %+v, want exit 2 mentioning %q", c.args, r, c.msg)
		}
	}
}

func TestDemo(t *testing.T) {
	r := mrmarket("demo", "--json")
	if r.code != 0 {
		t.Fatalf("demo: %+v", r)
	}
	var rep market.DemoReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Ledger.Violations) != 0 || rep.Ratio < 2-1e-9 || rep.Ratio > 2+1e-9 {
		t.Fatalf("demo report: ratio %v, violations %v", rep.Ratio, rep.Ledger.Violations)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil {
		t.Fatal(err)
	}
	wall, _ := raw["wall_time"].(string)
	if d, err := time.ParseDuration(wall); raw["snapshot_at"] != "30m0s" || raw["end_at"] != "1h0m40s" || err != nil || d != d.Round(time.Millisecond) {
		t.Errorf("demo --json: durations are Go duration strings to the millisecond: snapshot_at %v, end_at %v, wall_time %v",
			raw["snapshot_at"], raw["end_at"], raw["wall_time"])
	}
	want := map[string]string{"alice": "24", "bob": "12", "batch": "6"}
	for _, u := range rep.Users {
		if u.Spent.String() != want[u.User] || u.Held != 0 || u.Balance+u.Spent != u.Granted {
			t.Errorf("%s: %+v, want spent %s", u.User, u, want[u.User])
		}
	}
	human := mrmarket("demo")
	if human.code != 0 || !strings.Contains(human.stdout, "invariant") || !strings.Contains(human.stdout, "holds") {
		t.Fatalf("demo table: %+v", human)
	}
}
