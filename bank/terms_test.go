package bank_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// termsBank is a bank that knows identities (an admin key), on a clock the
// test moves, with alice registered and granted 200 credits.
func termsBank(t *testing.T, target string) (*bank.Bank, *time.Time, *signing.Signer) {
	t.Helper()
	clock := t0
	admin, alice := newSigner(t), newSigner(t)
	b, err := bank.Open(target, bank.Options{Now: func() time.Time { return clock }, AdminKey: admin.Public()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if _, err := b.AddPrincipal(context.Background(), &wire.PrincipalRequest{Key: alice.Public(), Name: "alice", Role: wire.RoleUser,
		Cert: signing.SealPrincipal(admin, alice.Public(), "alice", wire.RoleUser)}); err != nil {
		t.Fatal(err)
	}
	grant(t, b, "g", "alice", cr(200))
	return b, &clock, alice
}

func cr(n float64) money.Micro { return money.Micro(n * 1e6) }

// placed is alice's fair plan id of budget over 10 minutes on a1 (host-1)
// and a2 (host-2), as her CLI signs it, and its hold request.
func placed(t *testing.T, alice *signing.Signer, id string, budget money.Micro, share int64, expires time.Time) *wire.HoldRequest {
	t.Helper()
	spend := &wire.SpendRequest{ID: id, User: "alice", Budget: budget, Duration: wire.Duration(10 * time.Minute), VMs: []string{"a1", "a2"},
		Strategy: wire.StrategyFair}
	if err := mandate.SignCaps(spend); err != nil {
		t.Fatal(err)
	}
	if share != 0 {
		spend.VMShare = share
	}
	m, err := mandate.Sign(alice, wire.BrokerSpend, spend)
	if err != nil {
		t.Fatal(err)
	}
	return &wire.HoldRequest{ID: mandate.HoldIDFor("alice", id), User: "alice", Amount: budget, Expires: expires, Mandate: m,
		Hosts: []string{"host-1", "host-2"}, Placement: []wire.Placed{{VM: "a1", Host: "host-1"}, {VM: "a2", Host: "host-2"}}}
}

// legRound numbers the legs of leg, each its own round as an agent's are.
var legRound atomic.Int64

// leg captures one leg from host's agent and gives its result.
func leg(t *testing.T, b *bank.Bank, host, hold, vm string, cumulative money.Micro) wire.LegResult {
	t.Helper()
	round := legRound.Add(1)
	rep, err := b.Capture(context.Background(), &wire.CaptureBatch{Host: host, Tick: round, Legs: []wire.CaptureLeg{
		{ID: fmt.Sprintf("%s/%s/%s/%d", hold, host, vm, round), Hold: hold, VM: vm, Cumulative: cumulative, Owner: "alice"}}})
	if err != nil {
		t.Fatal(err)
	}
	return rep.Legs[0]
}

// refusedAs reports whether r was refused with err's reason, moving nothing.
func refusedAs(r wire.LegResult, err error) bool {
	_, why, _ := strings.Cut(err.Error(), ": ") // past its code
	return r.Error != nil && r.Error.Code == wire.ToError(err).Code && strings.Contains(r.Error.Error(), why) && r.Applied == 0
}

// TestHoldsKeepTheirMandatesTerms: a hold carrying its user's mandate must
// place only VMs the mandate names, on the hold's hosts, and expire within
// its period; its captures follow its schedule — the whole plan no faster
// than its pace, one VM no more than its share of that, both Slack ahead —
// cut, not refused, so the next leg captures the rest once allowed; only
// the VMs placed on the capturing host are captured for. A user's own hold
// has no terms, and a bank that knows identities lets no agent capture it.
func TestHoldsKeepTheirMandatesTerms(t *testing.T) { eachStore(t, testHoldsKeepTheirMandatesTerms) }

func testHoldsKeepTheirMandatesTerms(t *testing.T, target string) {
	ctx := context.Background()
	b, clock, alice := termsBank(t, target)
	good := placed(t, alice, "p1", cr(60), 0, t0.Add(10*time.Minute))
	before := mustLedger(t, b)
	for what, mutate := range map[string]func(r *wire.HoldRequest){
		"no placement":           func(r *wire.HoldRequest) { r.Hosts, r.Placement = nil, nil },
		"a VM it does not name":  func(r *wire.HoldRequest) { r.Placement = append(r.Placement, wire.Placed{VM: "b1", Host: "host-1"}) },
		"past its period":        func(r *wire.HoldRequest) { r.Expires = t0.Add(time.Hour) },
		"more than it signs for": func(r *wire.HoldRequest) { r.Amount = cr(61) },
	} {
		r := *good
		mutate(&r)
		if _, err := b.Hold(ctx, &r); !errors.Is(err, wire.ErrForbidden) {
			t.Errorf("a hold with %s: %v, want forbidden", what, err)
		}
	}
	if after := mustLedger(t, b); !sameJSON(t, before, after) {
		t.Fatalf("refused holds changed the ledger")
	}
	h := good.ID
	if _, err := b.Hold(ctx, good); err != nil {
		t.Fatal(err)
	}
	if rep, err := b.Hold(ctx, good); err != nil || !rep.Replayed {
		t.Fatalf("the hold retried: %+v %v", rep, err)
	}
	// At +60 s the schedule allows 60·90/600 = 9 credits, 4.5 a VM.
	*clock = t0.Add(time.Minute)
	if r := leg(t, b, "host-1", h, "a1", cr(6)); r.Error != nil || r.Applied != cr(4.5) || r.Cut != cr(1.5) || r.Exhausted {
		t.Fatalf("a1 asking 6: %+v, want 4.5 and 1.5 cut", r)
	}
	if r := leg(t, b, "host-1", h, "a2", cr(1)); !refusedAs(r, bank.ErrNotPlaced) {
		t.Fatalf("a2 from host-1 (it runs on host-2): %+v", r)
	}
	if r := leg(t, b, "host-2", h, "a2", cr(3)); r.Error != nil || r.Applied != cr(3) || r.Cut != 0 {
		t.Fatalf("a2 asking 3: %+v", r)
	}
	// Later, what was cut is captured as the schedule allows it.
	*clock = t0.Add(2 * time.Minute) // 15 credits, 7.5 a VM
	if r := leg(t, b, "host-1", h, "a1", cr(6)); r.Error != nil || r.Applied != cr(1.5) || r.Captured != cr(6) || r.Cut != 0 {
		t.Fatalf("a1's cut part a minute later: %+v", r)
	}
	*clock = t0.Add(9*time.Minute + 30*time.Second) // all of it, Slack ahead
	if r := leg(t, b, "host-1", h, "a1", cr(40)); r.Applied != cr(24) || r.Cut != cr(10) {
		t.Fatalf("a1 asking 40 once the pace is over: %+v, want its share, 30 in all", r)
	}
	// A plan signing a VM all of its rate: the plan's pace binds.
	wide := placed(t, alice, "p2", cr(60), wire.FullShare, t0.Add(30*time.Minute))
	if _, err := b.Hold(ctx, wide); err != nil {
		t.Fatal(err)
	}
	*clock = t0.Add(10*time.Minute + 30*time.Second) // 9 credits allowed
	if r := leg(t, b, "host-1", wide.ID, "a1", cr(8)); r.Applied != cr(8) {
		t.Fatalf("a1 asking 8 of 9 allowed: %+v", r)
	}
	if r := leg(t, b, "host-2", wide.ID, "a2", cr(3)); r.Applied != cr(1) || r.Cut != cr(2) {
		t.Fatalf("a2 asking 3 with 1 left of 9 allowed: %+v", r)
	}
	// Alice's own hold has no terms: no agent captures it.
	own := hold(t, b, "mine", "alice", cr(5), t0.Add(time.Hour))
	if r := leg(t, b, "host-1", own.Hold.ID, "a1", cr(1)); !refusedAs(r, bank.ErrNoTerms) {
		t.Fatalf("a capture from alice's own hold: %+v", r)
	}
	mustLedger(t, b)
}

// TestExtensionsOnlyIntoTheirPlan: a spend --more adds to the hold of the
// plan it names only, and its money is paced over what is left of the
// plan's pace from when it was added.
func TestExtensionsOnlyIntoTheirPlan(t *testing.T) { eachStore(t, testExtensionsOnlyIntoTheirPlan) }

func testExtensionsOnlyIntoTheirPlan(t *testing.T, target string) {
	ctx := context.Background()
	b, clock, alice := termsBank(t, target)
	a, other := placed(t, alice, "pa", cr(60), wire.FullShare, t0.Add(10*time.Minute)), placed(t, alice, "pb", cr(10), 0, t0.Add(10*time.Minute))
	for _, r := range []*wire.HoldRequest{a, other} {
		if _, err := b.Hold(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	more, err := mandate.Sign(alice, wire.BrokerAdjust, &wire.AdjustRequest{Plan: "pa", User: "alice", ID: "m1", More: cr(30)})
	if err != nil {
		t.Fatal(err)
	}
	*clock = t0.Add(5 * time.Minute)
	ext := &wire.ExtendRequest{ID: wire.AdjustPlanID("pa", "m1"), Hold: other.ID, User: "alice", Amount: cr(30), Mandate: more}
	if _, err := b.Extend(ctx, ext); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("plan pa's spend --more into plan pb's hold: %v, want forbidden", err)
	}
	ext.Hold = a.ID
	if _, err := b.Extend(ctx, ext); err != nil {
		t.Fatal(err)
	}
	// At +6 min: 60·390/600 = 39, and 30·90/300 = 9 of the extension.
	*clock = t0.Add(6 * time.Minute)
	if r := leg(t, b, "host-1", a.ID, "a1", cr(60)); r.Applied != cr(48) || r.Cut != cr(12) {
		t.Fatalf("a1 asking 60 a minute after 30 more: %+v, want 48", r)
	}
	mustLedger(t, b)
}

// TestHoldsOfTheOldSchemaKeepTheOldRule: a hold placed before holds kept
// their mandates' terms is captured by the rule it was placed under (its
// remainder, its hosts, its expiry) until it closes, even where the bank
// knows identities.
func TestHoldsOfTheOldSchemaKeepTheOldRule(t *testing.T) {
	eachStore(t, testHoldsOfTheOldSchemaKeepTheOldRule)
}

func testHoldsOfTheOldSchemaKeepTheOldRule(t *testing.T, target string) {
	old, err := bank.OpenAtMigration(target, "0005")
	if err != nil {
		t.Fatal(err)
	}
	old.Close()
	at, expires := t0.UnixNano(), t0.Add(time.Hour).UnixNano()
	execOn(t, target,
		fmt.Sprintf(`INSERT INTO accounts (id, kind, balance, created) VALUES ('user:alice', 'user', 50, %d)`, at),
		`UPDATE accounts SET balance = -100 WHERE id = 'mint'`,
		fmt.Sprintf(`INSERT INTO transfers (scope, id, kind, debit, credit, amount, fingerprint, memo, at) VALUES
			('mint', 'grant:g-old', 'grant', 'mint', 'user:alice', 100, 'g', '', %[1]d),
			('user:alice', 'hold:h1', 'hold', 'user:alice', 'escrow', 50, 'h', 'plan p1', %[1]d)`, at),
		fmt.Sprintf(`INSERT INTO holds (user_id, id, amount, captured, released, expires, status, beneficiaries, fingerprint, created) VALUES
			('alice', 'h1', 50, 0, 0, %d, 'open', 'host-1', 'h', %d)`, expires, at),
	)
	b, _, _ := termsBank(t, target)
	if r := leg(t, b, "host-1", "h1", "vm1", 20); r.Error != nil || r.Applied != 20 {
		t.Fatalf("a capture from a hold of the old schema: %+v", r)
	}
	if r := leg(t, b, "host-2", "h1", "vm1", 30); !refusedAs(r, bank.ErrNotBeneficiary) {
		t.Fatalf("its hosts still bind: %+v", r)
	}
	mustLedger(t, b)
}
