package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestAttackPrivacy is the attack table's rows on reading another user's
// money (see the package doc): mallory, a registered user with no VM, and
// alice read the VMs' list, the host states (live, in MRM_HOSTS, from the
// agents) and the audit stream. Host prices are public; another user's
// VMs, plans, holds, budgets and charges are not: a user gets its own in
// detail and of the others only per-host aggregates, or is refused; the
// admin reads everything.
func TestAttackPrivacy(t *testing.T) {
	for _, c := range []class{foreignVMsClass(), hostStatesClass(), agentStateClass(), auditStreamClass()} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runClass(t, c)
		})
	}
}

// withMallory registers the privacy classes' attacker, mallory: a user
// who owns no VM and spends nothing.
var withMallory = setup{users: []string{"mallory"}}

func malloryKey(e *env) *signing.Signer { return e.key(wire.RoleUser, "mallory") }

// jsReadRefused is an attack: who(e) sends the JetStream API request
// subject (body), which NATS must refuse.
func jsReadRefused(who func(e *env) *signing.Signer, subject, body string) func(t *testing.T, e *env) {
	return func(t *testing.T, e *env) {
		c := e.dial(who(e), "stream-reader")
		if err := jsRefused(c, subject, nil, []byte(body)); err != nil {
			t.Fatalf("NATS: %v", err)
		}
		t.Logf("refused: %v", c.violation("Publish", subject))
	}
}

// heard makes sure the broker has heard the plans' bids from the agents (a
// market round, once), so every VM's state carries its plan, hold, budget
// and charge: what the attacks must not read.
func (e *env) heard(t *testing.T) {
	t.Helper()
	for _, v := range e.m.Broker.VMs(&wire.VMsRequest{Host: "host-1"}).VMs {
		if len(v.Bids) == 0 {
			e.advance(tick)
			break
		}
	}
	for _, v := range e.m.Broker.VMs(&wire.VMsRequest{}).VMs {
		if len(v.Bids) == 0 || v.Rate <= 0 {
			t.Fatalf("after a round the broker has no bid on %s: %+v", v.VM, v)
		}
	}
}

// secrets are what only alice's (or bob's) own answers may show: names of
// their VMs, their plans and holds, and their names.
func (e *env) secrets(user string) []string {
	switch user {
	case "alice":
		return []string{`"alice"`, `"a1"`, `"a2"`, e.alicePlan.ID, e.alicePlan.Hold}
	case "bob":
		return []string{`"bob"`, `"b1"`, `"b2"`, e.bobPlan.ID, e.bobPlan.Hold}
	}
	return nil
}

// ---- 21: the VMs' list ----

