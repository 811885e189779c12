package market_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

// signer is the market's key of a principal.
func signer(t *testing.T, m *market.Market, role, name string) *signing.Signer {
	t.Helper()
	s, err := m.Keys().Signer(role, name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// signMandate signs req as user would send it, and returns it as a mandate.
func signMandate(t *testing.T, s *signing.Signer, subject string, req any) *wire.SignedRequest {
	t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.Sign(subject, body)
	if err != nil {
		t.Fatal(err)
	}
	sr, ok := signing.SignedRequestOf(subject, msg.Header, msg.Data)
	if !ok {
		t.Fatal("unsigned")
	}
	return &sr
}

func grant(t *testing.T, bc bank.Client, user, amount string) {
	t.Helper()
	if _, err := bc.Grant(context.Background(), &wire.GrantRequest{ID: "g-" + user, User: user, Amount: credits(t, amount)}); err != nil {
		t.Fatal(err)
	}
}

// TestBidsNeedTheirMandate: even signed by the broker, an agent charges a
// bid only with its owner's mandate naming the VM, funding the bid's hold,
// within its period.
func TestBidsNeedTheirMandate(t *testing.T) {
	ctx := context.Background()
	m, _, bc, _ := testMarket(t)
	grant(t, bc, "alice", "10")
	grant(t, bc, "bob", "10")
	nc, err := m.NC("rogue-broker")
	if err != nil {
		t.Fatal(err)
	}
	brokerKey := signer(t, m, wire.RoleBroker, "broker")
	alice, bob := signer(t, m, wire.RoleUser, "alice"), signer(t, m, wire.RoleUser, "bob")
	spend := func(user, id string, vms ...string) *wire.SpendRequest {
		return &wire.SpendRequest{Versioned: wire.Versioned{V: wire.Version}, ID: id, User: user, Budget: credits(t, "1"), Duration: wire.Duration(time.Hour), VMs: vms, Strategy: wire.StrategyFair}
	}
	aliceA1 := signMandate(t, alice, wire.BrokerSpend, spend("alice", "pa", "a1"))
	aliceA2 := signMandate(t, alice, wire.BrokerSpend, spend("alice", "pa2", "a2"))
	bobB1 := signMandate(t, bob, wire.BrokerSpend, spend("bob", "pb", "b1"))
	aliceForBob := signMandate(t, alice, wire.BrokerSpend, spend("bob", "px", "a1"))
	bid := func(b wire.Bid) error {
		return natstest.Bid(ctx, nc, "host-1", &wire.BidRequest{Set: []wire.Bid{b}}, rpc.SignedBy(brokerKey))
	}
	hour := wire.Duration(time.Hour)
	l0 := checkLedger(t, bc)
	cases := []struct {
		name string
		b    wire.Bid
	}{
		{"no mandate", wire.Bid{VM: "a1", Owner: "alice", Plan: "p", Hold: mandate.HoldIDFor("alice", "pa"), Budget: 5, Duration: hour}},
		{"alice's VM at bob's hold, with bob's mandate", wire.Bid{VM: "a1", Owner: "alice", Plan: "p", Hold: mandate.HoldIDFor("bob", "pb"), Budget: 5, Duration: hour, Mandate: bobB1}},
		{"a mandate of another user", wire.Bid{VM: "a1", Owner: "alice", Plan: "p", Hold: mandate.HoldIDFor("bob", "pb"), Budget: 5, Duration: hour, Mandate: bobB1}},
		{"signed by a user for another", wire.Bid{VM: "a1", Owner: "alice", Plan: "p", Hold: mandate.HoldIDFor("bob", "px"), Budget: 5, Duration: hour, Mandate: aliceForBob}},
		{"a VM not named", wire.Bid{VM: "a1", Owner: "alice", Plan: "p", Hold: mandate.HoldIDFor("alice", "pa2"), Budget: 5, Duration: hour, Mandate: aliceA2}},
		{"a hold not derived", wire.Bid{VM: "a1", Owner: "alice", Plan: "p", Hold: mandate.HoldIDFor("bob", "pb"), Budget: 5, Duration: hour, Mandate: aliceA1}},
		{"past the period", wire.Bid{VM: "a1", Owner: "alice", Plan: "p", Hold: mandate.HoldIDFor("alice", "pa"), Budget: 5, Duration: wire.Duration(2 * time.Hour), Mandate: aliceA1}},
	}
	for _, c := range cases {
		if err := bid(c.b); !errors.Is(err, wire.ErrForbidden) {
			t.Errorf("%s: got %v, want forbidden", c.name, err)
		}
	}
	if st := m.Agents[0].State(); len(st.VMs[0].Bids) != 0 || len(st.VMs[1].Bids) != 0 {
		t.Fatalf("refused bids are in the book: %+v", st.VMs)
	}
	if l1 := checkLedger(t, bc); !equalJSON(t, l0, l1) {
		t.Fatalf("refused bids changed the ledger: %+v → %+v", l0, l1)
	}
	// The bid its mandate allows is taken.
	if err := bid(wire.Bid{VM: "a1", Owner: "alice", Plan: "p", Hold: mandate.HoldIDFor("alice", "pa"), Budget: 5, Duration: hour, Mandate: aliceA1}); err != nil {
		t.Fatalf("a bid its mandate allows: %v", err)
	}
}

// TestBankChecksBrokersMandates: a broker holds or extends a user's money
// only as the user's mandate says, and a capture never goes into a hold of
// another user than the VM's owner.
func TestBankChecksBrokersMandates(t *testing.T) {
	ctx := context.Background()
	m, clock, bc, _ := testMarket(t)
	grant(t, bc, "alice", "10")
	grant(t, bc, "bob", "10")
	nc, err := m.NC("rogue-broker")
	if err != nil {
		t.Fatal(err)
	}
	asBroker := bank.Client{NC: nc, Signer: signer(t, m, wire.RoleBroker, "broker")}
	alice, bob := signer(t, m, wire.RoleUser, "alice"), signer(t, m, wire.RoleUser, "bob")
	spend := &wire.SpendRequest{ID: "pa", User: "alice", Budget: credits(t, "2"), Duration: wire.Duration(time.Hour), VMs: []string{"a1"}, Strategy: wire.StrategyFair}
	good := signMandate(t, alice, wire.BrokerSpend, spend)
	bobs := signMandate(t, bob, wire.BrokerSpend, &wire.SpendRequest{ID: "pa", User: "bob", Budget: credits(t, "2"), Duration: wire.Duration(time.Hour), VMs: []string{"b1"}, Strategy: wire.StrategyFair})
	exp := clock.Add(time.Hour) // within the mandate's period
	hold := func(id, amount string, md *wire.SignedRequest) error {
		_, err := asBroker.Hold(ctx, &wire.HoldRequest{ID: id, User: "alice", Amount: credits(t, amount), Expires: exp, Mandate: md,
			Hosts: []string{"host-1"}, Placement: []wire.Placed{{VM: "a1", Host: "host-1"}}})
		return err
	}
	l0 := checkLedger(t, bc)
	cases := []struct {
		name string
		err  error
	}{
		{"no mandate", hold(mandate.HoldIDFor("alice", "pa"), "1", nil)},
		{"bob's mandate for alice's money", hold(mandate.HoldIDFor("alice", "pa"), "1", bobs)},
		{"a hold not derived", hold("hold-mine", "1", good)},
		{"more than signed", hold(mandate.HoldIDFor("alice", "pa"), "3", good)},
	}
	for _, c := range cases {
		if !errors.Is(c.err, wire.ErrForbidden) {
			t.Errorf("%s: got %v, want forbidden", c.name, c.err)
		}
	}
	if l1 := checkLedger(t, bc); !equalJSON(t, l0, l1) {
		t.Fatalf("refused holds changed the ledger: %+v → %+v", l0, l1)
	}
	if err := hold(mandate.HoldIDFor("alice", "pa"), "2", good); err != nil {
		t.Fatalf("the hold the mandate allows: %v", err)
	}
	// Extensions: only by a signed spend --more of that plan, as much as it adds.
	more := signMandate(t, alice, wire.BrokerAdjust, &wire.AdjustRequest{Plan: "pa", User: "alice", ID: "m1", More: credits(t, "1")})
	extend := func(id, amount string, md *wire.SignedRequest) error {
		_, err := asBroker.Extend(ctx, &wire.ExtendRequest{ID: id, Hold: mandate.HoldIDFor("alice", "pa"), User: "alice", Amount: credits(t, amount), Mandate: md})
		return err
	}
	if err := extend(wire.AdjustPlanID("pa", "m1"), "1", nil); !errors.Is(err, wire.ErrForbidden) {
		t.Errorf("extend without a mandate: %v", err)
	}
	if err := extend(wire.AdjustPlanID("pa", "m1"), "5", more); !errors.Is(err, wire.ErrForbidden) {
		t.Errorf("extend by more than signed: %v", err)
	}
	if err := extend(wire.AdjustPlanID("pa", "m1"), "1", good); !errors.Is(err, wire.ErrForbidden) {
		t.Errorf("extend with a spend's mandate: %v", err)
	}
	if err := extend(wire.AdjustPlanID("pa", "m1"), "1", more); err != nil {
		t.Fatalf("the extension the mandate allows: %v", err)
	}
	// Host-1's agent captures from alice's hold for bob's VM: refused.
	asAgent := bank.Client{NC: nc, Signer: signer(t, m, wire.RoleAgent, "host-1")}
	rep, err := asAgent.Capture(ctx, &wire.CaptureBatch{Host: "host-1", Tick: 1, Legs: []wire.CaptureLeg{
		{ID: "x/host-1/b1/1", Hold: mandate.HoldIDFor("alice", "pa"), VM: "b1", Owner: "bob", Cumulative: 1000}}})
	if err != nil || rep.Applied != 0 || rep.Legs[0].Error == nil || !errors.Is(rep.Legs[0].Error, wire.ErrForbidden) {
		t.Fatalf("capture into another user's hold: %+v %v", rep, err)
	}
}

// TestForgedPlanRecordsMoveNothing: records written into MRM_PLANS by
// anyone but a broker — unsigned, or sealed by a user; pointing alice's VM
// at bob's hold, or raising bob's budget 100× — are refused and reported,
// never run: no bid lands, no money moves.
func TestForgedPlanRecordsMoveNothing(t *testing.T) {
	ctx := context.Background()
	m, clock, bc, brc := testMarket(t)
	grant(t, bc, "alice", "10")
	grant(t, bc, "bob", "10")
	rep, err := brc.Spend(ctx, &wire.SpendRequest{ID: "pb", User: "bob", Budget: credits(t, "2"), Duration: wire.Duration(time.Hour), VMs: []string{"b1"}, Strategy: wire.StrategyFair})
	if err != nil {
		t.Fatal(err)
	}
	bobsPlan := rep.Plan
	nc, err := m.NC("attacker")
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, wire.BucketPlans)
	if err != nil {
		t.Fatal(err)
	}
	key := func(id string) string { return broker.PlanKey("bob", id) }
	// Alice's VM a1 on bob's hold, unsigned.
	forged := map[string]any{"plan": wire.Plan{ID: "evil", User: "bob", Strategy: wire.StrategyFair, Budget: credits(t, "2"),
		Duration: wire.Duration(time.Hour), Start: *clock, End: clock.Add(time.Hour), Hold: bobsPlan.Hold, Status: wire.PlanRunning,
		VMs: []wire.PlanVM{{VM: "a1", Host: "host-1"}}, Owner: "broker-1"}, "request": "x", "bids": map[string]any{}}
	body, _ := json.Marshal(forged)
	if _, err := kv.Put(ctx, key("evil"), body); err != nil {
		t.Fatal(err)
	}
	// Bob's plan with 100× the budget, sealed by a user's key.
	e, err := kv.Get(ctx, key("pb"))
	if err != nil {
		t.Fatal(err)
	}
	var sealed wire.Sealed
	if err := json.Unmarshal(e.Value(), &sealed); err != nil || sealed.Sig == "" {
		t.Fatalf("bob's plan is not stored sealed: %v", err)
	}
	var rec map[string]json.RawMessage
	if err := json.Unmarshal(sealed.Body, &rec); err != nil {
		t.Fatal(err)
	}
	var p wire.Plan
	_ = json.Unmarshal(rec["plan"], &p)
	p.Budget *= 100
	rec["plan"], _ = json.Marshal(p)
	raised, _ := json.Marshal(rec)
	resealed, _ := json.Marshal(signer(t, m, wire.RoleUser, "alice").Seal(broker.PlanPurpose("pb"), raised))
	if _, err := kv.Put(ctx, key("pb"), resealed); err != nil {
		t.Fatal(err)
	}
	testpoll.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if d := m.Broker.Damage(); d.Refused < 2 {
			return errors.New("the forged records are not refused yet")
		}
		return nil
	})
	l0 := checkLedger(t, bc)
	for i := 1; i <= 3; i++ {
		if err := m.Tick(ctx, clock.Add(time.Duration(i)*5*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range m.Agents[0].State().VMs {
		if v.VM == "a1" && len(v.Bids) != 0 {
			t.Fatalf("a forged record placed a bid: %+v", v)
		}
	}
	plans, err := brc.Plans(ctx, &wire.PlansRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(plans.Plans) != 1 || plans.Plans[0].ID != "pb" || plans.Plans[0].Budget != credits(t, "2") {
		t.Fatalf("plans after forged records: %+v", plans.Plans)
	}
	bal, err := bc.Balance(ctx, &wire.BalanceRequest{User: "alice"})
	if err != nil || bal.Balance != credits(t, "10") || bal.Held != 0 {
		t.Fatalf("alice after forged records: %+v %v", bal, err)
	}
	l1 := checkLedger(t, bc)
	if l1.OpenHolds != l0.OpenHolds+0 && l1.Granted != l0.Granted {
		t.Fatalf("ledger: %+v → %+v", l0, l1)
	}
	// The overwritten record is restored from the broker's copy.
	testpoll.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		e, err := kv.Get(ctx, key("pb"))
		if err != nil {
			return err
		}
		var s wire.Sealed
		if json.Unmarshal(e.Value(), &s) != nil || s.Key != signer(t, m, wire.RoleBroker, "broker").Public() {
			return errors.New("bob's plan is not restored yet")
		}
		return nil
	})
}

// TestDeletedPlanKeyIsRestored: a plan key deleted from the bucket is
// reported and written back from the broker's copy.
func TestDeletedPlanKeyIsRestored(t *testing.T) {
	ctx := context.Background()
	m, clock, bc, brc := testMarket(t)
	grant(t, bc, "alice", "10")
	if _, err := brc.Spend(ctx, &wire.SpendRequest{ID: "pa", User: "alice", Budget: credits(t, "2"), Duration: wire.Duration(time.Hour), VMs: []string{"a1"}, Strategy: wire.StrategyFair}); err != nil {
		t.Fatal(err)
	}
	nc, err := m.NC("attacker")
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, wire.BucketPlans)
	if err != nil {
		t.Fatal(err)
	}
	key := broker.PlanKey("alice", "pa")
	if err := kv.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	testpoll.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if m.Broker.Damage().Deleted == 0 {
			return errors.New("deletion not seen yet")
		}
		return nil
	})
	if err := m.Tick(ctx, clock.Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, key); err != nil {
		t.Fatalf("deleted plan key not restored: %v", err)
	}
	plans, err := brc.Plans(ctx, &wire.PlansRequest{User: "alice"})
	if err != nil || len(plans.Plans) != 1 || plans.Plans[0].Status != wire.PlanRunning {
		t.Fatalf("plans after a deleted key: %+v %v", plans, err)
	}
}

