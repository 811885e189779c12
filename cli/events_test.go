package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nuid"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/cli"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestEventsAreTheSignedRequests: a grant, a spend and the capture its bid
// causes each appear in `mrmarket events`, with the request exactly as its
// principal signed it (Check passes, the signer is the principal).
func TestEventsAreTheSignedRequests(t *testing.T) {
	m, clock := startMarket(t)
	n := "--nats=" + m.URL
	if r := mrmarket("bank", "grant", n, "--user", "alice", "--amount", "100", "--id", "g-events"); r.code != 0 {
		t.Fatalf("grant: %+v", r)
	}
	if r := mrmarket("spend", n, "--user", "alice", "--budget", "12", "--duration", "1h", "--vm", "a1"); r.code != 0 {
		t.Fatalf("spend: %+v", r)
	}
	*clock = clock.Add(30 * time.Minute)
	if err := m.Tick(context.Background(), *clock); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"bank.grant": "admin", "broker.spend": "alice", "bank.capture": "host-1", "bank.hold": "broker"}
	var events []wire.Event
	testpoll.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		r := mrmarket("events", n, "--json")
		if r.code != 0 {
			t.Fatalf("events: %+v", r)
		}
		events = events[:0]
		sc := bufio.NewScanner(strings.NewReader(r.stdout))
		sc.Buffer(nil, 1<<20)
		seen := map[string]bool{}
		for sc.Scan() {
			var ev wire.Event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("event %s: %v", sc.Bytes(), err)
			}
			events = append(events, ev)
			seen[ev.Component+"."+ev.Op] = true
		}
		for k := range want {
			if !seen[k] {
				return fmt.Errorf("no %s event in the audit stream yet (have %v)", k, seen)
			}
		}
		return nil
	})
	for _, ev := range events {
		name, ok := want[ev.Component+"."+ev.Op]
		if !ok {
			continue
		}
		c, err := signing.CheckRequest(ev.Request)
		if err != nil {
			t.Fatalf("%s.%s: the signed request does not verify: %v", ev.Component, ev.Op, err)
		}
		if c.Key != ev.Principal.Key || ev.Principal.Name != name || ev.ID != wire.EventID(c.Key, c.Nonce) {
			t.Fatalf("%s.%s: signed by %s, principal %+v, id %s", ev.Component, ev.Op, c.Key, ev.Principal, ev.ID)
		}
		if !strings.HasSuffix(ev.Request.Subject, "."+ev.Op) || len(ev.Result) == 0 || ev.At.IsZero() {
			t.Fatalf("%s.%s: %+v", ev.Component, ev.Op, ev)
		}
	}
	r := mrmarket("events", n)
	if r.code != 0 || !strings.Contains(r.stdout, "grant") || !strings.Contains(r.stdout, "admin (admin)") || !strings.Contains(r.stdout, "user=alice") {
		t.Fatalf("events table: %+v", r)
	}
	r = mrmarket("events", n, "--component", "broker", "--op", "spend")
	if r.code != 0 || strings.Count(r.stdout, "\n") != 1 || !strings.Contains(r.stdout, "spend") || !strings.Contains(r.stdout, "alice (user)") {
		t.Fatalf("events --component broker --op spend: %+v", r)
	}
	r = mrmarket("events", n, "--op", "nothing-like-it")
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("events of no op: %+v", r)
	}
	r = mrmarket("events", n, "--since", "1ns")
	if r.code != 0 || r.stdout != "" {
		t.Fatalf("events --since 1ns: %+v", r)
	}
}

// TestEventsFollow: --follow prints an event published after it started,
// and stops when interrupted.
func TestEventsFollow(t *testing.T) {
	m, _ := startMarket(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- cli.App(out, out).RunContext(ctx, []string{"mrmarket", "events", "--nats=" + m.URL, "--follow"})
	}()
	// The stream exists before anything is published (EnsureAssets): grant
	// until the follower, which may start after the first grant, prints one.
	// Granted through a client, not the CLI: two command lines at once
	// share urfave/cli's global help flag.
	nc, err := m.NCAs(wire.RoleAdmin, "admin")
	if err != nil {
		t.Fatal(err)
	}
	admin := bank.Client{NC: nc, Keys: m.Keys()}
	testpoll.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if _, err := admin.Grant(ctx, &wire.GrantRequest{ID: nuid.Next(), User: "alice", Amount: 1}); err != nil {
			t.Fatalf("grant: %v", err)
		}
		if !strings.Contains(out.String(), "grant") {
			return errors.New("events --follow printed no grant")
		}
		return nil
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("events --follow: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("events --follow did not stop when interrupted")
	}
}