func foreignVMsClass() class {
	// vms sends req signed by who(e), on its own connection.
	vms := func(t *testing.T, e *env, who *signing.Signer, name string, req *wire.VMsRequest) (json.RawMessage, wire.VMsReply, error) {
		t.Helper()
		e.heard(t)
		var raw json.RawMessage
		if err := call(e.ctx, e.dial(who, name), who, wire.BrokerVMs, req, &raw); err != nil {
			return nil, wire.VMsReply{}, err
		}
		var rep wire.VMsReply
		if err := json.Unmarshal(raw, &rep); err != nil {
			t.Fatalf("vms: %v", err)
		}
		return raw, rep, nil
	}
	// hides fails t if raw shows any of secrets.
	hides := func(t *testing.T, raw json.RawMessage, secrets ...[]string) {
		t.Helper()
		for _, ss := range secrets {
			for _, s := range ss {
				if strings.Contains(string(raw), s) {
					t.Errorf("broker: the answer shows %s: %s", s, raw)
				}
			}
		}
	}
	// aggregates checks each host's Others against the broker's own view:
	// the count and the sums of the VMs of users other than user.
	aggregates := func(t *testing.T, e *env, rep wire.VMsReply, user string, hosts ...string) {
		t.Helper()
		want := map[string]wire.OtherVMs{}
		for _, v := range e.m.Broker.VMs(&wire.VMsRequest{}).VMs {
			if v.Owner == user {
				continue
			}
			o := want[v.Host]
			o.Host, o.VMs, o.Rate, o.Share = v.Host, o.VMs+1, o.Rate+v.Rate, o.Share+v.Share
			want[v.Host] = o
		}
		if len(rep.Others) != len(hosts) {
			t.Fatalf("broker: others on %d hosts, want %v: %+v", len(rep.Others), hosts, rep.Others)
		}
		for i, h := range hosts {
			got, w := rep.Others[i], want[h]
			if got.Host != h || got.VMs != w.VMs || math.Abs(got.Rate-w.Rate) > 1e-9 || math.Abs(got.Share-w.Share) > 1e-9 || got.Rate <= 0 {
				t.Errorf("broker: %s's others are %+v, want %+v", h, got, w)
			}
		}
	}
	return class{name: "21-foreign-vms", setup: withMallory, ticks: true, attacks: []attack{
		{"mallory-reads-every-vm", func(t *testing.T, e *env) {
			raw, rep, err := vms(t, e, malloryKey(e), "mallory", &wire.VMsRequest{})
			if err != nil {
				t.Fatalf("broker: mallory's vms: %v", err)
			}
			if len(rep.VMs) != 0 {
				t.Errorf("broker: mallory, who owns no VM, is shown %d: %s", len(rep.VMs), raw)
			}
			hides(t, raw, e.secrets("alice"), e.secrets("bob"))
			aggregates(t, e, rep, "mallory", "host-1", "host-2")
			// The others' rates on a host are its public price: nothing more.
			for _, o := range rep.Others {
				p, err := e.m.Broker.Price(&wire.PriceRequest{Host: o.Host})
				if err != nil || math.Abs(p.Hosts[0].Price-o.Rate) > 1e-9 {
					t.Errorf("broker: %s's others' rate %v is not its price %+v (%v)", o.Host, o.Rate, p, err)
				}
			}
			t.Logf("aggregates only: %s", raw)
		}},
		{"mallory-names-bob-as-owner", func(t *testing.T, e *env) {
			_, rep, err := vms(t, e, malloryKey(e), "mallory", &wire.VMsRequest{Owner: "bob"})
			if !refused(err) {
				t.Fatalf("broker: got %+v, %v; want forbidden", rep, err)
			}
			t.Logf("refused: %v", err)
		}},
		{"alice-reads-her-own-and-aggregates", func(t *testing.T, e *env) {
			raw, rep, err := vms(t, e, e.alice, "alice", &wire.VMsRequest{Host: "host-1"})
			if err != nil {
				t.Fatalf("broker: alice's vms: %v", err)
			}
			if len(rep.VMs) != 1 || rep.VMs[0].VM != "a1" || rep.VMs[0].Owner != "alice" || len(rep.VMs[0].Bids) != 1 ||
				rep.VMs[0].Bids[0].Plan != e.alicePlan.ID || rep.VMs[0].Bids[0].Hold != e.alicePlan.Hold || rep.VMs[0].Bids[0].Budget <= 0 {
				t.Errorf("broker: alice does not see her own VM on host-1 in detail: %s", raw)
			}
			hides(t, raw, e.secrets("bob"))
			aggregates(t, e, rep, "alice", "host-1")
			t.Logf("her own in detail, bob's as an aggregate: %s", raw)
		}},
		{"host-1-agent-reads-every-vm", func(t *testing.T, e *env) {
			_, rep, err := vms(t, e, e.agents["host-1"], "host-1-agent", &wire.VMsRequest{})
			if !refused(err) {
				t.Fatalf("got %+v, %v; want refused", rep, err)
			}
			t.Logf("refused: %v", err)
		}},
		{"admin-and-broker-read-every-vm", func(t *testing.T, e *env) {
			for _, who := range []struct {
				name string
				key  *signing.Signer
			}{{"admin", e.admin}, {"broker", e.broker}} {
				raw, rep, err := vms(t, e, who.key, who.name+"-reader", &wire.VMsRequest{})
				if err != nil {
					t.Fatalf("broker: %s's vms: %v", who.name, err)
				}
				if len(rep.VMs) != 4 || len(rep.Others) != 0 {
					t.Errorf("broker: %s sees %d VMs and %d aggregates: %s", who.name, len(rep.VMs), len(rep.Others), raw)
				}
				for _, s := range append(e.secrets("alice"), e.secrets("bob")...) {
					if !strings.Contains(string(raw), s) {
						t.Errorf("broker: %s does not see %s: %s", who.name, s, raw)
					}
				}
			}
		}},
	}}
}

