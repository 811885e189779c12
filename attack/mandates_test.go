package attack

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestAttackMandates is the attack table's rows on what a stolen service
// key can spend (see the package doc): host-1's agent key capturing more
// than its VMs were charged, for a VM that does not exist, from a hold of
// a user with no VM; the broker's key bidding a user's budget faster than
// she signed, holding her money longer and for every host, moving her
// spend --more to another plan. The mandate is the whole authority: what
// the thief gets is refused, or cut to what the honest service could have
// charged (docs/SECURITY.md, "What a stolen key can do").
func TestAttackMandates(t *testing.T) {
	for _, c := range []class{stolenAgentKeyClass(), stolenBrokerKeyClass()} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runClass(t, c)
		})
	}
}

// aliceTerms is alice's plan's schedule as the bank keeps it: her 20
// credits from the plan's start over its pace, and the share of it one VM
// may take, as her spend signed them.
func (e *env) aliceTerms(t *testing.T) ([]mandate.Term, int64) {
	t.Helper()
	m, err := mandate.Read(e.aliceMandate(t))
	if err != nil {
		t.Fatal(err)
	}
	return []mandate.Term{{Amount: e.alicePlan.Budget, Start: e.alicePlan.Start, Pace: m.Pace}}, m.VMShare
}

// aliceMandate is alice's signed spend, as the broker carries it.
func (e *env) aliceMandate(t *testing.T) wire.SignedRequest {
	t.Helper()
	m, ok := signing.SignedRequestOf(e.aliceSpend.Subject, e.aliceSpend.Header, e.aliceSpend.Data)
	if !ok {
		t.Fatal("alice's spend is not signed")
	}
	return m
}

// stolenCapture sends one leg as host-1's agent, with its key, and gives
// the bank's result.
func (e *env) stolenCapture(t *testing.T, leg wire.CaptureLeg) wire.LegResult {
	t.Helper()
	nc := e.dial(e.agents["host-1"], "host-1-stolen")
	defer nc.Close()
	var rep wire.CaptureReply
	batch := &wire.CaptureBatch{Versioned: wire.Versioned{V: wire.Version}, Host: "host-1", Tick: e.now().UnixMilli() + 1<<20, Legs: []wire.CaptureLeg{leg}}
	if err := call(e.ctx, nc, e.agents["host-1"], wire.BankCapture, batch, &rep); err != nil {
		t.Fatalf("the capture itself: %v", err)
	}
	if len(rep.Legs) != 1 {
		t.Fatalf("capture reply: %+v", rep)
	}
	return rep.Legs[0]
}

// legRefused fails t unless the leg was refused as forbidden, moving nothing.
func legRefused(t *testing.T, res wire.LegResult, why string) {
	t.Helper()
	if res.Error == nil || res.Error.Code != wire.CodeForbidden || res.Applied != 0 || !strings.Contains(res.Error.Message, why) {
		t.Fatalf("bank: got %+v, want it refused (%s) moving nothing", res, why)
	}
	t.Logf("refused: bank: %s", res.Error.Message)
}

// ---- 28: a stolen agent key ----