// TestAdjustRetriedAppliesOnce: a spend --more sent again with its id (a
// retry after a time-out: a new signature, the same request) adds once.
func TestAdjustRetriedAppliesOnce(t *testing.T) {
	ctx := context.Background()
	_, _, bc, brc := testMarket(t)
	grant(t, bc, "alice", "10")
	if _, err := brc.Spend(ctx, &wire.SpendRequest{ID: "pa", User: "alice", Budget: credits(t, "2"), Duration: wire.Duration(time.Hour), VMs: []string{"a1"}, Strategy: wire.StrategyFair}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		p, err := brc.Adjust(ctx, &wire.AdjustRequest{Plan: "pa", User: "alice", ID: "more-1", More: credits(t, "1")})
		if err != nil || p.Budget != credits(t, "3") {
			t.Fatalf("adjust: %+v %v", p, err)
		}
	}
	bal, err := bc.Balance(ctx, &wire.BalanceRequest{User: "alice"})
	if err != nil || bal.Held+bal.Spent != credits(t, "3") {
		t.Fatalf("alice after a retried --more: %+v %v", bal, err)
	}
	// A spend retried with its id returns the plan, holding nothing more.
	rep, err := brc.Spend(ctx, &wire.SpendRequest{ID: "pa", User: "alice", Budget: credits(t, "2"), Duration: wire.Duration(time.Hour), VMs: []string{"a1"}, Strategy: wire.StrategyFair})
	if err != nil || rep.Plan.ID != "pa" {
		t.Fatalf("retried spend: %+v %v", rep, err)
	}
	if bal2, _ := bc.Balance(ctx, &wire.BalanceRequest{User: "alice"}); bal2.Held+bal2.Spent != credits(t, "3") {
		t.Fatalf("alice after a retried spend: %+v", bal2)
	}
}