// ---- 22: host states, live and in MRM_HOSTS ----

func hostStatesClass() class {
	// subscribes has who subscribe to subject while the agents publish.
	subscribes := func(who func(e *env) *signing.Signer, subject string) func(t *testing.T, e *env) {
		return func(t *testing.T, e *env) {
			c := e.dial(who(e), "state-reader")
			if err := subRefused(c, subject, "", nil, func() { e.tickAgents(tick) }); err != nil {
				t.Fatalf("NATS: %v", err)
			}
			t.Logf("refused: %v", c.violation("Subscription", subject))
		}
	}
	host2 := func(e *env) *signing.Signer { return e.agents["host-2"] }
	hosts := "KV_" + wire.BucketHosts
	host1Key := "$KV." + wire.BucketHosts + ".host-1"
	watch := `{"stream_name":"` + hosts + `","config":{"deliver_subject":"_INBOX.x","ack_policy":"none","filter_subject":">"}}`
	return class{name: "22-host-states", setup: withMallory, ticks: true, attacks: []attack{
		{"mallory-subscribes-every-host-state", subscribes(malloryKey, wire.AllHostStates)},
		{"mallory-subscribes-host-1-state", subscribes(malloryKey, wire.HostStateSubject("host-1"))},
		{"host-2-agent-subscribes-host-1-state", subscribes(host2, wire.HostStateSubject("host-1"))},
		{"mallory-gets-host-1-from-MRM_HOSTS", jsReadRefused(malloryKey, "$JS.API.DIRECT.GET."+hosts+"."+host1Key, "")},
		{"mallory-gets-MRM_HOSTS-by-sequence", jsReadRefused(malloryKey, "$JS.API.STREAM.MSG.GET."+hosts, `{"seq":1}`)},
		{"mallory-watches-MRM_HOSTS", jsReadRefused(malloryKey, "$JS.API.CONSUMER.CREATE."+hosts, watch)},
		{"host-2-agent-gets-host-1-from-MRM_HOSTS", jsReadRefused(host2, "$JS.API.DIRECT.GET."+hosts+"."+host1Key, "")},
		{"admin-reads-MRM_HOSTS", func(t *testing.T, e *env) {
			e.tickAgents(tick)
			js, err := jetstream.New(e.adminNC.Conn)
			if err != nil {
				t.Fatal(err)
			}
			kv, err := js.KeyValue(e.ctx, wire.BucketHosts)
			if err != nil {
				t.Fatal(err)
			}
			entry, err := kv.Get(e.ctx, "host-1")
			if err != nil {
				t.Fatalf("the admin reads host-1's state: %v", err)
			}
			m, err := signing.DecodeHostState(entry.Value())
			if err != nil {
				t.Fatal(err)
			}
			if !bidsOf(m.State, "a1", e.alicePlan.Hold) || !bidsOf(m.State, "b1", e.bobPlan.Hold) {
				t.Errorf("the admin's read of host-1's state lacks alice's or bob's bid: %+v", m.State)
			}
		}},
	}}
}

// bidsOf reports whether st's VM vm has a bid on hold.
func bidsOf(st wire.HostState, vm, hold string) bool {
	for _, v := range st.VMs {
		if v.VM == vm {
			for _, b := range v.Bids {
				if b.Hold == hold {
					return true
				}
			}
		}
	}
	return false
}

// ---- 23: the agents' state endpoint ----

