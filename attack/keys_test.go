package attack

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestAttackKeys is the attack table's rows on the key lifecycle (see the
// package doc): what a revoked user key, a revoked agent key and a rotated
// agent key can still do.
func TestAttackKeys(t *testing.T) {
	for _, c := range []class{revokedUserClass(), revokedAgentClass(), rotatedAgentClass()} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runClass(t, c)
		})
	}
}

// revocationBound is how soon every service refuses a revoked key once the
// bank answered the revocation: the revocation notice's trip through
// NATS (docs/SECURITY.md, "Key lifecycle").
const revocationBound = time.Second

// admin is the bank as the admin reaches it over NATS, believing only its
// signed answers.
func (e *env) adminBank() bank.Client {
	return bank.Client{NC: e.adminNC.Conn, Signer: e.admin, AdminKey: e.m.AdminKey()}
}

// revoke has the admin revoke role name's key s over NATS, as `mrmarket
// bank principal revoke` does.
func (e *env) revoke(t *testing.T, s *signing.Signer, role, name string) wire.RevokeReply {
	t.Helper()
	rep, err := e.adminBank().RevokePrincipal(e.ctx, &wire.RevokeRequest{Key: s.Public(), Name: name, Role: role,
		Cert: signing.SealRevocation(e.admin, s.Public(), name, role)})
	if err != nil {
		t.Fatalf("revoking %s %s: %v", role, name, err)
	}
	return rep
}

// droppedAndRefused fails t unless c, opened before its key was revoked,
// is closed by the server within revocationBound, and the key is refused
// when it connects anew.
func (e *env) droppedAndRefused(t *testing.T, c *conn, s *signing.Signer, who string) {
	t.Helper()
	start := time.Now()
	testpoll.CheckFor(t, revocationBound, 5*time.Millisecond, func() error {
		if c.IsConnected() {
			return fmt.Errorf("NATS: %s's connection, opened before the revocation, still open after %s", who, time.Since(start))
		}
		return nil
	})
	again, err := e.connect(s, who+"-again")
	if err == nil {
		again.Close()
		t.Fatalf("NATS: %s's revoked key connected anew", who)
	}
	t.Logf("refused: connection closed within %s of the revocation; reconnecting: %v", revocationBound, err)
}

// revokedRefusal is the refusal of a request signed by a revoked key, as it
// comes over the wire: forbidden, saying the key is revoked.
func revokedRefusal(err error) error {
	if err == nil {
		return errors.New("accepted")
	}
	if wire.ToError(err).Code != wire.CodeForbidden || !strings.Contains(err.Error(), signing.ErrRevoked.Error()) {
		return fmt.Errorf("refused, but not as revoked: %v", err)
	}
	return nil
}

// refusedWithin sends (a fresh signature each time, as a forger would)
// until it is refused as revoked, failing t past revocationBound.
func refusedWithin(t *testing.T, what string, send func() error) {
	t.Helper()
	start := time.Now()
	var last error
	testpoll.CheckFor(t, revocationBound, 5*time.Millisecond, func() error {
		if last = revokedRefusal(send()); last != nil {
			return fmt.Errorf("%s %s after the revocation: %v", what, time.Since(start), last)
		}
		return nil
	})
	t.Logf("refused: %s", what)
}

// ---- 25: a revoked user key ----

