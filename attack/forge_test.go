package attack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// ---- 04: forged registry answer ----

// forgedRegistry answers every whois, as whoever joined the bank's queue
// group on an open server would: the key asked about is an admin. It has no
// admin-sealed record to show for it.
type forgedRegistry struct{}

func (forgedRegistry) Whois(_ context.Context, key string) (wire.Principal, error) {
	return wire.Principal{Key: key, Name: "mallory", Role: wire.RoleAdmin}, nil
}

// The agent and the broker are the market's own code, configured as the
// market configures them (the trust anchor included, when this build has
// one), but asking the forged registry who signed; they serve on an open
// NATS server where such a registry can answer, and move money at the
// market's real bank.
func forgedRegistryClass() class {
	return class{name: "04-forged-registry", ticks: true, attacks: []attack{
		{"agent-takes-bid-signed-by-forged-admin", func(t *testing.T, e *env) {
			_, open := natstest.Start(t)
			hostNC := e.dial(e.agents["host-1"], "host-1-twin")
			cfg := agent.Config{
				Host: "host-1", Enforcer: agent.NewSimEnforcer(e.now, 1, hosts[0].VMs...), Now: e.now, Capacity: 1,
				Capturer: bank.Client{NC: hostNC.Conn, Signer: e.agents["host-1"]}, Identities: forgedRegistry{},
				Metrics: obs.NewMetrics(prometheus.NewRegistry()), AdminKey: e.admin.Public(),
			}
			a, err := agent.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			stop, err := agent.Serve(open, a)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			before := e.snapshot()
			mallory := newKey(t)
			bid := &wire.BidRequest{Versioned: wire.Versioned{V: wire.Version}, Set: []wire.Bid{{VM: "a1", Owner: "alice",
				Plan: e.alicePlan.ID, Hold: e.alicePlan.Hold, Budget: credits(15), Duration: wire.Duration(time.Minute)}}}
			err = natstest.Bid(e.ctx, open, "host-1", bid, rpc.SignedBy(mallory))
			if !errors.Is(err, wire.ErrForbidden) {
				t.Errorf("a bid signed by an unregistered key the registry calls an admin: got %v, want forbidden", err)
			} else {
				t.Logf("refused: %v", err)
			}
			for range 2 { // the twin ticks: a bid it took would capture at the real bank
				_, _ = a.Tick(e.ctx, e.step(tick))
			}
			e.unchanged(t, before)
		}},
		{"broker-spends-bobs-money-for-forged-admin", func(t *testing.T, e *env) {
			_, open := natstest.Start(t)
			brokerNC := e.dial(e.broker, "broker-twin")
			cfg := broker.Config{
				NC: brokerNC.Conn, Bank: bank.Client{NC: brokerNC.Conn, Signer: e.broker}, Signer: e.broker, Identities: forgedRegistry{},
				Now: e.now, Tick: tick, Replica: "broker-twin", Metrics: obs.NewMetrics(prometheus.NewRegistry()), AdminKey: e.admin.Public(),
			}
			b, err := broker.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			for _, a := range e.m.Agents {
				b.Observe(a.State())
			}
			stop, err := broker.Serve(open, b)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			before := e.snapshot()
			mallory := newKey(t)
			_, err = rpc.Request[wire.SpendReply](e.ctx, open, wire.BrokerSpend, &wire.SpendRequest{ID: "p-mallory", User: "bob",
				Budget: credits(5), Duration: wire.Duration(time.Minute), VMs: []string{"b1"}, Strategy: wire.StrategyFair}, rpc.SignedBy(mallory))
			if !errors.Is(err, wire.ErrForbidden) {
				t.Errorf("bob's money spent for an unregistered key the registry calls an admin: got %v, want forbidden", err)
			} else {
				t.Logf("refused: %v", err)
			}
			e.unchanged(t, before)
		}},
	}}
}

// ---- 05: forged host states ----

// forgery is a state of host-1 an attacker publishes: the price of 10^12,
// bob's VM claimed for alice, dated an hour after the market's clock.
func (e *env) forgery(t *testing.T) wire.HostState {
	t.Helper()
	now := e.now()
	return wire.HostState{Versioned: wire.Versioned{V: wire.Version}, Host: "host-1", Time: now.Add(time.Hour), Tick: 1 << 40, Price: 1e12,
		VMs: []wire.VMState{{VM: "a1", Owner: "alice", Rate: 1e12}, {VM: "b1", Owner: "alice", Rate: 0}}}
}