func agentStateClass() class {
	// state asks host's agent for its state, signed by who(e).
	state := func(e *env, who *signing.Signer, host string) (wire.HostState, error) {
		var st wire.HostState
		err := call(e.ctx, e.dial(who, "state-asker"), who, wire.AgentStateSubject(host), &wire.StateRequest{}, &st)
		return st, err
	}
	isRefused := func(who func(e *env) *signing.Signer) func(t *testing.T, e *env) {
		return func(t *testing.T, e *env) {
			st, err := state(e, who(e), "host-1")
			if !refused(err) {
				t.Fatalf("got %+v, %v; want refused", st, err)
			}
			t.Logf("refused: %v", err)
		}
	}
	return class{name: "23-agent-state", setup: withMallory, attacks: []attack{
		{"mallory-asks-host-1-state", isRefused(malloryKey)},
		{"alice-asks-host-1-state", isRefused(func(e *env) *signing.Signer { return e.alice })},
		{"host-2-agent-asks-host-1-state", isRefused(func(e *env) *signing.Signer { return e.agents["host-2"] })},
		{"admin-and-broker-ask-host-1-state", func(t *testing.T, e *env) {
			for _, who := range []*signing.Signer{e.admin, e.broker} {
				st, err := state(e, who, "host-1")
				if err != nil {
					t.Fatalf("agent: %v", err)
				}
				if !bidsOf(st, "a1", e.alicePlan.Hold) || !bidsOf(st, "b1", e.bobPlan.Hold) {
					t.Errorf("agent: the state lacks alice's or bob's bid: %+v", st)
				}
			}
		}},
	}}
}

// ---- 24: the audit stream ----

func auditStreamClass() class {
	events := wire.StreamEvents
	brokerKey := func(e *env) *signing.Signer { return e.broker }
	host1Key := func(e *env) *signing.Signer { return e.agents["host-1"] }
	watch := `{"stream_name":"` + events + `","config":{"deliver_subject":"_INBOX.x","ack_policy":"none"}}`
	return class{name: "24-audit-stream", setup: withMallory, ticks: true, attacks: []attack{
		{"mallory-subscribes-every-event", func(t *testing.T, e *env) {
			c := e.dial(malloryKey(e), "event-reader")
			grant := func() { // an event while she listens: the admin's grant
				if _, err := rpc.Request[wire.GrantReply](e.ctx, e.adminNC.Conn, wire.BankGrant,
					&wire.GrantRequest{ID: "g-while-listening", User: "bob", Amount: credits(1)}, rpc.SignedBy(e.admin)); err != nil {
					t.Fatal(err)
				}
			}
			if err := subRefused(c, wire.AllEvents, "", nil, grant); err != nil {
				t.Fatalf("NATS: %v", err)
			}
			t.Logf("refused: %v", c.violation("Subscription", wire.AllEvents))
		}},
		{"mallory-watches-MRM_EVENTS", jsReadRefused(malloryKey, "$JS.API.CONSUMER.CREATE."+events, watch)},
		{"mallory-gets-MRM_EVENTS-by-sequence", jsReadRefused(malloryKey, "$JS.API.STREAM.MSG.GET."+events, `{"seq":1}`)},
		{"mallory-gets-MRM_EVENTS-direct", jsReadRefused(malloryKey, "$JS.API.DIRECT.GET."+events, `{"seq":1}`)},
		{"broker-key-watches-MRM_EVENTS", jsReadRefused(brokerKey, "$JS.API.CONSUMER.CREATE."+events, watch)},
		{"agent-key-gets-MRM_EVENTS-by-sequence", jsReadRefused(host1Key, "$JS.API.STREAM.MSG.GET."+events, `{"seq":1}`)},
		{"admin-reads-the-spends", func(t *testing.T, e *env) {
			if err := testpoll.Wait(5*time.Second, 20*time.Millisecond, func() error { return e.spendEvents(t) }); err != nil {
				t.Fatal(err)
			}
		}},
	}}
}

// spendEvents reads the spends of the setup from MRM_EVENTS as the admin:
// nil when alice's and bob's are there, each with its signed request.
func (e *env) spendEvents(t *testing.T) error {
	js, err := jetstream.New(e.adminNC.Conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, wire.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{wire.EventSubject("broker", "spend")}})
	if err != nil {
		return err
	}
	batch, err := cons.FetchNoWait(10)
	if err != nil {
		return err
	}
	signed := map[string]bool{}
	for m := range batch.Messages() {
		var ev wire.Event
		if err := json.Unmarshal(m.Data(), &ev); err != nil {
			return err
		}
		signed[ev.Principal.Name] = ev.Request.Key != ""
	}
	if !signed["alice"] || !signed["bob"] {
		return fmt.Errorf("the admin reads the spends' events signed by %v, not alice's and bob's", signed)
	}
	return nil
}
