package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/cli"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

// agentdChildEnv carries the command line of `mrmarket agent` to run in a
// child process: this test binary, re-executed (see runAgentProcess).
const agentdChildEnv = "MRM_TEST_AGENTD_ARGS"

// agentProcess is `mrmarket agent` running in a process of its own.
type agentProcess struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
	code int
}

func (p *agentProcess) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *agentProcess) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// stop sends sig and waits (at most 15s) for the process to end; it
// returns the exit code (-1: killed by a signal).
func (p *agentProcess) stop(t *testing.T, sig os.Signal) int {
	t.Helper()
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("mrmarket agent did not stop within 15s of %v; its output:\n%s", sig, p.output())
	}
	return p.code
}

// runAgentProcess runs `mrmarket agent args…` as a separate process (this
// test binary re-executed into cli.Main) until the test ends.
func runAgentProcess(t *testing.T, test string, args ...string) *agentProcess {
	t.Helper()
	enc, err := json.Marshal(append([]string{"mrmarket", "agent"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	p := &agentProcess{done: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=^"+test+"$")
	p.cmd.Env = append(os.Environ(), agentdChildEnv+"="+string(enc))
	p.cmd.Dir = t.TempDir() // --sim's relative defaults land here
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		if err != nil && p.code == 0 {
			p.code = -1
		}
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.stop(t, syscall.SIGKILL)
		}
	})
	return p
}

// agentdChild runs the command line of agentdChildEnv and exits, when this
// process is such a child; else it returns.
func agentdChild() {
	enc := os.Getenv(agentdChildEnv)
	if enc == "" {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(enc), &args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(cli.Main(args, os.Stdout, os.Stderr))
}

// TestAgentSimDaemon runs `mrmarket agent --sim` as its own process beside
// a market's bank and broker (with no simulated hosts of their own), on
// the market's TLS NATS with NKey logins and per-role permissions: the
// host's state reaches the broker, a spend on one of its VMs is charged to
// the user and paid to the host, and after a SIGKILL the agent restarted
// on its state file charges the same bid on, never twice; SIGTERM stops it
// cleanly.
func TestAgentSimDaemon(t *testing.T) {
	agentdChild()
	m, err := market.Start(context.Background(), market.Config{Dir: t.TempDir(), NATSPort: -1, Users: []string{"alice", "bob"},
		TickPeriod: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { m.Run(ctx); close(ran) }() // the bank and the broker tick on the wall clock
	t.Cleanup(func() { cancel(); <-ran })
	t.Setenv("MRM_CREDS", string(m.Keys()))
	n := "--nats=" + m.URL

	// The operator registers the host's agent (its key lands in
	// creds/agents/host-7.nk): NATS admits it at once.
	if r := mrmarket("bank", "principal", "add", n, "--name", "host-7", "--role", "agent"); r.code != 0 {
		t.Fatalf("principal add: %+v", r)
	}
	state := filepath.Join(t.TempDir(), "host-7.json")
	args := []string{"--sim", "--host", "host-7", "--vms-per-host", "2", "--users", "alice,bob", "--tick", "50ms",
		"--nats", m.URL, "--creds", string(m.Keys()), "--state", state}
	p := runAgentProcess(t, "TestAgentSimDaemon", args...)

	vms := func() (wire.VMsReply, error) {
		var rep wire.VMsReply
		r := mrmarket("vms", n, "--json")
		if r.code != 0 {
			return rep, fmt.Errorf("vms: %+v", r)
		}
		return rep, json.Unmarshal([]byte(r.stdout), &rep)
	}
	layout, err := market.Layout(7, 2, []string{"alice", "bob"}) // what `up --hosts 7 --vms-per-host 2` runs on host-7
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, vm := range layout[6].VMs {
		want[vm.ID] = vm.Owner
	}
	testpoll.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		rep, err := vms()
		if err != nil {
			return err
		}
		got := map[string]string{}
		for _, v := range rep.VMs {
			if v.Host == "host-7" {
				got[v.VM] = v.Owner
			}
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return nil
		}
		return fmt.Errorf("host-7's state at the broker: VMs %v, want %v as up lays them out; agent output:\n%s", got, want, p.output())
	})
	if out := p.output(); !strings.Contains(out, "mrmarket agent host-7: simulated, 2 VMs (h7-vm1=alice,h7-vm2=bob)") {
		t.Errorf("the agent's start line: %q", out)
	}

	grant(t, n, "100", "alice")
	spendAt := time.Now()
	r := mrmarket("spend", n, "--user", "alice", "--budget", "36", "--duration", "1h", "--vm", "h7-vm1", "--json")
	var sp wire.SpendReply
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &sp) != nil {
		t.Fatalf("spend: %+v", r)
	}
	ledger := func() (alice wire.BalanceReply, provider money.Micro, l wire.LedgerReply, err error) {
		if alice, err = m.Bank.Balance(context.Background(), &wire.BalanceRequest{User: "alice"}); err != nil {
			return
		}
		if l, err = m.Bank.Ledger(context.Background()); err != nil {
			return
		}
		for _, a := range l.Accounts {
			if a.ID == bank.ProviderAccount("host-7") {
				provider = a.Balance
			}
		}
		if len(l.Violations) > 0 {
			err = fmt.Errorf("ledger invariant violated: %v", l.Violations)
		}
		return
	}
	// charged waits until alice has been charged more than floor and the
	// host paid what she spent; it returns what she spent.
	charged := func(floor money.Micro) money.Micro {
		t.Helper()
		var spent money.Micro
		testpoll.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
			alice, provider, _, err := ledger()
			if err != nil {
				return err
			}
			spent = alice.Spent
			if spent > floor && provider == spent && alice.Balance+alice.Held == 100_000_000-spent {
				return nil
			}
			return fmt.Errorf("alice's spend on h7-vm1 charged: spent %s (want more than %s), host-7 paid %s, balance %s, held %s; agent output:\n%s",
				spent, floor, provider, alice.Balance, alice.Held, p.output())
		})
		return spent
	}
	charged(0)
	testpoll.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		rep, err := vms()
		if err != nil {
			return err
		}
		share := map[string]float64{}
		for _, v := range rep.VMs {
			share[v.VM] = v.Share
		}
		if share["h7-vm1"] > 0.85 && share["h7-vm2"] < 0.15 {
			return nil
		}
		return fmt.Errorf("host-7's published shares %v: want h7-vm1 (funded) to hold almost all of it", share)
	})

	// Killed without a chance to save anything more, and restarted on its
	// state file: the bid is back without a new spend, and charging goes on
	// (cumulative captures with idempotent ids, the downtime excused: never
	// more than the bid's rate over the time since the spend).
	if code := p.stop(t, syscall.SIGKILL); code == 0 {
		t.Fatalf("SIGKILL: exit code %d", code)
	}
	alice, _, _, err := ledger()
	if err != nil {
		t.Fatal(err)
	}
	p = runAgentProcess(t, "TestAgentSimDaemon", args...)
	// Up before anything is read of it: a capture the killed agent sent
	// before its kill can reach the bank after the ledger was read, and
	// then the charges go on without the new agent; a SIGTERM before its
	// Main handles signals (a re-executed test binary under -race on a
	// loaded machine) kills it with exit code -1.
	testpoll.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		if !strings.Contains(p.output(), "mrmarket agent host-7") {
			return fmt.Errorf("the restarted agent has not started; its output:\n%s", p.output())
		}
		return nil
	})
	charged(alice.Spent)

	r = mrmarket("cancel", n, "--user", "alice", "--plan", sp.Plan.ID)
	if r.code != 0 {
		t.Fatalf("cancel: %+v", r)
	}
	testpoll.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		alice, provider, _, err := ledger()
		if err != nil {
			return err
		}
		if alice.Held == 0 && alice.Spent == provider && alice.Balance == 100_000_000-alice.Spent {
			if most := money.Micro(10_000 * time.Since(spendAt).Seconds()); alice.Spent > most { // 36 credits an hour
				return fmt.Errorf("alice was charged %s, more than the bid's rate allows since the spend (%s)", alice.Spent, most)
			}
			return nil
		}
		return fmt.Errorf("after cancel: alice %+v, host-7 paid %s", alice, provider)
	})
	if code := p.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM: exit code %d, want 0; output:\n%s", code, p.output())
	}
	t.Logf("the restarted agent's output:\n%s", p.output())
}