func stolenAgentKeyClass() class {
	return class{name: "28-stolen-agent-key", setup: withMallory, ticks: true, attacks: []attack{
		{"leg-far-above-the-vms-charge", func(t *testing.T, e *env) {
			// Host-1 honestly charged a1 for a tick; the thief asks for 10
			// credits of alice's 20 on it (what took 9.10 before the hold
			// kept her mandate's terms).
			e.advance(tick)
			terms, share := e.aliceTerms(t)
			for range 3 {
				before := e.balance("alice")
				res := e.stolenCapture(t, wire.CaptureLeg{ID: fmt.Sprintf("%s/host-1/a1/stolen-%d", e.alicePlan.Hold, e.now().UnixNano()),
					Hold: e.alicePlan.Hold, VM: "a1", Owner: "alice", Cumulative: credits(10)})
				bound := mandate.ShareOf(mandate.Allowed(terms, e.now()), share)
				honest := e.honestCharge(t, "a1")
				if res.Error != nil || res.Captured > bound || res.Cut == 0 {
					t.Fatalf("bank: the 10-credit leg got %+v, want it cut to a1's share of alice's schedule, %s", res, bound)
				}
				if moved := e.balance("alice").Spent - before.Spent; moved != res.Applied || res.Captured-honest > bound-honest {
					t.Fatalf("bank: alice paid %s more (a1's total %s, honest %s, bound %s)", moved, res.Captured, honest, bound)
				}
				t.Logf("cut: the 10-credit leg at +%s took %s (a1's total %s: its honest charge %s, the bound %s = its share of the schedule %s ahead); %s withheld",
					e.now().Sub(t0), res.Applied, res.Captured, honest, bound, mandate.Slack, res.Cut)
				e.advance(tick) // the market goes on; the honest legs move nothing until they pass the thief's total
			}
			if spent, allowed := e.balance("alice").Spent, mandate.Allowed(terms, e.now()); spent > allowed {
				t.Fatalf("bank: alice paid %s, her schedule allows %s by now", spent, allowed)
			}
		}},
		{"leg-for-a-vm-that-does-not-exist", notPlaced("ghost")},
		{"leg-for-bobs-vm-on-alices-hold", notPlaced("b1")},
		{"leg-on-the-hold-of-a-user-with-no-vm", func(t *testing.T, e *env) {
			admin := bank.Client{NC: e.adminNC.Conn, Signer: e.admin}
			if _, err := admin.Grant(e.ctx, &wire.GrantRequest{ID: "g-mallory", User: "mallory", Amount: credits(5)}); err != nil {
				t.Fatal(err)
			}
			mallory := malloryKey(e)
			mnc := e.dial(mallory, "mallory")
			own := bank.Client{NC: mnc.Conn, Signer: mallory}
			if _, err := own.Hold(e.ctx, &wire.HoldRequest{ID: "h-mallory", User: "mallory", Amount: credits(1), Expires: e.now().Add(time.Hour)}); err != nil {
				t.Fatalf("mallory's hold of her own money: %v", err)
			}
			before := e.snapshot()
			res := e.stolenCapture(t, wire.CaptureLeg{ID: "h-mallory/host-1/a1/1", Hold: "h-mallory", VM: "a1", Owner: "mallory", Cumulative: money.Micro(500_000)})
			legRefused(t, res, "no mandate's terms")
			e.unchanged(t, before)
		}},
	}}
}

// notPlaced is host-1's key capturing a credit from alice's hold for vm,
// which her plan does not place on host-1: refused, nothing moved.
func notPlaced(vm string) func(t *testing.T, e *env) {
	return func(t *testing.T, e *env) {
		before := e.snapshot()
		res := e.stolenCapture(t, wire.CaptureLeg{ID: e.alicePlan.Hold + "/host-1/" + vm + "/1", Hold: e.alicePlan.Hold, VM: vm, Owner: "alice",
			Cumulative: credits(1)})
		legRefused(t, res, "does not place the VM")
		e.unchanged(t, before)
	}
}

// honestCharge is what host-1's agent has charged on vm for its bids by
// now (its state).
func (e *env) honestCharge(t *testing.T, vm string) money.Micro {
	t.Helper()
	for _, a := range e.m.Agents {
		for _, v := range a.State().VMs {
			if v.VM == vm {
				var c money.Micro
				for _, b := range v.Bids {
					c += b.Charged
				}
				return c
			}
		}
	}
	t.Fatalf("no VM %s", vm)
	return 0
}

// ---- 29: a stolen broker key ----

