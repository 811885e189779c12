package bank_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestIDsAreEachUsersOwn: a hold or transfer id one user takes first
// (another's HoldIDFor, another's transfer id) blocks nothing: the other
// user's request of that id applies, once, and its retry replays; the same
// id with other content is still that user's conflict. Captures naming
// the VM's owner charge the owner's hold of that id.
func TestIDsAreEachUsersOwn(t *testing.T) { eachStore(t, testIDsAreEachUsersOwn) }

func testIDsAreEachUsersOwn(t *testing.T, target string) {
	ctx := context.Background()
	b, _ := openBank(t, target)
	grant(t, b, "g-a", "alice", 1000)
	grant(t, b, "g-b", "bob", 1000)
	bobs := wire.HoldIDFor("bob", "p1")
	hold(t, b, bobs, "alice", 10, t0.Add(time.Hour)) // alice squats bob's hold id
	if _, err := b.Transfer(ctx, &wire.TransferRequest{ID: "t1", From: "alice", To: "bob", Amount: 1}); err != nil {
		t.Fatal(err)
	}

	h := hold(t, b, bobs, "bob", 100, t0.Add(time.Hour))
	if h.Replayed || h.Hold.User != "bob" || h.Balance != 901 {
		t.Fatalf("bob's hold after alice took its id: %+v", h)
	}
	if h := hold(t, b, bobs, "bob", 100, t0.Add(time.Hour)); !h.Replayed || h.Balance != 901 {
		t.Fatalf("bob's retry: %+v", h)
	}
	if _, err := b.Hold(ctx, &wire.HoldRequest{ID: bobs, User: "bob", Amount: 200, Expires: t0.Add(time.Hour)}); !errors.Is(err, wire.ErrConflict) {
		t.Fatalf("bob's id with other content: %v", err)
	}
	tr := &wire.TransferRequest{ID: "t1", From: "bob", To: "alice", Amount: 5}
	if r, err := b.Transfer(ctx, tr); err != nil || r.Replayed || r.Balance != 896 {
		t.Fatalf("bob's transfer t1 after alice's: %+v %v", r, err)
	}
	if r, err := b.Transfer(ctx, tr); err != nil || !r.Replayed || r.Balance != 896 {
		t.Fatalf("bob's transfer t1 again: %+v %v", r, err)
	}
	if _, err := b.Transfer(ctx, &wire.TransferRequest{ID: "t1", From: "bob", To: "alice", Amount: 6}); !errors.Is(err, wire.ErrConflict) {
		t.Fatalf("bob's t1 with other content: %v", err)
	}

	// The agent names the VM's owner: bob's hold pays for bob's VM.
	rep, err := b.Capture(ctx, &wire.CaptureBatch{Host: "host-1", Tick: 1, Legs: []wire.CaptureLeg{
		{ID: bobs + "/host-1/b1/1", Hold: bobs, VM: "b1", Cumulative: 30, Owner: "bob"},
	}})
	if err != nil || rep.Applied != 30 || rep.Legs[0].Error != nil {
		t.Fatalf("capture for bob's VM: %+v %v", rep, err)
	}
	// Without the owner, the id is ambiguous: refused, nothing moves.
	rep, err = b.Capture(ctx, &wire.CaptureBatch{Host: "host-1", Tick: 2, Legs: []wire.CaptureLeg{
		{ID: bobs + "/host-1/b1/2", Hold: bobs, VM: "b1", Cumulative: 40},
	}})
	if err != nil || rep.Applied != 0 || rep.Legs[0].Error == nil || rep.Legs[0].Error.Code != wire.CodeBadRequest {
		t.Fatalf("capture without the owner of an id two users have: %+v %v", rep, err)
	}
	got, err := b.Holds(ctx, &wire.HoldsRequest{IDs: []string{bobs}})
	if err != nil || len(got.Holds) != 2 || got.Holds[0].User != "alice" || got.Holds[0].Captured != 0 ||
		got.Holds[1].User != "bob" || got.Holds[1].Captured != 30 {
		t.Fatalf("holds of the id: %+v %v", got, err)
	}
	// Each releases its own.
	rel, err := b.Release(ctx, &wire.ReleaseRequest{Hold: bobs, User: "alice"})
	if err != nil || rel.Released != 10 || rel.Hold.User != "alice" {
		t.Fatalf("alice releases her hold: %+v %v", rel, err)
	}
	if b := balanceOf(t, b, "bob"); b.Held != 70 {
		t.Fatalf("bob's hold after alice released hers: %+v", b)
	}
	if l := mustLedger(t, b); l.OpenHolds != 70 {
		t.Fatalf("open holds %s", l.OpenHolds)
	}
}

func balanceOf(t *testing.T, b *bank.Bank, user string) wire.BalanceReply {
	t.Helper()
	r, err := b.Balance(context.Background(), &wire.BalanceRequest{User: user})
	if err != nil {
		t.Fatal(err)
	}
	return r
}