func revokedUserClass() class {
	var registration *wire.Sealed // bob's record before his revocation, as whois gave it out
	return class{name: "25-revoked-user", ticks: true, attacks: []attack{
		{"bob-key-revoked-connection-dropped-holds-released", func(t *testing.T, e *env) {
			e.advance(tick) // bob's plan charges
			p, err := e.adminBank().Whois(e.ctx, e.bob.Public())
			if err != nil || p.Cert == nil {
				t.Fatalf("bob's record: %+v %v", p, err)
			}
			registration = p.Cert
			held := e.bobNC
			held.SetErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})
			// A request bob signed before the revocation, sent after it.
			early, err := e.bob.Sign(wire.BankBalance, []byte(`{"v":1,"user":"bob"}`))
			if err != nil {
				t.Fatal(err)
			}
			before := e.balance("bob")
			rep := e.revoke(t, e.bob, wire.RoleUser, "bob")
			e.droppedAndRefused(t, held, e.bob, "bob")
			after := e.balance("bob")
			if after.Held != 0 || after.Balance != before.Balance+before.Held || !slices.Contains(rep.Released, e.bobPlan.Hold) {
				t.Fatalf("bank: bob's hold not released: before %+v, after %+v, released %v", before, after, rep.Released)
			}
			_, err = rpc.Request[wire.BalanceReply](e.ctx, e.aliceNC.Conn, early.Subject, nil, rpc.Verbatim(early))
			if err := revokedRefusal(err); err != nil {
				t.Fatalf("bank: a balance request bob signed before his revocation, relayed after it: %v", err)
			}
			t.Logf("refused: bob's request signed before the revocation")
		}},
		{"bob-key-signs-through-another-connection", func(t *testing.T, e *env) {
			// Whoever holds bob's seed reaches the services through any
			// connection (here alice's): every request it signs is refused.
			relay := e.aliceNC
			refusedWithin(t, "bank: bob's balance", func() error {
				return call(e.ctx, relay, e.bob, wire.BankBalance, &wire.BalanceRequest{User: "bob"}, &wire.BalanceReply{})
			})
			refusedWithin(t, "bank: bob's transfer to alice", func() error {
				return call(e.ctx, relay, e.bob, wire.BankTransfer, &wire.TransferRequest{ID: "t-" + newKey(t).Public()[:8], From: "bob", To: "alice", Amount: 1},
					&wire.TransferReply{})
			})
			refusedWithin(t, "broker: bob's spend", func() error {
				return call(e.ctx, relay, e.bob, wire.BrokerSpend, &wire.SpendRequest{ID: "p-bob-2", User: "bob", Budget: credits(1),
					Duration: wire.Duration(planLength), VMs: []string{"b1"}, Strategy: wire.StrategyFair}, &wire.SpendReply{})
			})
			refusedWithin(t, "broker: bob's plans", func() error {
				return call(e.ctx, relay, e.bob, wire.BrokerPlans, &wire.PlansRequest{User: "bob"}, &wire.PlansReply{})
			})
			// A user's connection may not ask an agent at all (only brokers
			// and the admin read an agent's state): relayed through the
			// admin's, the agent itself must refuse bob's key.
			refusedWithin(t, "agent: host-1's state, as bob", func() error {
				return call(e.ctx, e.adminNC, e.bob, wire.AgentStateSubject("host-1"), &wire.StateRequest{}, &wire.HostState{})
			})
			// The market goes on: bob's plan captures nothing more.
			spent := e.balance("bob")
			e.advance(tick)
			if now := e.balance("bob"); now.Balance != spent.Balance || now.Held != 0 {
				t.Fatalf("bank: bob's account moved after his revocation: %+v, then %+v", spent, now)
			}
		}},
		{"bob-old-record-replayed", func(t *testing.T, e *env) {
			// bob's registration record from before his revocation, and one
			// the admin sealed after it, each in a registration the admin
			// signed, and that request replayed: nothing makes the key a
			// principal again.
			rec, err := e.m.Bank.ListPrincipals(e.ctx, &wire.PrincipalsRequest{Name: "bob"})
			if err != nil || len(rec.Principals) != 1 || rec.Principals[0].Revoked == nil {
				t.Fatalf("bob in the registry: %+v %v", rec, err)
			}
			var msg *nats.Msg
			for _, c := range []struct {
				which string
				cert  *wire.Sealed
			}{{"his registration", registration}, {"a record sealed after the revocation", signing.SealPrincipal(e.admin, e.bob.Public(), "bob", wire.RoleUser)}} {
				cert := c.cert
				body, _ := json.Marshal(&wire.PrincipalRequest{Versioned: wire.Versioned{V: wire.Version}, Key: e.bob.Public(), Name: "bob",
					Role: wire.RoleUser, Cert: cert})
				if msg, err = e.admin.Sign(wire.BankPrincipal, body); err != nil {
					t.Fatal(err)
				}
				m := copyMsg(msg)
				_, err := rpc.Request[wire.Principal](e.ctx, e.adminNC.Conn, m.Subject, nil, rpc.Verbatim(m))
				if err == nil || wire.ToError(err).Code != wire.CodeForbidden && wire.ToError(err).Code != wire.CodeConflict {
					t.Fatalf("bank: bob's key registered again with %s: %v", c.which, err)
				}
				t.Logf("refused: %s: %v", c.which, err)
			}
			m := copyMsg(msg)
			if _, err := rpc.Request[wire.Principal](e.ctx, e.adminNC.Conn, m.Subject, nil, rpc.Verbatim(m)); err == nil || !strings.Contains(err.Error(), signing.ErrReplay.Error()) {
				t.Fatalf("bank: the admin's request replayed: %v", err)
			}
			if _, err := e.adminBank().Whois(e.ctx, e.bob.Public()); revokedRefusal(err) != nil {
				t.Fatalf("bank: whois of bob's key: %v", err)
			}
			if _, err := e.connect(e.bob, "bob-after-replay"); err == nil {
				t.Fatal("NATS: bob's key connects after the replay")
			}
			t.Logf("refused: a revoked key is never registered again")
		}},
	}}
}

