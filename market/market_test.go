package market_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

func credits(t testing.TB, s string) money.Micro {
	t.Helper()
	m, err := money.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// testMarket starts two hosts with one VM of alice and one of bob each, on
// a virtual clock the test advances.
// send sends msg as it is (signed, replayed, malformed) and decodes the
// reply.
func send(ctx context.Context, nc *nats.Conn, msg *nats.Msg) error {
	_, err := rpc.Request[struct{}](ctx, nc, msg.Subject, nil, rpc.Verbatim(msg))
	return err
}

func testMarket(t *testing.T) (*market.Market, *time.Time, bank.Client, broker.Client) {
	t.Helper()
	return startAt(t, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), market.Config{TickPeriod: 5 * time.Second,
		Hosts: []market.HostSpec{
			{ID: "host-1", CPUs: 1, VMs: []agent.VM{{ID: "a1", Owner: "alice"}, {ID: "b1", Owner: "bob"}}},
			{ID: "host-2", CPUs: 1, VMs: []agent.VM{{ID: "a2", Owner: "alice"}, {ID: "b2", Owner: "bob"}}},
		},
	})
}

// startAt starts cfg's market in a temporary directory on a free port, on
// a virtual clock starting at start that the test advances, with a bank
// and a broker client.
func startAt(t testing.TB, start time.Time, cfg market.Config) (*market.Market, *time.Time, bank.Client, broker.Client) {
	t.Helper()
	clock := start
	cfg.Dir, cfg.NATSPort, cfg.Now = t.TempDir(), -1, func() time.Time { return clock }
	m, err := market.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	nc, err := m.NC("test-client")
	if err != nil {
		t.Fatal(err)
	}
	return m, &clock, bank.Client{NC: nc, Keys: m.Keys()}, broker.Client{NC: nc, Keys: m.Keys()}
}

func checkLedger(t *testing.T, bc bank.Client) wire.LedgerReply {
	t.Helper()
	l, err := bc.Ledger(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Violations) > 0 {
		t.Fatalf("ledger invariant violated: %v", l.Violations)
	}
	return l
}