// TestReplayToAnotherReplicaAndAfterRestart: broker replicas share nonces
// (MRM_NONCES), so a signed spend replayed to any replica, or after a
// replica restarted, is refused and holds nothing twice.
func TestReplayToAnotherReplicaAndAfterRestart(t *testing.T) {
	ctx := context.Background()
	m, clock, bc, _ := testMarket(t)
	grant(t, bc, "bob", "10")
	replica := func(name string) func() {
		nc, err := m.NC(name)
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		plans, err := js.KeyValue(ctx, wire.BucketPlans)
		if err != nil {
			t.Fatal(err)
		}
		brokerKey := signer(t, m, wire.RoleBroker, "broker")
		b, err := broker.New(broker.Config{NC: nc, Bank: bank.Client{NC: nc, Signer: brokerKey}, Signer: brokerKey,
			Identities: bank.Client{NC: nc}, Plans: plans, Replica: name, Now: func() time.Time { return *clock }})
		if err != nil {
			t.Fatal(err)
		}
		stop, err := broker.Serve(nc, b)
		if err != nil {
			t.Fatal(err)
		}
		return func() { stop(); b.Close() }
	}
	stop2 := replica("broker-2")
	bob := signer(t, m, wire.RoleUser, "bob")
	nc, err := m.NC("replayer")
	if err != nil {
		t.Fatal(err)
	}
	req := &wire.SpendRequest{User: "bob", Budget: credits(t, "1"), Duration: wire.Duration(time.Hour), VMs: []string{"b1"}, Strategy: wire.StrategyFair}
	req.V = wire.Version
	body, _ := json.Marshal(req)
	msg, err := bob.Sign(wire.BrokerSpend, body)
	if err != nil {
		t.Fatal(err)
	}
	if err := send(ctx, nc, msg); err != nil {
		t.Fatalf("bob's spend: %v", err)
	}
	// Both replicas answer in one queue group: twenty replays reach both.
	for i := range 20 {
		if err := send(ctx, nc, msg); !isReplay(err) {
			t.Fatalf("replay %d: %v", i, err)
		}
	}
	stop2()
	stop3 := replica("broker-3") // a replica started after the spend
	defer stop3()
	for i := range 10 {
		if err := send(ctx, nc, msg); !isReplay(err) {
			t.Fatalf("replay after a restart %d: %v", i, err)
		}
	}
	bal, err := bc.Balance(ctx, &wire.BalanceRequest{User: "bob"})
	if err != nil || bal.Held+bal.Spent != credits(t, "1") {
		t.Fatalf("bob after replays: %+v %v", bal, err)
	}
}