// ---- 26: a revoked agent key ----

// roundWithout runs one market round at the clock moved by d without
// host's agent (revoked: it reaches nobody): the others tick, the broker
// hears them, the bank and the broker tick.
func (e *env) roundWithout(t *testing.T, d time.Duration, host string) {
	t.Helper()
	now := e.step(d)
	for _, a := range e.m.Agents {
		if a.Host() != host {
			if _, err := a.Tick(e.ctx, now); err != nil {
				t.Fatalf("agent %s: %v", a.Host(), err)
			}
		}
	}
	testpoll.CheckFor(t, 5*time.Second, 2*time.Millisecond, func() error {
		p, err := e.m.Broker.Price(&wire.PriceRequest{})
		if err != nil {
			return err
		}
		for _, h := range p.Hosts {
			if h.Host != host && h.Updated.Before(now) {
				return fmt.Errorf("the broker has not heard %s at %s", h.Host, now.Format(time.TimeOnly))
			}
		}
		return nil
	})
	if _, err := e.m.Bank.Tick(e.ctx, now); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Broker.Tick(e.ctx, now); err != nil {
		t.Fatal(err)
	}
}

// agentConn is the market's own connection of host's agent.
func (e *env) agentConn(t *testing.T, host string) *conn {
	t.Helper()
	nc := e.m.AgentConn(host)
	if nc == nil {
		t.Fatalf("no connection of %s's agent", host)
	}
	nc.SetErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}) // its refusals are expected
	return &conn{Conn: nc}
}

func revokedAgentClass() class {
	return class{name: "26-revoked-agent", ticks: true, attacks: []attack{
		{"host-2-agent-key-revoked-host-retired", func(t *testing.T, e *env) {
			e.advance(tick)
			held := e.agentConn(t, "host-2")
			host2 := e.agents["host-2"]
			rep := e.revoke(t, host2, wire.RoleAgent, "host-2")
			if rep.Principal.Revoked == nil {
				t.Fatalf("revocation: %+v", rep)
			}
			e.droppedAndRefused(t, held, host2, "host-2's agent")
			testpoll.CheckFor(t, revocationBound, 5*time.Millisecond, func() error {
				p, err := e.m.Broker.Price(&wire.PriceRequest{Host: "host-2"})
				if err != nil || len(p.Hosts) != 1 || !p.Hosts[0].Retired || p.Hosts[0].VMs != 0 {
					return fmt.Errorf("broker: host-2 after its agent's revocation: %+v %v", p, err)
				}
				return nil
			})
			if vms := e.m.Broker.VMs(&wire.VMsRequest{Host: "host-2"}); len(vms.VMs) != 0 {
				t.Fatalf("broker: host-2's VMs still offered: %+v", vms)
			}
			// The market goes on without host-2: no plan bids there.
			provider := e.statement(t, "provider:host-2")
			for range 3 {
				e.roundWithout(t, tick, "host-2")
			}
			for _, p := range e.m.Broker.Plans(&wire.PlansRequest{}).Plans {
				for _, v := range p.VMs {
					if v.Host == "host-2" && v.Rate > 0 {
						t.Fatalf("broker: %s's plan still bids %v on %s of retired host-2", p.User, v.Rate, v.VM)
					}
				}
			}
			if now := e.statement(t, "provider:host-2"); now.Balance != provider.Balance {
				t.Fatalf("bank: host-2 earned after its revocation: %s, then %s", provider.Balance, now.Balance)
			}
			t.Logf("refused: host-2 retired, its VMs offered to nobody")
		}},
		{"host-2-agent-key-captures-and-seals", func(t *testing.T, e *env) {
			// Whoever holds host-2's seed: its capture, sent through another
			// connection, and its state, published by one allowed to, count
			// for nothing.
			host2 := e.agents["host-2"]
			relay := e.dial(e.agents["host-1"], "host-1-relay") // a connection that may send captures
			leg := wire.CaptureLeg{ID: e.alicePlan.Hold + "/host-2/a2/999", Hold: e.alicePlan.Hold, Owner: "alice", VM: "a2", Cumulative: credits(5)}
			refusedWithin(t, "bank: host-2's capture", func() error {
				return call(e.ctx, relay, host2, wire.BankCapture, &wire.CaptureBatch{Host: "host-2", Tick: 999, Legs: []wire.CaptureLeg{leg}},
					&wire.CaptureReply{})
			})
			st := wire.HostState{Versioned: wire.Versioned{V: wire.Version}, Host: "host-2", Time: e.now(), Tick: 1 << 40, Price: 1,
				VMs: []wire.VMState{{VM: "a2", Owner: "alice"}, {VM: "b2", Owner: "bob"}}}
			if err := e.adminNC.Publish(wire.HostStateSubject("host-2"), sealed(t, host2, st, 0)); err != nil {
				t.Fatal(err)
			}
			_ = e.adminNC.Flush()
			time.Sleep(refuseWait)
			if p, err := e.m.Broker.Price(&wire.PriceRequest{Host: "host-2"}); err != nil || !p.Hosts[0].Retired || p.Hosts[0].VMs != 0 {
				t.Fatalf("broker: a state sealed by host-2's revoked key was taken: %+v %v", p, err)
			}
			t.Logf("refused: host-2's capture (revoked) and its state (host stays retired)")
		}},
	}}
}

