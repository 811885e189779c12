package bank_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestStoreOfTheOldSchemaOpens: a store migrated only up to 0002 (global
// hold and transfer ids), with the rows an older bank wrote for a grant, a
// transfer, a hold and a capture, opens with every migration and keeps
// working: the ledger adds up, every retry by id replays rather than moving
// money again, the hold captures, its capture legs replay, it is found by
// the broker's recovery and it releases what is left.
func TestStoreOfTheOldSchemaOpens(t *testing.T) { eachStore(t, testStoreOfTheOldSchemaOpens) }

func testStoreOfTheOldSchemaOpens(t *testing.T, target string) {
	ctx := context.Background()
	old, err := bank.OpenAtMigration(target, "0002")
	if err != nil {
		t.Fatal(err)
	}
	old.Close()
	expires := t0.Add(time.Hour)
	at := t0.UnixNano()
	fp := bank.Fingerprint
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	execOn(t, target,
		fmt.Sprintf(`INSERT INTO accounts (id, kind, balance, created) VALUES ('user:alice', 'user', 40, %[1]d), ('user:bob', 'user', 110, %[1]d),
			('provider:host-1', 'provider', 20, %[1]d)`, at),
		`UPDATE accounts SET balance = -200 WHERE id = 'mint'`,
		fmt.Sprintf(`INSERT INTO transfers (id, kind, debit, credit, amount, fingerprint, memo, at) VALUES
			('grant:g-a', 'grant', 'mint', 'user:alice', 100, %[2]s, '', %[1]d),
			('grant:g-b', 'grant', 'mint', 'user:bob', 100, %[3]s, '', %[1]d),
			('transfer:t1', 'transfer', 'user:alice', 'user:bob', 10, %[4]s, '', %[1]d),
			('hold:h1', 'hold', 'user:alice', 'escrow', 50, %[5]s, 'plan:p1', %[1]d),
			('capture:h1/host-1/vm1/1', 'capture', 'escrow', 'provider:host-1', 20, 'capture host-1 1 1', '1 legs, round 1', %[1]d)`,
			at, q(fp("grant", "alice", int64(100), "")), q(fp("grant", "bob", int64(100), "")), q(fp("transfer", "alice", "bob", int64(10), "")),
			q(fp("hold", "alice", int64(50), expires.UnixNano(), "", "plan:p1"))),
		fmt.Sprintf(`INSERT INTO holds (id, user_id, amount, captured, released, expires, status, beneficiaries, fingerprint, created) VALUES
			('h1', 'alice', 50, 20, 0, %[2]d, 'open', '', %[3]s, %[1]d)`, at, expires.UnixNano(), q(fp("hold", "alice", int64(50), expires.UnixNano(), "", "plan:p1"))),
		`INSERT INTO captures (hold, host, vm, total) VALUES ('h1', 'host-1', 'vm1', 20)`,
		fmt.Sprintf(`INSERT INTO capture_legs (id, hold, host, vm, cumulative, applied, at) VALUES ('h1/host-1/vm1/1', 'h1', 'host-1', 'vm1', 20, 20, %d)`, at),
	)

	b, clock := openBank(t, target)
	*clock = t0.Add(time.Minute)
	if l := mustLedger(t, b); l.Granted != 200 || l.OpenHolds != 30 || l.Balances != 170 {
		t.Fatalf("the old ledger: %+v", l)
	}
	if r, err := b.Grant(ctx, &wire.GrantRequest{ID: "g-a", User: "alice", Amount: 100}); err != nil || !r.Replayed || r.Balance != 40 {
		t.Fatalf("an old grant retried: %+v %v", r, err)
	}
	if r, err := b.Transfer(ctx, &wire.TransferRequest{ID: "t1", From: "alice", To: "bob", Amount: 10}); err != nil || !r.Replayed || r.Balance != 40 {
		t.Fatalf("an old transfer retried: %+v %v", r, err)
	}
	if r, err := b.Hold(ctx, &wire.HoldRequest{ID: "h1", User: "alice", Amount: 50, Expires: expires, Memo: "plan:p1"}); err != nil ||
		!r.Replayed || r.Hold.Captured != 20 || r.Balance != 40 {
		t.Fatalf("an old hold retried: %+v %v", r, err)
	}
	open, err := b.OpenHolds(ctx, &wire.OpenHoldsRequest{MemoPrefix: "plan:", Before: t0.Add(time.Minute)})
	if err != nil || len(open.Holds) != 1 || open.Holds[0].ID != "h1" || open.Holds[0].User != "alice" || open.Holds[0].Memo != "plan:p1" {
		t.Fatalf("open holds of the old store: %+v %v", open, err)
	}
	legs := func(tick int64, cum money.Micro) wire.CaptureReply {
		t.Helper()
		rep, err := b.Capture(ctx, &wire.CaptureBatch{Host: "host-1", Tick: tick, Legs: []wire.CaptureLeg{
			{ID: "h1/host-1/vm1/" + string(rune('0'+tick)), Hold: "h1", VM: "vm1", Cumulative: cum, Owner: "alice"}}})
		if err != nil || rep.Legs[0].Error != nil {
			t.Fatalf("capture: %+v %v", rep, err)
		}
		return rep
	}
	if rep := legs(1, 20); rep.Applied != 0 || rep.Legs[0].Captured != 20 {
		t.Fatalf("an old capture leg replayed: %+v", rep)
	}
	if rep := legs(2, 30); rep.Applied != 10 || rep.Legs[0].Captured != 30 {
		t.Fatalf("a new capture leg on the old hold: %+v", rep)
	}
	rel, err := b.Release(ctx, &wire.ReleaseRequest{Hold: "h1", User: "alice"})
	if err != nil || rel.Released != 20 || rel.Balance != 60 {
		t.Fatalf("releasing the old hold: %+v %v", rel, err)
	}
	st, err := b.Statement(ctx, &wire.StatementRequest{User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range st.Entries {
		ids = append(ids, e.Transfer)
	}
	if got := strings.Join(ids, " "); got != "release:h1 transfer:t1 hold:h1 grant:g-a" && got != "release:h1 hold:h1 transfer:t1 grant:g-a" {
		t.Fatalf("alice's statement: %s", got)
	}
	if l := mustLedger(t, b); l.Granted != 200 || l.OpenHolds != 0 || l.Balances != 200 {
		t.Fatalf("the ledger after: %+v", l)
	}
}

// execOn runs stmts on target's database, as an older bank would have.
func execOn(t *testing.T, target string, stmts ...string) {
	t.Helper()
	db := openSQL(t, target)
	defer db.Close()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}