// TestReadsAreAuthenticated: a user reads only its own balance, statement,
// plans and jobs; the ledger and provider accounts are the admin's.
func TestReadsAreAuthenticated(t *testing.T) {
	m, clock := startMarket(t)
	n := "--nats=" + m.URL
	for _, u := range []string{"alice", "bob"} {
		if r := mrmarket("bank", "grant", n, "--user", u, "--amount", "100"); r.code != 0 {
			t.Fatalf("grant: %+v", r)
		}
	}
	if r := mrmarket("spend", n, "--user", "alice", "--budget", "12", "--duration", "1h", "--vm", "a1"); r.code != 0 {
		t.Fatalf("spend: %+v", r)
	}
	*clock = clock.Add(30 * time.Minute) // a capture: host-1's provider account exists
	if err := m.Tick(context.Background(), *clock); err != nil {
		t.Fatal(err)
	}
	if r := mrmarket("plans", n, "--user", "alice"); r.code != 0 || !strings.Contains(r.stdout, "alice") {
		t.Fatalf("alice's plans: %+v", r)
	}
	if r := mrmarket("plans", n); r.code != 0 || !strings.Contains(r.stdout, "alice") {
		t.Fatalf("admin lists every plan: %+v", r)
	}
	if r := mrmarket("price", n, "--user", "bob"); r.code != 0 || !strings.Contains(r.stdout, "host-1") {
		t.Fatalf("bob reads prices: %+v", r)
	}

	// Over the admin's connection, which NATS lets publish anywhere, so
	// what is checked here is the components' own refusal (the NATS
	// server's refusal of a user's ledger request is natsauth's test).
	nc, err := m.NCAs(wire.RoleAdmin, "admin")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	bob, err := m.Keys().Signer(wire.RoleUser, "bob")
	if err != nil {
		t.Fatal(err)
	}
	bb, br := bank.Client{NC: nc, Signer: bob}, broker.Client{NC: nc, Signer: bob}
	refused := []struct {
		name string
		do   func() error
	}{
		{"bob reads alice's balance", func() error { _, err := bb.Balance(ctx, &wire.BalanceRequest{User: "alice"}); return err }},
		{"bob reads alice's statement", func() error {
			_, err := bb.Statement(ctx, &wire.StatementRequest{User: "alice"})
			return err
		}},
		{"bob reads a provider's statement", func() error {
			_, err := bb.Statement(ctx, &wire.StatementRequest{Account: bank.ProviderAccount("host-1")})
			return err
		}},
		{"bob reads the ledger", func() error { _, err := bb.Ledger(ctx); return err }},
		{"bob lists alice's plans", func() error { _, err := br.Plans(ctx, &wire.PlansRequest{User: "alice"}); return err }},
		{"bob lists alice's jobs", func() error { _, err := br.Jobs(ctx, &wire.JobsRequest{User: "alice"}); return err }},
		{"unsigned balance", func() error {
			_, err := bank.Client{NC: nc}.Balance(ctx, &wire.BalanceRequest{User: "alice"})
			return err
		}},
		{"unsigned ledger", func() error { _, err := bank.Client{NC: nc}.Ledger(ctx); return err }},
		{"unsigned price", func() error { _, err := broker.Client{NC: nc}.Price(ctx, &wire.PriceRequest{}); return err }},
	}
	for _, c := range refused {
		if err := c.do(); !errorsIsForbidden(err) {
			t.Errorf("%s: got %v, want forbidden", c.name, err)
		}
	}
	// Asking for nobody in particular, bob gets his own plans: none.
	plans, err := br.Plans(ctx, &wire.PlansRequest{})
	if err != nil || len(plans.Plans) != 0 {
		t.Fatalf("bob's own plans: %+v %v", plans, err)
	}
	// The host's agent reads its own provider account; bob's own reads work.
	agentKey, err := m.Keys().Signer(wire.RoleAgent, "host-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (bank.Client{NC: nc, Signer: agentKey}).Statement(ctx, &wire.StatementRequest{Account: bank.ProviderAccount("host-1")}); err != nil {
		t.Fatalf("agent reads its provider account: %v", err)
	}
	if _, err := (bank.Client{NC: nc, Signer: agentKey}).Statement(ctx, &wire.StatementRequest{Account: bank.ProviderAccount("host-2")}); !errorsIsForbidden(err) {
		t.Fatalf("agent reads another provider account: %v", err)
	}
	if r := mrmarket("statement", n, "--user", "bob"); r.code != 0 {
		t.Fatalf("bob's statement: %+v", r)
	}
	if r := mrmarket("balance", n, "--user", "bob", "--creds", t.TempDir()); r.code != cli.ExitBadInput || !strings.Contains(r.stderr, "no credentials") {
		t.Fatalf("balance without credentials: %+v", r)
	}
}

func errorsIsForbidden(err error) bool { return errors.Is(err, wire.ErrForbidden) }

// syncBuffer is a buffer a command writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
