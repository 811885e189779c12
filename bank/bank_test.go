package bank_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

var t0 = time.Date(2026, 2, 1, 10, 0, 0, 0, time.UTC)

func openBank(t testing.TB, target string) (*bank.Bank, *time.Time) {
	t.Helper()
	clock := t0
	b, err := bank.Open(target, bank.Options{Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, &clock
}

func mustLedger(t *testing.T, b *bank.Bank) wire.LedgerReply {
	t.Helper()
	l, err := b.Ledger(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Violations) > 0 {
		t.Fatalf("invariant violated: %v", l.Violations)
	}
	return l
}

func grant(t *testing.T, b *bank.Bank, id, user string, amount money.Micro) wire.GrantReply {
	t.Helper()
	r, err := b.Grant(context.Background(), &wire.GrantRequest{ID: id, User: user, Amount: amount})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func hold(t *testing.T, b *bank.Bank, id, user string, amount money.Micro, expires time.Time) wire.HoldReply {
	t.Helper()
	r, err := b.Hold(context.Background(), &wire.HoldRequest{ID: id, User: user, Amount: amount, Expires: expires})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestGrantIsIdempotent(t *testing.T) { eachStore(t, testGrantIsIdempotent) }

func testGrantIsIdempotent(t *testing.T, target string) {
	b, _ := openBank(t, target)
	ctx := context.Background()
	if r := grant(t, b, "g1", "alice", 100); r.Balance != 100 || r.Replayed {
		t.Fatalf("first grant: %+v", r)
	}
	if r := grant(t, b, "g1", "alice", 100); r.Balance != 100 || !r.Replayed {
		t.Fatalf("replayed grant: %+v", r)
	}
	if _, err := b.Grant(ctx, &wire.GrantRequest{ID: "g1", User: "alice", Amount: 200}); !errors.Is(err, wire.ErrConflict) {
		t.Fatalf("grant id reused with another amount: %v", err)
	}
	if l := mustLedger(t, b); l.Granted != 100 {
		t.Fatalf("granted %s", l.Granted)
	}
}

func TestHoldCaptureRelease(t *testing.T) { eachStore(t, testHoldCaptureRelease) }

func testHoldCaptureRelease(t *testing.T, target string) {
	b, clock := openBank(t, target)
	ctx := context.Background()
	grant(t, b, "g", "alice", 1000)
	h := hold(t, b, "h1", "alice", 600, t0.Add(time.Hour))
	if h.Balance != 400 || h.Hold.Remaining() != 600 {
		t.Fatalf("hold: %+v", h)
	}
	if r := hold(t, b, "h1", "alice", 600, t0.Add(time.Hour)); !r.Replayed || r.Balance != 400 {
		t.Fatalf("replayed hold: %+v", r)
	}
	if _, err := b.Hold(ctx, &wire.HoldRequest{ID: "h2", User: "alice", Amount: 401, Expires: t0.Add(time.Hour)}); !errors.Is(err, wire.ErrInsufficient) {
		t.Fatalf("hold beyond balance: %v", err)
	}
	mustLedger(t, b)

	batch := &wire.CaptureBatch{Host: "host-1", Tick: 1, Legs: []wire.CaptureLeg{
		{ID: "h1/host-1/vm1/1", Hold: "h1", VM: "vm1", Cumulative: 100},
		{ID: "h1/host-1/vm2/1", Hold: "h1", VM: "vm2", Cumulative: 50},
		{ID: "nope/host-1/vm3/1", Hold: "nope", VM: "vm3", Cumulative: 50},
	}}
	rep, err := b.Capture(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Applied != 150 || rep.Legs[0].Captured != 100 || rep.Legs[2].Error == nil || rep.Legs[2].Error.Code != wire.CodeNotFound {
		t.Fatalf("capture: %+v", rep)
	}
	// The replayed batch moves nothing.
	l1 := mustLedger(t, b)
	rep, err = b.Capture(ctx, batch)
	if err != nil || rep.Applied != 0 || rep.Legs[0].Captured != 100 {
		t.Fatalf("replayed capture: %+v %v", rep, err)
	}
	if l2 := mustLedger(t, b); !sameJSON(t, l1, l2) {
		t.Fatalf("replay changed the ledger: %+v → %+v", l1, l2)
	}
	// A later tick with a lower cumulative moves nothing; a higher one the difference.
	rep, _ = b.Capture(ctx, &wire.CaptureBatch{Host: "host-1", Tick: 2, Legs: []wire.CaptureLeg{
		{ID: "h1/host-1/vm1/2", Hold: "h1", VM: "vm1", Cumulative: 90},
		{ID: "h1/host-1/vm2/2", Hold: "h1", VM: "vm2", Cumulative: 80},
	}})
	if rep.Applied != 30 {
		t.Fatalf("tick 2: %+v", rep)
	}
	// A leg cannot capture beyond the hold: it is cut and reports exhaustion.
	rep, _ = b.Capture(ctx, &wire.CaptureBatch{Host: "host-2", Tick: 3, Legs: []wire.CaptureLeg{
		{ID: "h1/host-2/vm9/3", Hold: "h1", VM: "vm9", Cumulative: 10_000},
	}})
	if rep.Applied != 600-180 || !rep.Legs[0].Exhausted {
		t.Fatalf("over-capture: %+v", rep)
	}
	// Only the owner releases.
	if _, err := b.Release(ctx, &wire.ReleaseRequest{Hold: "h1", User: "bob"}); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("bob releasing alice's hold: %v", err)
	}
	rel, err := b.Release(ctx, &wire.ReleaseRequest{Hold: "h1", User: "alice"})
	if err != nil || rel.Released != 0 || rel.Hold.Status != wire.HoldClosed || rel.Balance != 400 {
		t.Fatalf("release: %+v %v", rel, err)
	}
	// A closed hold captures nothing.
	*clock = clock.Add(time.Minute)
	rep, _ = b.Capture(ctx, &wire.CaptureBatch{Host: "host-1", Tick: 4, Legs: []wire.CaptureLeg{{ID: "h1/host-1/vm1/4", Hold: "h1", VM: "vm1", Cumulative: 700}}})
	if rep.Applied != 0 || rep.Legs[0].Error == nil || rep.Legs[0].Error.Code != wire.CodeConflict {
		t.Fatalf("capture on a closed hold: %+v", rep)
	}
	l := mustLedger(t, b)
	prov := map[string]money.Micro{}
	for _, a := range l.Accounts {
		prov[a.ID] = a.Balance
	}
	if prov["provider:host-1"] != 180 || prov["provider:host-2"] != 420 || prov["user:alice"] != 400 {
		t.Fatalf("accounts: %v", prov)
	}
	bal, _ := b.Balance(ctx, &wire.BalanceRequest{User: "alice"})
	if bal.Spent != 600 || bal.Granted != 1000 || bal.Held != 0 {
		t.Fatalf("balance: %+v", bal)
	}
}

func TestExpiredHoldsAreReleasedAndCaptureNothing(t *testing.T) {
	eachStore(t, testExpiredHoldsAreReleasedAndCaptureNothing)
}

func testExpiredHoldsAreReleasedAndCaptureNothing(t *testing.T, target string) {
	b, clock := openBank(t, target)
	ctx := context.Background()
	grant(t, b, "g", "bob", 500)
	hold(t, b, "h", "bob", 300, t0.Add(time.Minute))
	*clock = t0.Add(time.Minute)
	rep, _ := b.Capture(ctx, &wire.CaptureBatch{Host: "host-1", Tick: 1, Legs: []wire.CaptureLeg{{ID: "h/host-1/v/1", Hold: "h", VM: "v", Cumulative: 10}}})
	if rep.Applied != 0 || rep.Legs[0].Error == nil || rep.Legs[0].Error.Code != wire.CodeExpired {
		t.Fatalf("capture after expiry: %+v", rep)
	}
	n, err := b.Tick(ctx, *clock)
	if err != nil || n != 1 {
		t.Fatalf("tick: %d %v", n, err)
	}
	if bal, _ := b.Balance(ctx, &wire.BalanceRequest{User: "bob"}); bal.Balance != 500 || bal.Held != 0 {
		t.Fatalf("after expiry: %+v", bal)
	}
	if n, _ := b.Tick(ctx, *clock); n != 0 {
		t.Fatalf("second tick released %d", n)
	}
	mustLedger(t, b)
}

// TestBadInputChangesNothing: every refused request leaves the ledger as it was.
func TestBadInputChangesNothing(t *testing.T) { eachStore(t, testBadInputChangesNothing) }

func testBadInputChangesNothing(t *testing.T, target string) {
	b, _ := openBank(t, target)
	ctx := context.Background()
	grant(t, b, "g", "alice", 1000)
	grant(t, b, "g2", "bob", 1000)
	hold(t, b, "h", "alice", 100, t0.Add(time.Hour))
	before := mustLedger(t, b)
	exp := t0.Add(time.Hour)
	cases := []struct {
		name string
		do   func() error
		want error
	}{
		{"grant zero", func() error { _, e := b.Grant(ctx, &wire.GrantRequest{ID: "x", User: "alice", Amount: 0}); return e }, wire.ErrBadRequest},
		{"grant negative", func() error { _, e := b.Grant(ctx, &wire.GrantRequest{ID: "x", User: "alice", Amount: -1}); return e }, wire.ErrBadRequest},
		{"grant absurd", func() error {
			_, e := b.Grant(ctx, &wire.GrantRequest{ID: "x", User: "alice", Amount: math.MaxInt64})
			return e
		}, wire.ErrBadRequest},
		{"grant bad user", func() error { _, e := b.Grant(ctx, &wire.GrantRequest{ID: "x", User: "a.b", Amount: 1}); return e }, wire.ErrBadRequest},
		{"grant id reused", func() error { _, e := b.Grant(ctx, &wire.GrantRequest{ID: "g", User: "bob", Amount: 1000}); return e }, wire.ErrConflict},
		{"hold unknown user", func() error {
			_, e := b.Hold(ctx, &wire.HoldRequest{ID: "y", User: "mallory", Amount: 1, Expires: exp})
			return e
		}, wire.ErrNotFound},
		{"hold too much", func() error {
			_, e := b.Hold(ctx, &wire.HoldRequest{ID: "y", User: "alice", Amount: 901, Expires: exp})
			return e
		}, wire.ErrInsufficient},
		{"hold in the past", func() error {
			_, e := b.Hold(ctx, &wire.HoldRequest{ID: "y", User: "alice", Amount: 1, Expires: t0})
			return e
		}, wire.ErrBadRequest},
		{"hold no expiry", func() error { _, e := b.Hold(ctx, &wire.HoldRequest{ID: "y", User: "alice", Amount: 1}); return e }, wire.ErrBadRequest},
		{"hold id reused", func() error {
			_, e := b.Hold(ctx, &wire.HoldRequest{ID: "h", User: "alice", Amount: 5, Expires: exp})
			return e
		}, wire.ErrConflict},
		{"release by another user", func() error { _, e := b.Release(ctx, &wire.ReleaseRequest{Hold: "h", User: "bob"}); return e }, wire.ErrForbidden},
		{"release unknown", func() error { _, e := b.Release(ctx, &wire.ReleaseRequest{Hold: "zz", User: "alice"}); return e }, wire.ErrNotFound},
		{"capture no legs", func() error { _, e := b.Capture(ctx, &wire.CaptureBatch{Host: "host-1"}); return e }, wire.ErrBadRequest},
		{"capture negative", func() error {
			_, e := b.Capture(ctx, &wire.CaptureBatch{Host: "host-1", Legs: []wire.CaptureLeg{{ID: "l", Hold: "h", VM: "v", Cumulative: -5}}})
			return e
		}, wire.ErrBadRequest},
		{"capture duplicate leg", func() error {
			_, e := b.Capture(ctx, &wire.CaptureBatch{Host: "host-1", Legs: []wire.CaptureLeg{{ID: "l", Hold: "h", VM: "v", Cumulative: 5}, {ID: "l", Hold: "h", VM: "w", Cumulative: 5}}})
			return e
		}, wire.ErrBadRequest},
		{"balance unknown", func() error { _, e := b.Balance(ctx, &wire.BalanceRequest{User: "nobody"}); return e }, wire.ErrNotFound},
	}
	for _, c := range cases {
		if err := c.do(); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	if after := mustLedger(t, b); !sameJSON(t, before, after) {
		t.Fatalf("bad input changed the ledger:\n%+v\n%+v", before, after)
	}
}

func TestReopenKeepsTheLedger(t *testing.T) { eachStore(t, testReopenKeepsTheLedger) }

func testReopenKeepsTheLedger(t *testing.T, path string) {
	now := func() time.Time { return t0 }
	b, err := bank.Open(path, bank.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	grant(t, b, "g", "alice", 42)
	b.Close()
	b, err = bank.Open(path, bank.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if r := grant(t, b, "g", "alice", 42); !r.Replayed || r.Balance != 42 {
		t.Fatalf("after reopen: %+v", r)
	}
	mustLedger(t, b)
}

func sameJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}