// sealed is st sealed by s for host-1's state (what an agent publishes once
// states are signed), s's clock shifted by skew.
func sealed(t *testing.T, s *signing.Signer, st wire.HostState, skew time.Duration) []byte {
	t.Helper()
	body, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	forger := *s
	forger.Now = func() time.Time { return time.Now().Add(skew) }
	b, err := json.Marshal(forger.Seal("host-state/"+st.Host, body))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// realHost1 checks that the broker's view of host-1 is its agent's last
// state at the market's clock: price, time and VMs with their owners.
func (e *env) realHost1() error {
	var st wire.HostState
	for _, a := range e.m.Agents {
		if a.Host() == "host-1" {
			st = a.State()
		}
	}
	p, err := e.m.Broker.Price(&wire.PriceRequest{Host: "host-1"})
	if err != nil {
		return err
	}
	if len(p.Hosts) != 1 || p.Hosts[0].Price != st.Price || !p.Hosts[0].Updated.Equal(e.now()) {
		return fmt.Errorf("the broker has host-1 at %+v; its agent says price %v at %s", p.Hosts, st.Price, e.now().Format(time.TimeOnly))
	}
	vms := e.m.Broker.VMs(&wire.VMsRequest{Host: "host-1"})
	for _, v := range vms.VMs {
		if v.VM == "b1" && v.Owner != "bob" {
			return fmt.Errorf("the broker has bob's VM b1 owned by %s", v.Owner)
		}
	}
	return nil
}

func forgedStateClass() class {
	type publisher struct {
		name string
		c    func(e *env) *conn
		// own: the publisher is host-1's agent (compromised, or its clock
		// gone wrong): NATS lets it publish there, the broker must refuse.
		own bool
	}
	publishers := []publisher{
		{"alice", func(e *env) *conn { return e.aliceNC }, false},
		{"host-2-agent", func(e *env) *conn { return e.dial(e.agents["host-2"], "host-2-agent") }, false},
		{"host-1-agent", func(e *env) *conn { return e.dial(e.agents["host-1"], "host-1-agent") }, true},
	}
	type forged struct {
		name string
		data func(t *testing.T, e *env) []byte
	}
	forgeries := []forged{
		{"unsigned-future-price-1e12", func(t *testing.T, e *env) []byte { b, _ := json.Marshal(e.forgery(t)); return b }},
		{"sealed-by-alice", func(t *testing.T, e *env) []byte { return sealed(t, e.alice, e.forgery(t), 0) }},
		{"sealed-by-host-2-agent", func(t *testing.T, e *env) []byte { return sealed(t, e.agents["host-2"], e.forgery(t), 0) }},
		{"sealed-by-host-1-agent-1h-ahead", func(t *testing.T, e *env) []byte { return sealed(t, e.agents["host-1"], e.forgery(t), time.Hour) }},
	}
	rows := map[string][]int{ // which forgeries each publisher sends
		"alice":        {0, 1, 2, 3},
		"host-2-agent": {0, 2},       // unsigned, and sealed with its own key
		"host-1-agent": {0, 1, 2, 3}, // on its own subject and key: the broker's to refuse
	}
	var attacks []attack
	for _, p := range publishers {
		for _, j := range rows[p.name] {
			f := forgeries[j]
			attacks = append(attacks, attack{p.name + "-publishes-" + f.name, func(t *testing.T, e *env) {
				c := p.c(e)
				data := f.data(t, e)
				if p.own {
					if err := c.Publish(wire.HostStateSubject("host-1"), data); err != nil {
						t.Fatal(err)
					}
					_ = jsRefused(c, "$KV."+wire.BucketHosts+".host-1", nil, data) // the broker reads it on a restart
					if err := c.Flush(); err != nil {
						t.Fatal(err)
					}
				} else {
					if err := pubRefused(c, wire.HostStateSubject("host-1"), nil, data); err != nil {
						t.Errorf("NATS: %v", err)
					}
					if err := jsRefused(c, "$KV."+wire.BucketHosts+".host-1", nil, data); err != nil {
						t.Errorf("NATS: KV %s: %v", wire.BucketHosts, err)
					}
				}
				// The broker still hears the real agent, at once and after.
				for range 2 {
					e.tickAgents(tick)
					if err := testpoll.Wait(refuseWait, 5*time.Millisecond, e.realHost1); err != nil {
						t.Errorf("broker: %v", err)
						break
					}
				}
			}})
		}
	}
	return class{name: "05-forged-state", ticks: true, attacks: attacks}
}
