package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// errorsCounted is the mrm_errors_total of (component, kind) in reg.
func errorsCounted(t testing.TB, reg *prometheus.Registry, component, kind string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "mrm_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["component"] == component && labels["kind"] == kind {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func newSigner(t testing.TB) *signing.Signer {
	t.Helper()
	s, err := signing.NewUserSigner()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestForgedWhoisAnswerRefusedByTheBroker: whoever answers whois in the
// bank's queue group cannot make an unregistered key an admin (or a user)
// for the broker: without the admin's record of that key, its spend is
// refused and the forged answer counted.
func TestForgedWhoisAnswerRefusedByTheBroker(t *testing.T) {
	_, nc := natstest.Start(t)
	admin, mallory, alice := newSigner(t), newSigner(t), newSigner(t)
	aliceCert := signing.SealPrincipal(admin, alice.Public(), "alice", wire.RoleUser)
	sub, err := nc.QueueSubscribe(wire.BankWhois, wire.QueueBank, func(m *nats.Msg) {
		var req wire.WhoisRequest
		_ = json.Unmarshal(m.Data, &req)
		p := wire.Principal{Key: req.Key, Name: "alice", Role: wire.RoleAdmin}
		switch {
		case req.Key == mallory.Public():
			p.Cert = signing.SealPrincipal(mallory, req.Key, "alice", wire.RoleAdmin) // not the admin's seal
		case req.Key == alice.Public():
			p.Cert = aliceCert // alice's real record, but the answer says admin
		}
		_ = m.Respond(wire.EncodeReply(p, nil))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	reg := prometheus.NewRegistry()
	b, err := broker.New(broker.Config{NC: nc, Bank: bank.Client{NC: nc}, Identities: bank.Client{NC: nc}, AdminKey: admin.Public(),
		Metrics: obs.NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := broker.Serve(nc, b)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for i, s := range []*signing.Signer{mallory, newSigner(t), alice} {
		// bob's plan: only an admin may spend for him.
		_, err := broker.Client{NC: nc, Signer: s}.Spend(context.Background(), &wire.SpendRequest{ID: "s", User: "bob", Budget: 1000,
			Duration: wire.Duration(time.Hour), VMs: []string{"vm1"}, Strategy: wire.StrategyFair})
		if !errors.Is(err, wire.ErrForbidden) {
			t.Fatalf("signer %d: a spend for bob on a forged answer: %v", i, err)
		}
		if got := errorsCounted(t, reg, "broker", "forged_whois"); got != float64(i+1) {
			t.Fatalf("forged answers counted: %v, want %d", got, i+1)
		}
	}
}

// stateWorld is NATS, a bank that knows the admin key, with agents of
// host-1 and host-2 registered, and a broker that checks states.
type stateWorld struct {
	nc      *nats.Conn
	assets  *natsutil.Assets
	admin   *signing.Signer
	agents  map[string]*signing.Signer
	reg     *prometheus.Registry
	b       *broker.Broker
	stopped func()
}

func newStateWorld(t *testing.T) *stateWorld {
	t.Helper()
	_, nc := natstest.Start(t)
	w := &stateWorld{nc: nc, assets: natstest.Assets(t, nc), admin: newSigner(t), agents: map[string]*signing.Signer{}}
	bk, err := bank.Open(filepath.Join(t.TempDir(), "bank.db"), bank.Options{AdminKey: w.admin.Public()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bk.Close() })
	for _, h := range []string{"host-1", "host-2"} {
		s := newSigner(t)
		w.agents[h] = s
		if _, err := bk.AddPrincipal(context.Background(), &wire.PrincipalRequest{Key: s.Public(), Name: h, Role: wire.RoleAgent,
			Cert: signing.SealPrincipal(w.admin, s.Public(), h, wire.RoleAgent)}); err != nil {
			t.Fatal(err)
		}
	}
	stop, err := bank.Serve(nc, bk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	w.start(t)
	return w
}

// start starts a broker (again: a restart catches up from the bucket).
func (w *stateWorld) start(t *testing.T) {
	t.Helper()
	if w.stopped != nil {
		w.stopped()
	}
	w.reg = prometheus.NewRegistry()
	var err error
	w.b, err = broker.New(broker.Config{NC: w.nc, Bank: bank.Client{NC: w.nc}, Identities: bank.Client{NC: w.nc},
		AdminKey: w.admin.Public(), Metrics: obs.NewMetrics(w.reg)})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := broker.Serve(w.nc, w.b)
	if err != nil {
		t.Fatal(err)
	}
	w.stopped = func() { stop(); w.b.Close() }
	t.Cleanup(func() {
		if w.stopped != nil {
			w.stopped()
			w.stopped = nil
		}
	})
}

// publish publishes st as an agent with signer s would (nil: unsealed).
func (w *stateWorld) publish(t *testing.T, s *signing.Signer, st wire.HostState) {
	t.Helper()
	if err := (agent.NATSPublisher{NC: w.nc, KV: w.assets.Hosts, Signer: s}).Publish(context.Background(), st); err != nil {
		t.Fatal(err)
	}
}

// waitCount waits until (broker, kind) errors reach n.
func (w *stateWorld) waitCount(t *testing.T, kind string, n float64) {
	t.Helper()
	testpoll.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if got := errorsCounted(t, w.reg, "broker", kind); got != n {
			return errors.New("the broker counts " + kind + ": not within 5s")
		}
		return nil
	})
}

// price waits until the broker reports host's price as want.
func (w *stateWorld) price(t *testing.T, host string, want float64) {
	t.Helper()
	testpoll.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		p, err := w.b.Price(&wire.PriceRequest{Host: host})
		if err != nil || p.Hosts[0].Price != want {
			return errors.New("the broker hears the real agent: not within 5s")
		}
		return nil
	})
}

func hostState(host string, at time.Time, price float64, vms ...string) wire.HostState {
	st := wire.HostState{Host: host, Time: at, Tick: at.Unix(), Price: price}
	for _, vm := range vms {
		st.VMs = append(st.VMs, wire.VMState{VM: vm, Owner: "alice"})
	}
	return st
}

// TestHostStatesOnlyFromTheirAgent: a state of host-1 sealed by host-2's
// agent, by an unregistered key or not at all, or sealed (by host-1's own
// key) an hour ahead, is refused and counted; host-1's real agent is heard
// afterwards, and after a restart that finds a poisoned state in the
// bucket.
func TestHostStatesOnlyFromTheirAgent(t *testing.T) {
	w := newStateWorld(t)
	now := time.Now()
	future := *w.agents["host-1"]
	future.Now = func() time.Time { return now.Add(time.Hour) }
	poison := hostState("host-1", now.Add(100*365*24*time.Hour), 1e12, "vm-x")

	w.publish(t, w.agents["host-2"], poison)
	w.waitCount(t, "forged_state", 1)
	w.publish(t, newSigner(t), poison)
	w.waitCount(t, "forged_state", 2)
	w.publish(t, nil, poison)
	w.waitCount(t, "forged_state", 3)
	w.publish(t, &future, poison)
	w.waitCount(t, "state_time", 1)
	if p, err := w.b.Price(&wire.PriceRequest{}); err != nil || len(p.Hosts) != 0 {
		t.Fatalf("a refused state reached the broker: %+v %v", p, err)
	}

	w.publish(t, w.agents["host-1"], hostState("host-1", now, 0.5, "vm-1"))
	w.price(t, "host-1", 0.5)
	w.publish(t, w.agents["host-1"], hostState("host-1", now.Add(time.Second), 0.7, "vm-1"))
	w.price(t, "host-1", 0.7)

	// The bucket now holds a poisoned state (as a KV write would leave it):
	// a restarted broker refuses it in its catch-up and hears the agent.
	w.publish(t, &future, poison)
	w.start(t)
	if got := errorsCounted(t, w.reg, "broker", "state_time"); got != 1 {
		t.Fatalf("the catch-up counted %v refused states, want 1", got)
	}
	if _, err := w.b.Price(&wire.PriceRequest{Host: "host-1"}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("the catch-up took a poisoned state: %v", err)
	}
	w.publish(t, w.agents["host-1"], hostState("host-1", time.Now(), 0.9, "vm-1"))
	w.price(t, "host-1", 0.9)
}

// TestAVMStaysWithItsHost: host-2's state cannot claim a VM host-1
// reports; once host-1's state drops it, host-2's next state takes it.
func TestAVMStaysWithItsHost(t *testing.T) {
	reg := prometheus.NewRegistry()
	b, err := broker.New(broker.Config{Agents: noAgents{}, Bank: bank.Client{}, Metrics: obs.NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	vmsOf := func(host string) []string {
		var ids []string
		for _, v := range b.VMs(&wire.VMsRequest{Host: host}).VMs {
			ids = append(ids, v.VM)
		}
		return ids
	}
	b.Observe(hostState("host-1", t0, 1, "vm-a"))
	b.Observe(hostState("host-2", t0, 1, "vm-a", "vm-b"))
	if got := vmsOf("host-2"); len(got) != 1 || got[0] != "vm-b" {
		t.Fatalf("host-2 claimed host-1's VM: %v", got)
	}
	if got := vmsOf("host-1"); len(got) != 1 || got[0] != "vm-a" {
		t.Fatalf("host-1 lost its VM: %v", got)
	}
	if got := errorsCounted(t, reg, "broker", "vm_claimed"); got != 1 {
		t.Fatalf("claims counted: %v", got)
	}
	b.Observe(hostState("host-1", t0.Add(time.Second), 1))
	b.Observe(hostState("host-2", t0.Add(time.Second), 1, "vm-a", "vm-b"))
	if got := vmsOf("host-2"); len(got) != 2 {
		t.Fatalf("host-2 does not get the VM host-1 let go: %v", got)
	}
}

type noAgents struct{}

func (noAgents) Bid(_ context.Context, _ string, reqs []*wire.BidRequest) []error {
	return make([]error, len(reqs))
}

// TestForgedBrokerRepliesIgnored: a client that knows the anchor ignores a
// forger's answer (here, a plan list with a plan that does not exist) and
// takes the broker's signed one.
func TestForgedBrokerRepliesIgnored(t *testing.T) {
	w := newStateWorld(t)
	key := newSigner(t)
	bk, err := bank.Open(filepath.Join(t.TempDir(), "registry.db"), bank.Options{AdminKey: w.admin.Public()})
	if err != nil {
		t.Fatal(err)
	}
	defer bk.Close()
	// The broker's key is registered where the broker looks it up.
	if _, err := bk.AddPrincipal(context.Background(), &wire.PrincipalRequest{Key: key.Public(), Name: "broker", Role: wire.RoleBroker,
		Cert: signing.SealPrincipal(w.admin, key.Public(), "broker", wire.RoleBroker)}); err != nil {
		t.Fatal(err)
	}
	w.stopped()
	w.stopped = nil
	b, err := broker.New(broker.Config{NC: w.nc, Bank: bank.Client{NC: w.nc}, Identities: bk, AdminKey: w.admin.Public(), Signer: key})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sub, err := w.nc.Subscribe(wire.BrokerPlans, func(m *nats.Msg) {
		_ = m.Respond(wire.EncodeReply(wire.PlansReply{Plans: []wire.Plan{{ID: "forged"}}}, nil))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := w.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	refused := 0
	c := broker.Client{NC: w.nc, Signer: w.admin, AdminKey: w.admin.Public(), OnRefused: func(error) { refused++ }}
	// Only the forger answers: nothing is believed.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if rep, err := c.Plans(ctx, &wire.PlansRequest{}); !errors.Is(err, wire.ErrUnavailable) || refused != 1 {
		t.Fatalf("plans answered by a forger: %+v %v (%d replies ignored)", rep, err, refused)
	}
	// The broker answers too: its answer is taken, whoever is first.
	stopB, err := broker.Serve(w.nc, b)
	if err != nil {
		t.Fatal(err)
	}
	defer stopB()
	rep, err := c.Plans(context.Background(), &wire.PlansRequest{})
	if err != nil || len(rep.Plans) != 0 {
		t.Fatalf("plans: %+v %v", rep, err)
	}
}

// TestForgedBidRepliesIgnored: a broker that knows the anchor believes a
// bid's answer only from the host's own agent. With only a forger
// answering ("forbidden", which would roll the spend back), the spend
// cannot tell and fails as unavailable; with the agent serving, its signed
// answer is taken.
func TestForgedBidRepliesIgnored(t *testing.T) {
	ctx := context.Background()
	_, nc := natstest.Start(t)
	admin, hostKey, brokerKey, aliceKey := newSigner(t), newSigner(t), newSigner(t), newSigner(t)
	bk, err := bank.Open(filepath.Join(t.TempDir(), "bank.db"), bank.Options{AdminKey: admin.Public()})
	if err != nil {
		t.Fatal(err)
	}
	defer bk.Close()
	for _, p := range []wire.Principal{{Key: hostKey.Public(), Name: "host-1", Role: wire.RoleAgent}, {Key: brokerKey.Public(), Name: "broker", Role: wire.RoleBroker},
		{Key: aliceKey.Public(), Name: "alice", Role: wire.RoleUser}} {
		if _, err := bk.AddPrincipal(ctx, &wire.PrincipalRequest{Key: p.Key, Name: p.Name, Role: p.Role,
			Cert: signing.SealPrincipal(admin, p.Key, p.Name, p.Role)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := bk.Grant(ctx, &wire.GrantRequest{ID: "g", User: "alice", Amount: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	sim := agent.NewSimEnforcer(time.Now, 1, agent.VM{ID: "vm1", Owner: "alice"})
	a, err := agent.New(agent.Config{Host: "host-1", Enforcer: sim, Capturer: bk, Identities: bk, AdminKey: admin.Public(), Signer: hostKey})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	b, err := broker.New(broker.Config{NC: nc, Bank: bk, Identities: bk, AdminKey: admin.Public(), Signer: brokerKey, Metrics: obs.NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b.Observe(a.State())
	sub, err := nc.Subscribe(wire.AgentBidSubject("host-1"), func(m *nats.Msg) {
		_ = m.Respond(wire.EncodeReply(nil, wire.Errorf(wire.ErrForbidden, "forged refusal")))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// alice spends over NATS, signed, so her spend is the bids' mandate
	// (the agent charges no bid without one).
	alice := aliceKey // registered above: a principal has one live key
	stopBroker, err := broker.Serve(nc, b)
	if err != nil {
		t.Fatal(err)
	}
	defer stopBroker()
	users := broker.Client{NC: nc, Signer: alice, AdminKey: admin.Public()}
	spend := func(ctx context.Context, id string) error {
		_, err := users.Spend(ctx, &wire.SpendRequest{ID: id, User: "alice", Budget: 1000, Duration: wire.Duration(time.Hour),
			VMs: []string{"vm1"}, Strategy: wire.StrategyFair})
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := spend(tctx, "s1"); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("a spend only a forger answered: %v", err)
	}
	if got := errorsCounted(t, reg, "broker", "untrusted_reply"); got < 1 {
		t.Fatalf("forged bid replies counted: %v", got)
	}
	stop, err := agent.Serve(nc, a)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := spend(ctx, "s2"); err != nil {
		t.Fatalf("a spend the agent answered: %v", err)
	}
	if st := a.State(); st.VMs[0].Rate == 0 {
		t.Fatalf("the agent has no bid: %+v", st.VMs[0])
	}
}