// TestAgentFlags: a bad `mrmarket agent` command line is one line on
// stderr and exit 2, before it opens or connects to anything: the same
// lines with good flags exit 4 (nothing answers at --nats).
func TestAgentFlags(t *testing.T) {
	creds := signing.CredsDir(filepath.Join(t.TempDir(), "creds"))
	if _, err := creds.Ensure(wire.RoleAgent, "host-1"); err != nil {
		t.Fatal(err)
	}
	admin, err := creds.Ensure(wire.RoleAdmin, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if err := creds.WriteAdminKey(admin); err != nil {
		t.Fatal(err)
	}
	base := []string{"agent", "--nats", "nats://127.0.0.1:1", "--creds", string(creds), "--host", "host-1"}
	for _, tc := range []struct {
		args []string
		want string // in the error line; "" = a good command line
	}{
		{[]string{"--sim", "--vms", "a1=alice,b1=bob"}, ""},
		{[]string{"--sim", "--vms-per-host", "3", "--users", "alice,bob", "--capacity", "2"}, ""},
		{[]string{"--sim"}, "--sim needs the host's VMs"},
		{[]string{"--sim", "--vms", "a1"}, `--vms "a1": want ID=OWNER`},
		{[]string{"--sim", "--vms", "a1=alice,a1=bob"}, `names VM "a1" twice`},
		{[]string{"--sim", "--vms", "a1=alice,,b1=bob"}, "an empty name"},
		{[]string{"--sim", "--vms", "a1=al/ice"}, "invalid owner in --vms"},
		{[]string{"--sim", "--vms", "a1=alice", "--vms-per-host", "2", "--users", "bob"}, "not both"},
		{[]string{"--sim", "--vms", "a1=alice", "--users", "bob"}, "--users goes with --vms-per-host"},
		{[]string{"--sim", "--vms-per-host", "2"}, "--vms-per-host needs --users"},
		{[]string{"--sim", "--vms-per-host", "0", "--users", "alice"}, "between 1 and 1000"},
		{[]string{"--sim", "--vms", "a1=alice", "--libvirt", "test:///default"}, "--libvirt (or MRM_LIBVIRT_URI) is for a libvirt host"},
		{[]string{"--sim", "--vms", "a1=alice", "--hard-cap"}, "--hard-cap is for a libvirt host"},
		{[]string{"--sim", "--vms", "a1=alice", "--link-kibps", "100"}, "--link-kibps is for a libvirt host"},
		{[]string{"--sim", "--vms", "a1=alice", "--disk-kibps", "100"}, "--disk-kibps is for a libvirt host"},
		{[]string{"--sim", "--vms", "a1=alice", "--disk-mode", "throttle"}, "--disk-mode is for a libvirt host"},
		{[]string{"--sim", "--vms", "a1=alice", "--net-mode", "none"}, "--net-mode is for a libvirt host"},
		{[]string{"--libvirt", "test:///default", "--disk-mode", "fast"}, `--disk-mode "fast": want auto, throttle, weights or none`},
		{[]string{"--libvirt", "test:///default", "--net-mode", "weights"}, `--net-mode "weights": want auto, throttle or none`},
		{[]string{"--sim", "--vms", "a1=alice", "--capacity", "-1"}, "--capacity must be between"},
		{[]string{"--sim", "--vms", "a1=alice", "--tick", "1ms"}, "--tick must be between"},
		{[]string{"--sim", "--vms", "a1=alice", "--tick", "1"}, "is not a duration"},
		{[]string{"--sim", "--vms", "a1=alice", "--idle-below", "1"}, "--idle-below must be between 0 and 1"},
		{[]string{"--vms", "a1=alice"}, "--vms needs --sim"},
		{[]string{"--vms-per-host", "2", "--users", "alice"}, "--vms-per-host needs --sim"},
		{[]string{"--sim", "--vms", "a1=alice", "--bogus"}, "flag provided but not defined: -bogus"},
	} {
		r := mrmarket(append(append([]string{}, base...), tc.args...)...)
		if tc.want == "" {
			if r.code != cli.ExitUnavailable {
				t.Errorf("agent %v: exit %d, want %d (a good command line reaching for an absent NATS): %q", tc.args, r.code, cli.ExitUnavailable, r.stderr)
			}
			continue
		}
		if r.code != cli.ExitBadInput || !strings.Contains(r.stderr, tc.want) || strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
			t.Errorf("agent %v: exit %d, stderr %q, stdout %q; want exit %d and one line saying %q", tc.args, r.code, r.stderr, r.stdout, cli.ExitBadInput, tc.want)
		}
	}
	// A host id too long to name its VMs after it.
	long := strings.Repeat("x", 62)
	if _, err := creds.Ensure(wire.RoleAgent, long); err != nil {
		t.Fatal(err)
	}
	r := mrmarket("agent", "--nats", "nats://127.0.0.1:1", "--creds", string(creds), "--host", long, "--sim", "--vms-per-host", "2", "--users", "alice")
	if r.code != cli.ExitBadInput || !strings.Contains(r.stderr, "name them with --vms") {
		t.Errorf("a long --host with --vms-per-host: %+v", r)
	}
}
