package attack

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// attack is one row of the table: it runs against e and fails t unless the
// attack was refused.
type attack struct {
	name string
	run  func(t *testing.T, e *env)
}

// class runs its attacks one after the other against one market, each
// followed by the checks every attack ends with: the ledger and the plans
// unchanged (unless the attack ticks the market and checks the money
// itself) and the market still serving.
type class struct {
	name    string
	setup   setup
	ticks   bool // attacks advance the market: they check the money themselves
	attacks []attack
}

// TestAttack is the attack table (see the package doc).
func TestAttack(t *testing.T) {
	classes := []class{
		unauthenticated(), eavesdrop(), queueHijack(), forgedRegistryClass(), forgedStateClass(),
		plansUserClass(), plansBrokerClass(), forgedReplyClass(), replayClass(), foreignHoldClass(), foreignRead(),
		idSquatClass(), unknownUserClass(), unauditedClass(), storeFilesClass(),
	}
	t.Run(floodClass().name, func(t *testing.T) { runClass(t, floodClass()) }) // alone: it measures latency
	for _, c := range classes {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runClass(t, c)
		})
	}
}

func runClass(t *testing.T, c class) {
	e := start(t, c.setup)
	for _, a := range c.attacks {
		t.Run(a.name, func(t *testing.T) {
			parent := e.t
			e.t = t // the env's helpers fail the attack that uses them
			defer func() { e.t = parent }()
			before := e.snapshot()
			a.run(t, e)
			if !c.ticks {
				e.unchanged(t, before)
			}
			e.serving(t)
		})
	}
}

// ---- 01: unauthenticated connect ----

func unauthenticated() class {
	refused := func(t *testing.T, e *env, s *wire.Signer, tls bool) {
		c := &conn{}
		nc, err := nats.Connect(e.m.URL, e.connectOpts(s, "intruder", c, s != nil, tls)...)
		if errors.Is(err, nats.ErrNkeysNotSupported) { // a server that does no NKey authentication at all
			nc, err = nats.Connect(e.m.URL, e.connectOpts(s, "intruder", c, false, tls)...)
		}
		if err == nil {
			nc.Close()
			t.Fatal("connected")
		}
		t.Logf("refused: %v", err)
	}
	return class{name: "01-unauthenticated", setup: setup{noPlans: true}, attacks: []attack{
		{"no-credentials", func(t *testing.T, e *env) { refused(t, e, nil, true) }},
		{"unregistered-key", func(t *testing.T, e *env) { refused(t, e, newKey(t), true) }},
		{"alice-key-without-tls", func(t *testing.T, e *env) { refused(t, e, e.alice, false) }},
	}}
}

// ---- 02: subscribe to everything ----

func eavesdrop() class {
	sub := func(subject func(e *env) string) func(t *testing.T, e *env) {
		return func(t *testing.T, e *env) {
			traffic := func() { // bob's requests and their replies
				for range 3 {
					_, _ = wire.Do[wire.BalanceReply](e.ctx, e.bobNC.Conn, e.bob, wire.BankBalance, &wire.BalanceRequest{User: "bob"})
					_, _ = wire.Do[wire.PlansReply](e.ctx, e.bobNC.Conn, e.bob, wire.BrokerPlans, &wire.PlansRequest{User: "bob"})
				}
			}
			if err := subRefused(e.aliceNC, subject(e), "", nil, traffic); err != nil {
				t.Fatal(err)
			}
		}
	}
	return class{name: "02-eavesdrop", attacks: []attack{
		{"alice-subscribes-everything", sub(func(*env) string { return ">" })},
		{"alice-subscribes-every-inbox", sub(func(*env) string { return "_INBOX.>" })},
		{"alice-subscribes-bobs-inbox", sub(func(e *env) string { return "_INBOX." + e.bob.Public() + ".>" })},
		{"alice-subscribes-bank-requests", sub(func(*env) string { return "mrm.v1.bank.>" })},
	}}
}

// ---- 03: queue-group hijack ----

func queueHijack() class {
	// forge answers whatever it is asked with "admin" (whois) or success.
	forge := func(m *nats.Msg) {
		var req wire.WhoisRequest
		_ = json.Unmarshal(m.Data, &req)
		_ = m.Respond(wire.EncodeReply(wire.Principal{Key: req.Key, Name: "mallory", Role: wire.RoleAdmin}, nil))
	}
	hijack := func(subject, queue string) func(t *testing.T, e *env) {
		return func(t *testing.T, e *env) {
			traffic := func() {
				bc := bank.Client{NC: e.bobNC.Conn}
				for range 10 {
					_, _ = bc.Whois(e.ctx, e.bob.Public())
					_, _ = wire.Do[wire.BalanceReply](e.ctx, e.bobNC.Conn, e.bob, wire.BankBalance, &wire.BalanceRequest{User: "bob"})
					_, _ = wire.Do[wire.PlansReply](e.ctx, e.bobNC.Conn, e.bob, wire.BrokerPlans, &wire.PlansRequest{User: "bob"})
				}
			}
			if err := subRefused(e.aliceNC, subject, queue, forge, traffic); err != nil {
				t.Fatal(err)
			}
		}
	}
	return class{name: "03-queue-hijack", attacks: []attack{
		{"alice-joins-mrm-bank-on-bank.>", hijack("mrm.v1.bank.>", wire.QueueBank)},
		{"alice-joins-mrm-bank-on-whois", hijack(wire.BankWhois, wire.QueueBank)},
		{"alice-joins-mrm-broker-on-plans", hijack(wire.BrokerPlans, wire.QueueBroker)},
	}}
}

// ---- 10: reads of another user's account ----

func foreignRead() class {
	isRefused := func(do func(e *env) error) func(t *testing.T, e *env) {
		return func(t *testing.T, e *env) {
			err := do(e)
			if !refused(err) {
				t.Fatalf("got %v, want forbidden", err)
			}
			t.Logf("refused: %v", err)
		}
	}
	asAlice := func(subject string, req wire.Message) func(e *env) error {
		return func(e *env) error {
			var res json.RawMessage
			return call(e.ctx, e.aliceNC, e.alice, subject, req, &res)
		}
	}
	return class{name: "10-foreign-read", attacks: []attack{
		{"bobs-balance-signed-by-alice", isRefused(asAlice(wire.BankBalance, &wire.BalanceRequest{User: "bob"}))},
		{"bobs-balance-unsigned", isRefused(func(e *env) error {
			var res json.RawMessage
			return call(e.ctx, e.aliceNC, nil, wire.BankBalance, &wire.BalanceRequest{Versioned: wire.Versioned{V: wire.Version}, User: "bob"}, &res)
		})},
		{"bobs-statement-signed-by-alice", isRefused(asAlice(wire.BankStatement, &wire.StatementRequest{User: "bob"}))},
		{"provider-statement-signed-by-alice", isRefused(asAlice(wire.BankStatement, &wire.StatementRequest{Account: "provider:host-1"}))},
		{"ledger-signed-by-alice", isRefused(asAlice(wire.BankLedger, &wire.LedgerRequest{}))},
		{"bobs-plans-signed-by-alice", isRefused(asAlice(wire.BrokerPlans, &wire.PlansRequest{User: "bob"}))},
	}}
}