// TestEndToEnd: grant → spend → agents apply shares 2:1 → captures →
// balances and the invariant hold, over the embedded NATS server, with
// irregular ticks.
func TestEndToEnd(t *testing.T) {
	ctx := context.Background()
	m, clock, bc, brc := testMarket(t)
	start := *clock

	for _, u := range []string{"alice", "bob"} {
		if _, err := bc.Grant(ctx, &wire.GrantRequest{ID: "g-" + u, User: u, Amount: credits(t, "100")}); err != nil {
			t.Fatal(err)
		}
	}
	spend := func(user, budget string, vms ...string) wire.Plan {
		rep, err := brc.Spend(ctx, &wire.SpendRequest{ID: "p-" + user, User: user, Budget: credits(t, budget),
			Duration: wire.Duration(10 * time.Minute), VMs: vms, Strategy: wire.StrategyFair})
		if err != nil {
			t.Fatalf("spend %s: %v", user, err)
		}
		return rep.Plan
	}
	pa := spend("alice", "20", "a1", "a2")
	spend("bob", "10", "b1", "b2")
	if pa.Status != wire.PlanRunning || len(pa.VMs) != 2 || pa.VMs[0].Budget+pa.VMs[1].Budget != credits(t, "20") {
		t.Fatalf("alice's plan: %+v", pa)
	}
	checkLedger(t, bc)

	// Shares are enforced 2:1 on both hosts as soon as the bids land.
	for _, a := range m.Agents {
		st := a.State()
		share := map[string]float64{}
		for _, v := range st.VMs {
			share[v.VM] = v.Share
		}
		h := st.Host[len(st.Host)-1:]
		if got := share["a"+h] / share["b"+h]; math.Abs(got-2) > 1e-9 {
			t.Fatalf("%s: share ratio alice/bob = %v, want 2 (%v)", st.Host, got, share)
		}
		applied, err := m.Sims[st.Host].Applied(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(applied["a"+h]-2.0/3) > 1e-9 || math.Abs(applied["b"+h]-1.0/3) > 1e-9 {
			t.Fatalf("%s: enforced shares %v, want 2/3 and 1/3", st.Host, applied)
		}
	}

	// Irregular ticks through the plan and past its end; the invariant holds
	// at every step and spending never runs ahead of the bids.
	rng := rand.New(rand.NewPCG(42, 7))
	usage0 := map[string]time.Duration{}
	for _, sim := range m.Sims {
		u, _ := sim.Usage(ctx)
		for vm, d := range u {
			usage0[vm] = d
		}
	}
	end := start.Add(10*time.Minute + 30*time.Second)
	for clock.Before(end) {
		*clock = clock.Add(time.Duration(1+rng.IntN(7)) * time.Second)
		if err := m.Tick(ctx, *clock); err != nil {
			t.Fatal(err)
		}
		l := checkLedger(t, bc)
		bal, err := bc.Balance(ctx, &wire.BalanceRequest{User: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		if bal.Spent > credits(t, "20") {
			t.Fatalf("alice spent %s of a 20 budget", bal.Spent)
		}
		if l.OpenHolds+l.Balances != l.Granted {
			t.Fatalf("Σ balances %s + Σ holds %s ≠ Σ granted %s", l.Balances, l.OpenHolds, l.Granted)
		}
		if clock.Sub(start) > 5*time.Minute && clock.Sub(start) < 5*time.Minute+8*time.Second {
			// Halfway: the CPU the simulated hosts delivered follows the bids.
			for _, h := range []string{"1", "2"} {
				u, _ := m.Sims["host-"+h].Usage(ctx)
				ra := (u["a"+h] - usage0["a"+h]).Seconds()
				rb := (u["b"+h] - usage0["b"+h]).Seconds()
				if math.Abs(ra/rb-2) > 1e-6 {
					t.Fatalf("host-%s delivered CPU alice:bob = %v, want 2", h, ra/rb)
				}
			}
		}
	}

	// The end: every credit accounted for, to the micro-credit.
	want := map[string][2]string{"alice": {"80", "20"}, "bob": {"90", "10"}}
	for u, w := range want {
		bal, err := bc.Balance(ctx, &wire.BalanceRequest{User: u})
		if err != nil {
			t.Fatal(err)
		}
		if bal.Balance != credits(t, w[0]) || bal.Spent != credits(t, w[1]) || bal.Held != 0 {
			t.Fatalf("%s: balance %s spent %s held %s; want %s, %s, 0", u, bal.Balance, bal.Spent, bal.Held, w[0], w[1])
		}
	}
	l := checkLedger(t, bc)
	prov := map[string]money.Micro{}
	for _, a := range l.Accounts {
		if a.Kind == wire.AccountProvider {
			prov[a.ID] = a.Balance
		}
	}
	if len(prov) != 2 {
		t.Fatalf("provider accounts: %v", prov)
	}
	for id, b := range prov {
		if b != credits(t, "15") {
			t.Fatalf("%s earned %s, want 15 (alice 10 + bob 5)", id, b)
		}
	}
	plans, err := brc.Plans(ctx, &wire.PlansRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plans.Plans {
		if p.Status != wire.PlanDone {
			t.Fatalf("plan %s is %s after its end", p.ID, p.Status)
		}
	}
	// Hosts are idle again: no funded bids, price 0.
	prices, err := brc.Price(ctx, &wire.PriceRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range prices.Hosts {
		if h.Price != 0 || h.Funded != 0 {
			t.Fatalf("after the plans: %+v", h)
		}
	}
}

// TestBadInputChangesNothing sends bad requests to every subject of the
// running market and checks each is refused with the right code and that
// neither the ledger nor any host changed.
func TestBadInputChangesNothing(t *testing.T) {
	ctx := context.Background()
	m, _, bc, brc := testMarket(t)
	if _, err := bc.Grant(ctx, &wire.GrantRequest{ID: "g-alice", User: "alice", Amount: credits(t, "10")}); err != nil {
		t.Fatal(err)
	}
	nc, err := m.NC("bad-client")
	if err != nil {
		t.Fatal(err)
	}
	snapshot := func() (wire.LedgerReply, []wire.HostState) {
		l := checkLedger(t, bc)
		var hs []wire.HostState
		for _, a := range m.Agents {
			st := a.State()
			st.Time, st.Tick = time.Time{}, 0
			hs = append(hs, st)
		}
		return l, hs
	}
	l0, h0 := snapshot()
	brokerKey, err := m.Keys().Signer(wire.RoleBroker, "broker")
	if err != nil {
		t.Fatal(err)
	}
	aliceKey, err := m.Keys().Signer(wire.RoleUser, "alice")
	if err != nil {
		t.Fatal(err)
	}
	bid := func(signer *signing.Signer, b wire.Bid) error {
		return natstest.Bid(ctx, nc, "host-1", &wire.BidRequest{Set: []wire.Bid{b}}, rpc.SignedBy(signer))
	}

	cases := []struct {
		name string
		do   func() error
		want error
	}{
		{"spend zero budget", func() error { return spendErr(brc, "alice", 0, time.Minute, "a1") }, wire.ErrBadRequest},
		{"spend negative budget", func() error { return spendErr(brc, "alice", -5, time.Minute, "a1") }, wire.ErrBadRequest},
		{"spend absurd budget", func() error { return spendErr(brc, "alice", money.Max+1, time.Minute, "a1") }, wire.ErrBadRequest},
		{"spend duration 0", func() error { return spendErr(brc, "alice", 5, 0, "a1") }, wire.ErrBadRequest},
		{"spend unknown VM", func() error { return spendErr(brc, "alice", 5, time.Minute, "zz9") }, wire.ErrNotFound},
		{"spend on bob's VM", func() error { return spendErr(brc, "alice", 5, time.Minute, "b1") }, wire.ErrForbidden},
		{"spend unknown user", func() error { return spendErr(brc, "mallory", 5, time.Minute, "a1") }, wire.ErrForbidden},
		{"spend beyond balance", func() error { return spendErr(brc, "alice", credits(t, "11"), time.Minute, "a1") }, wire.ErrInsufficient},
		{"grant zero", func() error {
			_, err := bc.Grant(ctx, &wire.GrantRequest{ID: "g0", User: "alice", Amount: 0})
			return err
		}, wire.ErrBadRequest},
		{"grant overflow", func() error {
			_, err := bc.Grant(ctx, &wire.GrantRequest{ID: "g1", User: "alice", Amount: math.MaxInt64})
			return err
		}, wire.ErrBadRequest},
		{"balance unknown user", func() error {
			// Reads are signed: an admin asks (nobody has no key to ask with).
			admin, err := m.Keys().Signer(wire.RoleAdmin, "admin")
			if err != nil {
				return err
			}
			_, err = bank.Client{NC: bc.NC, Signer: admin}.Balance(ctx, &wire.BalanceRequest{User: "nobody"})
			return err
		}, wire.ErrNotFound},
		{"release unknown hold", func() error {
			_, err := bc.Release(ctx, &wire.ReleaseRequest{Hold: "hold-none", User: "alice"})
			return err
		}, wire.ErrNotFound},
		{"bid on unknown VM", func() error {
			return bid(brokerKey, wire.Bid{VM: "zz", Owner: "alice", Plan: "p", Hold: "h", Budget: 5, Duration: wire.Duration(time.Minute)})
		}, wire.ErrNotFound},
		{"bid as another owner", func() error {
			return bid(brokerKey, wire.Bid{VM: "b1", Owner: "alice", Plan: "p", Hold: "h", Budget: 5, Duration: wire.Duration(time.Minute)})
		}, wire.ErrForbidden},
		{"unsigned bid", func() error {
			return bid(nil, wire.Bid{VM: "a1", Owner: "alice", Plan: "p", Hold: "h", Budget: 5, Duration: wire.Duration(time.Minute)})
		}, wire.ErrForbidden},
		{"bid signed by a user, on another's hold", func() error {
			return bid(aliceKey, wire.Bid{VM: "a1", Owner: "alice", Plan: "p", Hold: "hold-of-bob", Budget: 5, Duration: wire.Duration(time.Minute)})
		}, wire.ErrForbidden},
		{"price unknown host", func() error {
			_, err := brc.Price(ctx, &wire.PriceRequest{Host: "host-9"})
			return err
		}, wire.ErrNotFound},
	}
	for _, c := range cases {
		if err := c.do(); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %s", c.name, err, c.want.(*wire.Error).Code)
		}
	}
	// Garbage on every request subject.
	subjects := []string{wire.BankGrant, wire.BankHold, wire.BankCapture, wire.BankRelease, wire.BankBalance, wire.BankLedger,
		wire.BrokerSpend, wire.BrokerCancel, wire.BrokerPlans, wire.BrokerPrice, wire.BrokerVMs, wire.BrokerStage,
		wire.AgentBidSubject("host-1"), wire.AgentStateSubject("host-2")}
	for _, s := range subjects {
		for _, body := range []string{`{garbage`, `{"v":1,"unknown":1}`, `{"v":9}`, `[]`, ``} {
			if err := send(ctx, nc, &nats.Msg{Subject: s, Data: []byte(body)}); !errors.Is(err, wire.ErrBadRequest) {
				t.Errorf("%s ← %q: got %v, want bad_request", s, body, err)
			}
		}
	}
	l1, h1 := snapshot()
	if !equalJSON(t, l0, l1) || !equalJSON(t, h0, h1) {
		t.Fatalf("bad input changed the market:\nledger %+v\n    → %+v\nhosts %+v\n   → %+v", l0, l1, h0, h1)
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}

func spendErr(brc broker.Client, user string, budget money.Micro, d time.Duration, vms ...string) error {
	_, err := brc.Spend(context.Background(), &wire.SpendRequest{User: user, Budget: budget, Duration: wire.Duration(d), VMs: vms, Strategy: wire.StrategyFair})
	return err
}

// TestSpendingNeedsTheSpendersSignature: the broker acts on a user's money
// only for a spend that user signed, once.
func TestSpendingNeedsTheSpendersSignature(t *testing.T) {
	ctx := context.Background()
	m, _, bc, _ := testMarket(t)
	if _, err := bc.Grant(ctx, &wire.GrantRequest{ID: "g", User: "bob", Amount: credits(t, "10")}); err != nil {
		t.Fatal(err)
	}
	nc, err := m.NC("spoofer")
	if err != nil {
		t.Fatal(err)
	}
	alice, err := m.Keys().Signer(wire.RoleUser, "alice")
	if err != nil {
		t.Fatal(err)
	}
	bobsSpend := &wire.SpendRequest{User: "bob", Budget: credits(t, "5"), Duration: wire.Duration(time.Minute), VMs: []string{"b1"}, Strategy: wire.StrategyFair}
	if _, err := (broker.Client{NC: nc}).Spend(ctx, bobsSpend); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("unsigned spend: %v", err)
	}
	if _, err := (broker.Client{NC: nc, Signer: alice}).Spend(ctx, bobsSpend); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("alice spending bob's money: %v", err)
	}
	bob, err := m.Keys().Signer(wire.RoleUser, "bob")
	if err != nil {
		t.Fatal(err)
	}
	bobsSpend.V = wire.Version
	body, _ := json.Marshal(bobsSpend)
	msg, err := bob.Sign(wire.BrokerSpend, body)
	if err != nil {
		t.Fatal(err)
	}
	if err := send(ctx, nc, msg); err != nil {
		t.Fatalf("bob's own spend: %v", err)
	}
	if err := send(ctx, nc, msg); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("replayed spend: %v", err)
	}
	bal, err := bc.Balance(ctx, &wire.BalanceRequest{User: "bob"})
	if err != nil || bal.Held != credits(t, "5") {
		t.Fatalf("bob after one spend and a replay: %+v %v", bal, err)
	}
}