// statement is an account's statement as the bank has it.
func (e *env) statement(t *testing.T, account string) wire.StatementReply {
	t.Helper()
	s, err := e.m.Bank.Statement(e.ctx, &wire.StatementRequest{Account: account, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ---- 27: a rotated agent key ----

func rotatedAgentClass() class {
	return class{name: "27-rotated-agent", ticks: true, setup: setup{agentState: true}, attacks: []attack{
		{"host-1-agent-key-rotated-keeps-charging", func(t *testing.T, e *env) {
			e.advance(tick)
			e.advance(tick)
			history := e.statement(t, "provider:host-1")
			if len(history.Entries) == 0 || history.Balance <= 0 {
				t.Fatalf("host-1 earned nothing before the rotation: %+v", history)
			}
			old := e.agents["host-1"]
			held := e.agentConn(t, "host-1")
			fresh := newKey(t)
			rep, err := e.adminBank().RotatePrincipal(e.ctx, &wire.RotateRequest{Name: "host-1", Role: wire.RoleAgent,
				Old: old.Public(), OldCert: signing.SealRevocation(e.admin, old.Public(), "host-1", wire.RoleAgent),
				Key: fresh.Public(), Cert: signing.SealPrincipal(e.admin, fresh.Public(), "host-1", wire.RoleAgent)})
			if err != nil || rep.Old.ReplacedBy != fresh.Public() {
				t.Fatalf("rotating host-1's key: %+v %v", rep, err)
			}
			e.droppedAndRefused(t, held, old, "host-1's agent (old key)")
			// The operator installs the new key and restarts the agent.
			if err := signing.SaveSigner(e.m.Keys().Path(wire.RoleAgent, "host-1"), fresh); err != nil {
				t.Fatal(err)
			}
			if err := e.m.RestartAgent(e.ctx, "host-1"); err != nil {
				t.Fatal(err)
			}
			e.agents["host-1"] = fresh
			for range 3 {
				e.advance(tick)
			}
			if p, err := e.m.Broker.Price(&wire.PriceRequest{Host: "host-1"}); err != nil || p.Hosts[0].Retired || p.Hosts[0].VMs != 2 {
				t.Fatalf("broker: host-1 after its key's rotation: %+v %v", p, err)
			}
			now := e.statement(t, "provider:host-1")
			if now.Balance <= history.Balance {
				t.Fatalf("bank: host-1 earned nothing with its new key: %s, then %s", history.Balance, now.Balance)
			}
			for _, h := range history.Entries {
				if !slices.ContainsFunc(now.Entries, func(x wire.StatementEntry) bool { return x.Transfer == h.Transfer && x.Amount == h.Amount }) {
					t.Fatalf("bank: host-1's provider account lost %+v of its history", h)
				}
			}
			e.bidsOnOwnHolds(t)
			// The old key's capture, relayed: refused.
			relay := e.dial(e.agents["host-2"], "host-2-relay") // a connection that may send captures
			leg := wire.CaptureLeg{ID: e.alicePlan.Hold + "/host-1/a1/999", Hold: e.alicePlan.Hold, Owner: "alice", VM: "a1", Cumulative: credits(19)}
			refusedWithin(t, "bank: host-1's old key's capture", func() error {
				return call(e.ctx, relay, old, wire.BankCapture, &wire.CaptureBatch{Host: "host-1", Tick: 999, Legs: []wire.CaptureLeg{leg}},
					&wire.CaptureReply{})
			})
			t.Logf("refused: host-1's old key; its new key charges on, %s earned since the rotation", now.Balance-history.Balance)
		}},
	}}
}