func isReplay(err error) bool {
	return errors.Is(err, wire.ErrForbidden) && strings.Contains(err.Error(), "replayed")
}

// TestDeletedPlanBucketIsRecreated: the whole MRM_PLANS bucket deleted is
// detected at the next round, reported, created again and the running
// plans written back; they keep running and stay listed.
func TestDeletedPlanBucketIsRecreated(t *testing.T) {
	ctx := context.Background()
	m, clock, bc, brc := testMarket(t)
	grant(t, bc, "alice", "10")
	if _, err := brc.Spend(ctx, &wire.SpendRequest{ID: "pa", User: "alice", Budget: credits(t, "2"), Duration: wire.Duration(time.Hour), VMs: []string{"a1"}, Strategy: wire.StrategyFair}); err != nil {
		t.Fatal(err)
	}
	nc, err := m.NC("attacker")
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if err := js.DeleteKeyValue(ctx, wire.BucketPlans); err != nil {
		t.Fatal(err)
	}
	_ = m.Tick(ctx, clock.Add(5*time.Second)) // the round that finds the bucket gone
	if m.Broker.Damage().BucketLost == 0 {
		t.Fatal("the deleted bucket was not noticed")
	}
	kv, err := js.KeyValue(ctx, wire.BucketPlans)
	if err != nil {
		t.Fatalf("the plan bucket was not recreated: %v", err)
	}
	if _, err := kv.Get(ctx, broker.PlanKey("alice", "pa")); err != nil {
		t.Fatalf("plan pa not restored: %v", err)
	}
	if err := m.Tick(ctx, clock.Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if p, err := brc.Adjust(ctx, &wire.AdjustRequest{Plan: "pa", User: "alice", ID: "m", More: credits(t, "1")}); err != nil || p.Budget != credits(t, "3") {
		t.Fatalf("the restored plan cannot change: %+v %v", p, err)
	}
}

// TestBidsNoFasterThanSigned: an agent takes a bid only as fast as its
// mandate lets one VM spend (the broker's key cannot make it charge a
// 10-minute budget in seconds); the user's signed spend --more of the plan
// raises that, one of another plan does not. The broker's own spend
// --more is carried with the plan's bids, so an adjusted plan's faster
// bids are taken.
func TestBidsNoFasterThanSigned(t *testing.T) {
	ctx := context.Background()
	m, clock, bc, brc := testMarket(t)
	grant(t, bc, "alice", "20")
	nc, err := m.NC("rogue-broker")
	if err != nil {
		t.Fatal(err)
	}
	brokerKey, alice := signer(t, m, wire.RoleBroker, "broker"), signer(t, m, wire.RoleUser, "alice")
	spend := &wire.SpendRequest{ID: "pa", User: "alice", Budget: credits(t, "3"), Duration: wire.Duration(10 * time.Minute), VMs: []string{"a1"},
		Strategy: wire.StrategyFair}
	if err := mandate.SignCaps(spend); err != nil {
		t.Fatal(err)
	}
	signed := signMandate(t, alice, wire.BrokerSpend, spend)
	more := func(plan string) wire.SignedRequest {
		return *signMandate(t, alice, wire.BrokerAdjust, &wire.AdjustRequest{Plan: plan, User: "alice", ID: "m-" + plan, More: credits(t, "6")})
	}
	bid := func(budget money.Micro, d time.Duration, adds ...wire.SignedRequest) error {
		b := wire.Bid{VM: "a1", Owner: "alice", Plan: "pa", Hold: mandate.HoldIDFor("alice", "pa"), Budget: budget, Duration: wire.Duration(d),
			Mandate: signed, More: adds}
		return natstest.Bid(ctx, nc, "host-1", &wire.BidRequest{Set: []wire.Bid{b}}, rpc.SignedBy(brokerKey))
	}
	if err := bid(credits(t, "3"), 5*time.Second); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("3 credits in 5 s on a 10-minute budget of 3: %v, want forbidden", err)
	}
	if err := bid(credits(t, "3"), 5*time.Minute, more("pb")); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("twice the rate with another plan's spend --more: %v, want forbidden", err)
	}
	if err := bid(credits(t, "3"), 5*time.Minute, more("pa")); err != nil {
		t.Fatalf("twice the rate with the plan's own spend --more of 6: %v", err)
	}
	if err := bid(credits(t, "3"), 10*time.Minute); err != nil {
		t.Fatalf("the signed rate: %v", err)
	}
	// Through the broker: a plan given more spends faster, its agents
	// taking the bids since they carry the spend --more.
	if _, err := brc.Spend(ctx, &wire.SpendRequest{ID: "pc", User: "alice", Budget: credits(t, "2"), Duration: wire.Duration(10 * time.Minute),
		VMs: []string{"a2"}, Strategy: wire.StrategyFair}); err != nil {
		t.Fatal(err)
	}
	*clock = clock.Add(5 * time.Minute)
	p, err := brc.Adjust(ctx, &wire.AdjustRequest{Plan: "pc", User: "alice", ID: "more-1", More: credits(t, "8")})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.VMs) != 1 || p.VMs[0].Rate < 2*money.Rate(credits(t, "2"), 10*time.Minute) {
		t.Fatalf("plan pc after 8 more: %+v, want its bid faster than before", p.VMs)
	}
}
