package bank_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// The crash test runs the bank as a separate process — this test binary
// re-executed with these variables — so that it can be killed with SIGKILL.
const (
	childEnv      = "MRM_BANK_CHILD"
	childStoreEnv = "MRM_BANK_CHILD_STORE"
	childNATSEnv  = "MRM_BANK_CHILD_NATS"
)

// runChildBank is a bank daemon: open the store, serve on NATS, tick, until killed.
func runChildBank() int {
	b, err := bank.Open(os.Getenv(childStoreEnv), bank.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child bank:", err)
		return 1
	}
	nc, err := natsutil.Connect(os.Getenv(childNATSEnv), "crash-test-bank")
	if err != nil {
		fmt.Fprintln(os.Stderr, "child bank:", err)
		return 1
	}
	if _, err := bank.Serve(nc, b); err != nil {
		fmt.Fprintln(os.Stderr, "child bank:", err)
		return 1
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	t := time.NewTicker(200 * time.Millisecond)
	for {
		select {
		case <-sig:
			return 0
		case now := <-t.C:
			_, _ = b.Tick(context.Background(), now)
		}
	}
}

// bankProcess is a running child bank.
type bankProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startBankProcess(t *testing.T, target, natsURL, logPath string) *bankProcess {
	t.Helper()
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", childStoreEnv+"="+target, childNATSEnv+"="+natsURL)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &bankProcess{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); log.Close(); close(p.done) }()
	return p
}

func (p *bankProcess) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// crashWorld is the crash test's setup: NATS, a store, identities.
type crashWorld struct {
	target string
	nc     *nats.Conn
	url    string
	keys   wire.CredsDir
	users  []string
}

const crashUsers = 5

func newCrashWorld(t *testing.T, target string) *crashWorld {
	t.Helper()
	ns, nc := natstest.Start(t)
	natstest.Assets(t, nc) // the audit stream the bank publishes to
	w := &crashWorld{target: target, url: ns.ClientURL(), nc: nc, keys: wire.CredsDir(filepath.Join(t.TempDir(), "creds"))}
	b, err := bank.Open(target, bank.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	register := func(role, name string) {
		s, err := w.keys.Ensure(role, name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.AddPrincipal(ctx, &wire.PrincipalRequest{Key: s.Public(), Name: name, Role: role}); err != nil {
			t.Fatal(err)
		}
	}
	register(wire.RoleAdmin, "admin")
	register(wire.RoleAgent, "host-1")
	for i := range crashUsers {
		u := fmt.Sprintf("u%d", i)
		w.users = append(w.users, u)
		register(wire.RoleUser, u)
		if _, err := b.Grant(ctx, &wire.GrantRequest{ID: "seed-" + u, User: u, Amount: 1_000_000}); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// retry repeats op (the same ids, a fresh signature each time) until the
// bank gives a definite answer: every client time-out or missing bank is
// retried, as a real client would.
func retry(ctx context.Context, op func(ctx context.Context) error) error {
	for {
		actx, cancel := context.WithTimeout(ctx, time.Duration(200+rand.IntN(600))*time.Millisecond)
		err := op(actx)
		cancel()
		if err == nil || !errors.Is(err, wire.ErrUnavailable) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(time.Duration(5+rand.IntN(30)) * time.Millisecond)
	}
}

// model is what the ledger must hold when every operation applied exactly once.
type model struct {
	mu       sync.Mutex
	balance  map[string]money.Micro
	provider money.Micro
	ids      map[string][]string // account → transfer ids it must show exactly once
}

func (m *model) apply(f func()) { m.mu.Lock(); f(); m.mu.Unlock() }

// client is client id of the crash test, over NATS: user requests signed
// with the users' keys, captures with host-1's agent key.
func (w *crashWorld) client(ctx context.Context, id, minOps int, stop <-chan struct{}, m *model) (int, error) {
	agent, err := w.keys.Signer(wire.RoleAgent, "host-1")
	if err != nil {
		return 0, err
	}
	c := clientLoad{user: bank.Client{NC: w.nc, Keys: w.keys}, agent: bank.Client{NC: w.nc, Signer: agent},
		id: id, prefix: "c", seed: 99, users: w.users,
		do: func(op func(ctx context.Context) error) error { return retry(ctx, op) }}
	return c.run(minOps, stop, m)
}

// TestCrashes is the Jepsen-style bank test: concurrent clients with
// time-outs and retries that reuse ids, while the bank process is killed
// with SIGKILL and restarted (and, on PostgreSQL, the database restarted);
// a checker reads the ledger throughout. Nothing may be lost or doubled,
// and every movement's audit event reaches the stream exactly once.
func TestCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("the crash test runs bank processes; skipped with -short")
	}
	eachStore(t, testCrashes)
}

func testCrashes(t *testing.T, target string) {
	w := newCrashWorld(t, target)
	logPath := filepath.Join(t.TempDir(), "bank.log")
	proc := startBankProcess(t, target, w.url, logPath)
	defer func() { proc.kill() }()

	m := &model{balance: map[string]money.Micro{}, ids: map[string][]string{}}
	for _, u := range w.users {
		m.balance[u] = 1_000_000
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const clients, minOps, wantKills, wantPGRestarts = 6, 20, 5, 2
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	total := make(chan int, clients)
	stopClients := make(chan struct{})
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := w.client(ctx, c, minOps, stopClients, m)
			errs <- err
			total <- n
		}()
	}
	clientsDone := make(chan struct{})
	go func() { wg.Wait(); close(clientsDone) }()

	// The checker: whenever the bank answers, the invariant holds.
	var checks, violations []string
	checkerDone := make(chan struct{})
	go func() {
		defer close(checkerDone)
		bc := bank.Client{NC: w.nc, Keys: w.keys} // the ledger is the admin's
		for {
			select {
			case <-clientsDone:
				return
			case <-time.After(50 * time.Millisecond):
			}
			cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
			l, err := bc.Ledger(cctx)
			ccancel()
			if err != nil {
				continue
			}
			checks = append(checks, "ok")
			violations = append(violations, l.Violations...)
		}
	}()

	// The nemesis: SIGKILL the bank and restart it, and restart PostgreSQL,
	// while the clients work; then let the clients finish.
	isPG := strings.HasPrefix(target, "postgres")
	kills, pgRestarts := 0, 0
	for round := 0; kills < wantKills || isPG && pgRestarts < wantPGRestarts; round++ {
		time.Sleep(time.Duration(150+rand.IntN(250)) * time.Millisecond)
		if isPG && round%3 == 2 {
			if err := pg.Restart(); err != nil {
				t.Fatalf("restarting PostgreSQL: %v", err)
			}
			pgRestarts++
			continue
		}
		proc.kill()
		kills++
		time.Sleep(time.Duration(50+rand.IntN(200)) * time.Millisecond)
		proc = startBankProcess(t, target, w.url, logPath)
	}
	close(stopClients)
	<-clientsDone
	<-checkerDone
	close(errs)
	close(total)
	ops := 0
	for n := range total {
		ops += n
	}
	for err := range errs {
		if err != nil {
			log, _ := os.ReadFile(logPath)
			t.Fatalf("client: %v\nbank log:\n%s", err, log)
		}
	}
	if len(violations) > 0 {
		t.Fatalf("invariant violated during the run: %v", violations)
	}

	// The end: the ledger is exactly the model.
	b, err := bank.Open(target, bank.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l := mustLedger(t, b)
	got := map[string]money.Micro{}
	for _, a := range l.Accounts {
		got[a.ID] = a.Balance
	}
	for _, u := range w.users {
		if got[bank.UserAccount(u)] != m.balance[u] {
			t.Errorf("%s: balance %s, want %s", u, got[bank.UserAccount(u)], m.balance[u])
		}
		st, err := b.Statement(context.Background(), &wire.StatementRequest{User: u, Limit: wire.MaxStatement})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, e := range st.Entries {
			seen[e.Transfer]++
		}
		for _, id := range m.ids[u] {
			if seen[id] != 1 {
				t.Errorf("%s: transfer %s applied %d times", u, id, seen[id])
			}
		}
	}
	if got[bank.ProviderAccount("host-1")] != m.provider {
		t.Errorf("provider: %s, want %s", got[bank.ProviderAccount("host-1")], m.provider)
	}
	if l.OpenHolds != 0 || got[bank.EscrowAccount] != 0 {
		t.Errorf("holds left open: %s", l.OpenHolds)
	}
	auditedOnce(t, w.nc, b, m)
	t.Logf("%d clients, %d operations: %d bank kills (SIGKILL), %d PostgreSQL restarts, %d ledger checks during the run, all consistent",
		clients, ops, kills, pgRestarts, len(checks))
}