func stolenBrokerKeyClass() class {
	asBroker := func(t *testing.T, e *env) (*conn, bank.Client) {
		nc := e.dial(e.broker, "broker-stolen")
		t.Cleanup(nc.Close)
		return nc, bank.Client{NC: nc.Conn, Signer: e.broker}
	}
	return class{name: "29-stolen-broker-key", ticks: true, attacks: []attack{
		{"bid-spends-a-10-minute-budget-in-5s", func(t *testing.T, e *env) {
			nc, _ := asBroker(t, e)
			before := e.snapshot()
			defer e.unchanged(t, before)
			m := e.aliceMandate(t)
			b := wire.Bid{VM: "a1", Owner: "alice", Plan: e.alicePlan.ID, Hold: e.alicePlan.Hold, Budget: credits(3), Duration: wire.Duration(tick), Mandate: &m}
			err := callBid(e.ctx, nc, e.broker, "host-1", &wire.BidRequest{Set: []wire.Bid{b}})
			if !errors.Is(err, wire.ErrForbidden) || !strings.Contains(err.Error(), "µ/s") {
				t.Fatalf("agent: a bid of 3 credits in 5 s on alice's 10-minute plan: %v, want forbidden", err)
			}
			t.Logf("refused: %v", err)
		}},
		{"hold-expiring-in-2036-for-any-host", func(t *testing.T, e *env) {
			_, bc := asBroker(t, e)
			before := e.snapshot()
			defer e.unchanged(t, before)
			spend := &wire.SpendRequest{ID: "p-alice-3", User: "alice", Budget: credits(3), Duration: wire.Duration(planLength), VMs: []string{"a1"},
				Strategy: wire.StrategyFair}
			if err := mandate.SignCaps(spend); err != nil {
				t.Fatal(err)
			}
			m, err := mandate.Sign(e.alice, wire.BrokerSpend, spend)
			if err != nil {
				t.Fatal(err)
			}
			in2036 := time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC)
			for _, c := range []struct {
				what string
				req  wire.HoldRequest
			}{
				{"no hosts, 2036", wire.HoldRequest{Expires: in2036}},
				{"her VM's host, 2036", wire.HoldRequest{Expires: in2036, Hosts: []string{"host-1"}, Placement: []wire.Placed{{VM: "a1", Host: "host-1"}}}},
				{"no hosts, in her period", wire.HoldRequest{Expires: e.now().Add(planLength)}},
				{"bob's VM's host", wire.HoldRequest{Expires: e.now().Add(planLength), Hosts: []string{"host-1"}, Placement: []wire.Placed{{VM: "b1", Host: "host-1"}}}},
			} {
				req := c.req
				req.ID, req.User, req.Amount, req.Mandate = mandate.HoldIDFor("alice", "p-alice-3"), "alice", credits(3), m
				_, err := bc.Hold(e.ctx, &req)
				if !errors.Is(err, wire.ErrForbidden) {
					t.Fatalf("bank: the broker's hold of alice's 3 credits, %s: %v, want forbidden", c.what, err)
				}
				t.Logf("refused (%s): %v", c.what, err)
			}
		}},
		{"more-for-plan-a-into-plan-bs-hold", func(t *testing.T, e *env) {
			_, bc := asBroker(t, e)
			_, b := e.spend(e.alice, e.aliceNC, &wire.SpendRequest{ID: "p-alice-b", User: "alice", Budget: credits(4), Duration: wire.Duration(planLength),
				VMs: []string{"a2"}, Strategy: wire.StrategyFair})
			before := e.snapshot()
			defer e.unchanged(t, before)
			more, err := mandate.Sign(e.alice, wire.BrokerAdjust, &wire.AdjustRequest{Plan: e.alicePlan.ID, User: "alice", ID: "more-1", More: credits(2)})
			if err != nil {
				t.Fatal(err)
			}
			for _, hold := range []string{b.Plan.Hold, e.bobPlan.Hold} {
				_, err := bc.Extend(e.ctx, &wire.ExtendRequest{ID: wire.AdjustPlanID(e.alicePlan.ID, "more-1"), Hold: hold, User: "alice",
					Amount: credits(2), Mandate: more})
				if !errors.Is(err, wire.ErrForbidden) {
					t.Fatalf("bank: alice's spend --more of %s into hold %s: %v, want forbidden", e.alicePlan.ID, hold, err)
				}
				t.Logf("refused: %v", err)
			}
		}},
	}}
}
