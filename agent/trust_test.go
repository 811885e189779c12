package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
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

// forgeWhois answers every whois on nc in the bank's queue group — as
// anyone can on a NATS server without permissions — saying the key asked
// about is an admin, with the record cert gives (nil: none).
func forgeWhois(t testing.TB, nc *nats.Conn, cert func(key string) *wire.Sealed) {
	t.Helper()
	sub, err := nc.QueueSubscribe(wire.BankWhois, wire.QueueBank, func(m *nats.Msg) {
		var req wire.WhoisRequest
		_ = json.Unmarshal(m.Data, &req)
		_ = m.Respond(wire.EncodeReply(wire.Principal{Key: req.Key, Name: "mallory", Role: wire.RoleAdmin, Cert: cert(req.Key)}, nil))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// TestForgedWhoisAnswerRefusedByTheAgent: an unregistered key that a forged
// whois answer calls an admin may not place bids, whatever record the
// answer carries, and each refusal is counted.
func TestForgedWhoisAnswerRefusedByTheAgent(t *testing.T) {
	_, nc := natstest.Start(t)
	admin, mallory := newSigner(t), newSigner(t)
	forgeWhois(t, nc, func(key string) *wire.Sealed {
		if key == mallory.Public() {
			return signing.SealPrincipal(mallory, key, "mallory", wire.RoleAdmin) // sealed by the wrong key
		}
		return nil
	})
	reg := prometheus.NewRegistry()
	metrics := obs.NewMetrics(reg)
	sim := agent.NewSimEnforcer(time.Now, 1, agent.VM{ID: "vm1", Owner: "alice"})
	records := make(chan slog.Record, 64)
	a, err := agent.New(agent.Config{Host: "host-1", Enforcer: sim, Capturer: ackCapturer{}, Metrics: metrics,
		Identities: bank.Client{NC: nc}, AdminKey: admin.Public(), Logger: slog.New(recordHandler{records})})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := agent.Serve(nc, a)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	bid := bidReq(wire.Bid{VM: "vm1", Owner: "alice", Plan: "p", Hold: "h", Budget: 1000, Duration: wire.Duration(time.Hour)})
	bid.V = wire.Version
	for i, s := range []*signing.Signer{mallory, newSigner(t)} {
		err := natstest.Bid(context.Background(), nc, "host-1", bid, rpc.SignedBy(s))
		if !errors.Is(err, wire.ErrForbidden) {
			t.Fatalf("a bid signed by a key the forged answer made an admin: %v", err)
		}
		if got := errorsCounted(t, reg, "agent", "forged_whois"); got != float64(i+1) {
			t.Fatalf("forged answers counted: %v, want %d", got, i+1)
		}
	}
	// Each refusal is one log line naming the host, the request and why.
	refused := 0
	for _, r := range drain(records) {
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		if strings.Contains(r.Message, "refused") && attrs["host"] == "host-1" && attrs["op"] != "" && attrs["err"] != "" {
			refused++
		}
	}
	if refused != 2 {
		t.Fatalf("%d refusals logged, want 2", refused)
	}
	if st := a.State(); st.VMs[0].Rate != 0 {
		t.Fatalf("a forged bid is charging: %+v", st.VMs[0])
	}
}

type ackCapturer struct{}

func (ackCapturer) Capture(_ context.Context, b *wire.CaptureBatch) (wire.CaptureReply, error) {
	return wire.CaptureReply{Legs: make([]wire.LegResult, len(b.Legs))}, nil
}

// TestForgedCaptureReplyKeepsTheBid: replies to the agent's capture forged
// to say the hold is gone (an error reply, and legs with errors, unsigned or
// signed by a user) are ignored: with no bank answering the capture fails
// and the bid stays; the next tick, the bank's signed answer is taken
// (forgers still answering first).
func TestForgedCaptureReplyKeepsTheBid(t *testing.T) {
	ns, nc := natstest.Start(t)
	clock := t0
	now := func() time.Time { return clock }
	admin, bankKey, hostKey, mallory, alice := newSigner(t), newSigner(t), newSigner(t), newSigner(t), newSigner(t)
	bk, err := bank.Open(filepath.Join(t.TempDir(), "bank.db"), bank.Options{Now: now, AdminKey: admin.Public(), Signer: bankKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bk.Close() })
	ctx := context.Background()
	for _, p := range []struct {
		s          *signing.Signer
		name, role string
	}{{bankKey, "bank", wire.RoleBank}, {hostKey, "host-1", wire.RoleAgent}, {mallory, "mallory", wire.RoleUser}, {alice, "alice", wire.RoleUser}} {
		req := &wire.PrincipalRequest{Key: p.s.Public(), Name: p.name, Role: p.role, Cert: signing.SealPrincipal(admin, p.s.Public(), p.name, p.role)}
		if _, err := bk.AddPrincipal(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := bk.Grant(ctx, &wire.GrantRequest{ID: "g", User: "alice", Amount: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	// Alice's hold, bound to her signed spend as a broker places it: only
	// such a hold is captured where the bank knows identities.
	spend, err := mandate.Sign(alice, wire.BrokerSpend, &wire.SpendRequest{ID: "p", User: "alice", Budget: 1_000_000,
		Duration: wire.Duration(time.Hour), VMs: []string{"vm1"}, Strategy: wire.StrategyFair})
	if err != nil {
		t.Fatal(err)
	}
	hold := mandate.HoldIDFor("alice", "p")
	if _, err := bk.Hold(ctx, &wire.HoldRequest{ID: hold, User: "alice", Amount: 1_000_000, Expires: t0.Add(time.Hour), Hosts: []string{"host-1"},
		Mandate: spend, Placement: []wire.Placed{{VM: "vm1", Host: "host-1"}}}); err != nil {
		t.Fatal(err)
	}
	// The forgers hear every capture and answer at once.
	forger := natstest.Connect(t, ns)
	_, err = forger.Subscribe(wire.BankCapture, func(m *nats.Msg) {
		var batch wire.CaptureBatch
		_ = json.Unmarshal(m.Data, &batch)
		_ = m.Respond(wire.EncodeReply(nil, wire.Errorf(wire.ErrNotFound, "unknown hold")))
		rep := wire.CaptureReply{}
		for _, l := range batch.Legs {
			rep.Legs = append(rep.Legs, wire.LegResult{ID: l.ID, Hold: l.Hold, VM: l.VM, Error: &wire.Error{Code: wire.CodeNotFound, Message: "unknown hold"}})
		}
		body := wire.EncodeReply(rep, nil)
		r := nats.NewMsg(m.Reply)
		r.Data, r.Header = body, mallory.SignReply(m.Reply, m.Header.Get(signing.HeaderNonce), body, signing.SealPrincipal(admin, mallory.Public(), "mallory", wire.RoleUser))
		_ = forger.PublishMsg(r)
		_ = m.Respond(body)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := forger.Flush(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	metrics := obs.NewMetrics(reg)
	sim := agent.NewSimEnforcer(now, 1, agent.VM{ID: "vm1", Owner: "alice"})
	a, err := agent.New(agent.Config{Host: "host-1", Enforcer: sim, Now: now, Metrics: metrics,
		Capturer: bank.Client{NC: nc, Signer: hostKey, AdminKey: admin.Public(),
			OnRefused: func(error) { metrics.Error("agent", "untrusted_reply") }}})
	if err != nil {
		t.Fatal(err)
	}
	bid := wire.Bid{VM: "vm1", Owner: "alice", Plan: "p", Hold: hold, Budget: 600_000, Duration: wire.Duration(time.Hour)}
	if _, err := a.SetBids(ctx, bidReq(bid)); err != nil {
		t.Fatal(err)
	}
	// Tick 1: only forgers answer.
	clock = t0.Add(time.Minute)
	tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = a.Tick(tctx, clock)
	cancel()
	if !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("a capture only forgers answered: %v", err)
	}
	if got := errorsCounted(t, reg, "agent", "untrusted_reply"); got != 3 {
		t.Fatalf("forged replies counted: %v, want 3 (tick: %v)", got, err)
	}
	if st := a.State(); len(st.VMs[0].Bids) != 1 || st.VMs[0].Bids[0].Hold != hold || st.VMs[0].Rate == 0 {
		t.Fatalf("the bid was dropped on a forged answer: %+v", st.VMs[0])
	}
	// Tick 2: the bank answers too, after the forgers.
	stop, err := bank.Serve(nc, bk)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	clock = t0.Add(2 * time.Minute)
	if _, err := a.Tick(ctx, clock); err != nil {
		t.Fatalf("the bank's answer: %v", err)
	}
	want, _ := money.Charge(600_000, 2*time.Minute, time.Hour)
	l, err := bk.Ledger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var captured money.Micro
	for _, acc := range l.Accounts {
		if acc.Kind == wire.AccountProvider {
			captured += acc.Balance
		}
	}
	if captured != want {
		t.Fatalf("captured %d, want %d (both ticks' charge)", captured, want)
	}
	if st := a.State(); len(st.VMs[0].Bids) != 1 || st.VMs[0].Bids[0].Hold != hold || st.VMs[0].Rate == 0 {
		t.Fatalf("the bid is gone after the bank's answer: %+v", st.VMs[0])
	}
}

// TestRefusedChangesAreCountedAndLogged: a batch is answered ok whatever
// its changes' fate, so the agent counts and logs each change it refuses,
// as the service does a request it refuses — an operator still sees at the
// agent the bids it would not take. Mutation: not calling refused leaves
// the count at 0.
func TestRefusedChangesAreCountedAndLogged(t *testing.T) {
	reg := prometheus.NewRegistry()
	records := make(chan slog.Record, 64)
	sim := agent.NewSimEnforcer(time.Now, 1, agent.VM{ID: "vm1", Owner: "alice"})
	a, err := agent.New(agent.Config{Host: "host-1", Enforcer: sim, Capturer: ackCapturer{}, Metrics: obs.NewMetrics(reg),
		Logger: slog.New(recordHandler{records})})
	if err != nil {
		t.Fatal(err)
	}
	ok := wire.Bid{VM: "vm1", Owner: "alice", Plan: "p", Hold: "h", Budget: 1000, Duration: wire.Duration(time.Hour)}
	stray := wire.Bid{VM: "vm9", Owner: "bob", Plan: "q", Hold: "h2", Budget: 1000, Duration: wire.Duration(time.Hour)}
	res, err := a.Bids(context.Background(), &wire.BidBatch{Changes: []wire.BidRequest{*bidReq(ok), *bidReq(stray)}})
	if err != nil || res.Err(0) != nil || !errors.Is(res.Err(1), wire.ErrNotFound) {
		t.Fatalf("batch: %v, results %v, %v", err, res.Err(0), res.Err(1))
	}
	if got := errorsCounted(t, reg, "agent", "bid_refused"); got != 1 {
		t.Errorf("refused changes counted: %v, want 1", got)
	}
	for {
		select {
		case r := <-records:
			if r.Message != "agent: bid change refused" {
				continue
			}
			attrs := map[string]string{}
			r.Attrs(func(at slog.Attr) bool { attrs[at.Key] = at.Value.String(); return true })
			if attrs["plan"] != "q" || attrs["owner"] != "bob" || attrs["code"] != wire.CodeNotFound || r.Level != slog.LevelInfo {
				t.Errorf("the refusal's line: %v %v", r.Level, attrs)
			}
			return
		default:
			t.Fatal("no line for the refused change")
		}
	}
}
