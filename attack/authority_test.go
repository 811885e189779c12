package attack

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// ---- 12: taking another user's id first ----

// idSquatClass: alice takes, with her own money or plans, the id bob is
// about to use; bob's request of that id must still apply, once.
func idSquatClass() class {
	return class{name: "12-id-squat", ticks: true, attacks: []attack{
		{"alice-takes-bobs-hold-id", func(t *testing.T, e *env) {
			id := mandate.HoldIDFor("bob", "p-bob-2")
			alice := bank.Client{NC: e.aliceNC.Conn, Signer: e.alice}
			if _, err := alice.Hold(e.ctx, &wire.HoldRequest{ID: id, User: "alice", Amount: credits(1), Expires: e.now().Add(time.Hour)}); err != nil {
				t.Fatalf("alice's hold of her own money: %v", err)
			}
			_, rep := e.spend(e.bob, e.bobNC, &wire.SpendRequest{ID: "p-bob-2", User: "bob", Budget: credits(5),
				Duration: wire.Duration(planLength), VMs: []string{"b1"}, Strategy: wire.StrategyFair})
			if rep.Plan.User != "bob" || rep.Plan.Hold != id || rep.Plan.Status != wire.PlanRunning {
				t.Fatalf("bob's spend after alice took its hold id: %+v", rep.Plan)
			}
			t.Logf("blocked nothing: bob's plan p-bob-2 runs on his hold %s", id)
			e.advance(tick) // the agents capture, each leg naming the VM's owner
			holds, err := e.m.Bank.Holds(e.ctx, &wire.HoldsRequest{IDs: []string{id}})
			if err != nil || len(holds.Holds) != 2 {
				t.Fatalf("the holds of %s: %+v %v", id, holds, err)
			}
			for _, h := range holds.Holds {
				switch {
				case h.User == "alice" && (h.Amount != credits(1) || h.Captured != 0):
					t.Errorf("alice's hold %s: %+v, want 1 credit, nothing captured", id, h)
				case h.User == "bob" && (h.Amount != credits(5) || h.Captured == 0):
					t.Errorf("bob's hold %s: %+v, want 5 credits, captured by his plan", id, h)
				}
			}
		}},
		{"alice-takes-bobs-transfer-id", func(t *testing.T, e *env) {
			alice := bank.Client{NC: e.aliceNC.Conn, Signer: e.alice}
			bob := bank.Client{NC: e.bobNC.Conn, Signer: e.bob}
			if _, err := alice.Transfer(e.ctx, &wire.TransferRequest{ID: "t-bob", From: "alice", To: "bob", Amount: credits(1)}); err != nil {
				t.Fatal(err)
			}
			before := e.balance("bob").Balance
			req := &wire.TransferRequest{ID: "t-bob", From: "bob", To: "alice", Amount: credits(2)}
			if r, err := bob.Transfer(e.ctx, req); err != nil || r.Replayed || r.Balance != before-credits(2) {
				t.Fatalf("bob's transfer t-bob after alice's: %+v %v", r, err)
			}
			if r, err := bob.Transfer(e.ctx, req); err != nil || !r.Replayed || r.Balance != before-credits(2) {
				t.Fatalf("bob's retry of t-bob: %+v %v", r, err)
			}
			req.Amount = credits(3)
			if _, err := bob.Transfer(e.ctx, req); !errors.Is(err, wire.ErrConflict) {
				t.Fatalf("bob's t-bob with other content: %v, want conflict", err)
			}
			t.Logf("blocked nothing: bob's transfer t-bob applied once")
		}},
		{"alice-takes-bobs-plan-id", func(t *testing.T, e *env) {
			e.spend(e.alice, e.aliceNC, &wire.SpendRequest{ID: "p-bob-3", User: "alice", Budget: credits(1),
				Duration: wire.Duration(planLength), VMs: []string{"a1"}, Strategy: wire.StrategyFair})
			req := &wire.SpendRequest{ID: "p-bob-3", User: "bob", Budget: credits(2), Duration: wire.Duration(planLength), VMs: []string{"b2"}, Strategy: wire.StrategyFair}
			held := e.balance("bob").Held
			_, first := e.spend(e.bob, e.bobNC, req)
			if first.Plan.User != "bob" || first.Plan.Status != wire.PlanRunning {
				t.Fatalf("bob's spend after alice took its plan id: %+v", first.Plan)
			}
			_, again := e.spend(e.bob, e.bobNC, req) // signed afresh: a retry, not a replay
			if again.Plan.Hold != first.Plan.Hold || !again.Plan.Start.Equal(first.Plan.Start) {
				t.Fatalf("bob's retry started another plan: %+v, first %+v", again.Plan, first.Plan)
			}
			if b := e.balance("bob"); b.Held != held+credits(2) {
				t.Errorf("bob holds %s, want %s: what he held before and the one plan's 2", b.Held, held+credits(2))
			}
			t.Logf("blocked nothing: bob's plan p-bob-3 runs, once")
		}},
	}}
}

// ---- 13: money for a name nobody holds ----

func unknownUserClass() class {
	notFound := func(do func(e *env) error) func(t *testing.T, e *env) {
		return func(t *testing.T, e *env) {
			err := do(e)
			if !errors.Is(err, wire.ErrNotFound) || !strings.Contains(err.Error(), "no registered principal of role user") {
				t.Fatalf("got %v, want %v", err, bank.ErrUnknownUser)
			}
			t.Logf("refused: %v", err)
		}
	}
	admin := func(e *env) bank.Client { return bank.Client{NC: e.adminNC.Conn, Signer: e.admin} }
	return class{name: "13-unknown-user", setup: setup{noPlans: true}, attacks: []attack{
		{"admin-grants-to-zed", notFound(func(e *env) error {
			_, err := admin(e).Grant(e.ctx, &wire.GrantRequest{ID: "g-zed", User: "zed", Amount: credits(100)})
			return err
		})},
		{"admin-grants-to-an-agents-name", notFound(func(e *env) error {
			_, err := admin(e).Grant(e.ctx, &wire.GrantRequest{ID: "g-host-1", User: "host-1", Amount: credits(100)})
			return err
		})},
		{"admin-sets-income-for-zed", notFound(func(e *env) error {
			_, err := admin(e).SetIncome(e.ctx, &wire.IncomeSetRequest{User: "zed", Amount: credits(1), Every: wire.Duration(time.Hour)})
			return err
		})},
		{"alice-transfers-to-zed", notFound(func(e *env) error {
			_, err := bank.Client{NC: e.aliceNC.Conn, Signer: e.alice}.Transfer(e.ctx, &wire.TransferRequest{ID: "t-zed", From: "alice", To: "zed", Amount: credits(1)})
			return err
		})},
	}}
}

// ---- 14: money moved while the audit stream does not answer ----

// bankEvents counts the events of MRM_EVENTS with id; an error when the
// stream is not there.
func bankEvents(e *env, id string) (int, error) {
	js, err := jetstream.New(e.adminNC.Conn)
	if err != nil {
		return 0, err
	}
	st, err := js.Stream(e.ctx, wire.StreamEvents)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(e.ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(e.ctx, seq)
		if err != nil {
			continue
		}
		var ev wire.Event
		if json.Unmarshal(m.Data, &ev) == nil && ev.ID == id {
			if _, err := signing.CheckRequest(ev.Request); err != nil || ev.Op != "grant" || ev.Principal.Name != "admin" {
				return 0, fmt.Errorf("event %s: %+v (%v)", id, ev, err)
			}
			n++
		}
	}
	return n, nil
}

func unauditedClass() class {
	return class{name: "14-unaudited-money", setup: setup{noPlans: true}, ticks: true, attacks: []attack{
		{"admin-deletes-the-audit-stream-then-a-grant", func(t *testing.T, e *env) {
			js, err := jetstream.New(e.adminNC.Conn)
			if err != nil {
				t.Fatal(err)
			}
			if err := js.DeleteStream(e.ctx, wire.StreamEvents); err != nil {
				t.Fatal(err)
			}
			before := e.balance("alice").Balance
			body, _ := json.Marshal(&wire.GrantRequest{Versioned: wire.Versioned{V: wire.Version}, ID: "g-unaudited", User: "alice", Amount: credits(1)})
			msg, err := e.admin.Sign(wire.BankGrant, body)
			if err != nil {
				t.Fatal(err)
			}
			id := wire.EventID(e.admin.Public(), msg.Header.Get(signing.HeaderNonce))
			if rep, err := rpc.Request[wire.GrantReply](e.ctx, e.adminNC.Conn, msg.Subject, nil, rpc.Verbatim(msg)); err != nil || rep.Balance != before+credits(1) {
				t.Fatalf("a grant with the audit stream gone: %+v %v", rep, err)
			}
			if n, err := e.m.Bank.OutboxLen(e.ctx); err != nil || n == 0 {
				t.Fatalf("the grant's event is not waiting in the bank's outbox: %d %v", n, err)
			}
			time.Sleep(500 * time.Millisecond) // the bank tries to publish, and cannot
			if _, err := natsutil.EnsureAssets(e.ctx, e.adminNC.Conn); err != nil {
				t.Fatal(err)
			}
			testpoll.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
				n, err := bankEvents(e, id)
				if err == nil && n == 0 {
					err = errors.New("the grant's event has not arrived")
				}
				return err
			})
			time.Sleep(500 * time.Millisecond) // a second copy would come now
			if n, err := bankEvents(e, id); err != nil || n != 1 {
				t.Fatalf("the grant's event is in the stream %d times (%v), want once", n, err)
			}
			if n, err := e.m.Bank.OutboxLen(e.ctx); err != nil || n != 0 {
				t.Fatalf("the bank's outbox after the stream came back: %d %v", n, err)
			}
			t.Logf("not lost: the grant's event %s arrived once, after the stream came back", id)
		}},
	}}
}

// ---- 15: the bank's files ----

func storeFilesClass() class {
	return class{name: "15-store-files", setup: setup{noPlans: true}, attacks: []attack{
		{"another-local-user-reads-bank-db", func(t *testing.T, e *env) {
			db := filepath.Join(e.dir, "bank.db")
			for _, name := range []string{db, db + "-wal", db + "-shm"} {
				st, err := os.Stat(name)
				if err != nil {
					t.Fatal(err)
				}
				if st.Mode().Perm()&0o077 != 0 {
					t.Errorf("%s is %s: readable by other local users", filepath.Base(name), st.Mode().Perm())
				}
			}
			t.Logf("refused: bank.db, its -wal and -shm are the bank's owner's alone (-rw-------)")
		}},
	}}
}
