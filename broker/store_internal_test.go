package broker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestPlanFromBeforeUserKeys: a plan stored under the key of its id alone
// (before plan ids were each user's) is read, changed, and restored when
// deleted under that key; another user's plan of the same id gets its
// own key; a record under a user's key that is another user's is refused.
func TestPlanFromBeforeUserKeys(t *testing.T) {
	ctx := context.Background()
	_, nc := natstest.Start(t)
	plans := natstest.Assets(t, nc).Plans
	old := "plan." + base64.RawURLEncoding.EncodeToString([]byte("p"))
	rec := planRecord{Request: "fp", Bids: map[string]bidRec{}, Plan: wire.Plan{ID: "p", User: "alice", Status: wire.PlanRunning, Hold: "h"}}
	body, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plans.Put(ctx, old, body); err != nil {
		t.Fatal(err)
	}
	clock := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	b, err := New(Config{Agents: noAgents{}, Bank: &recBank{held: map[string]money.Micro{}, released: map[string]money.Micro{}},
		Now: func() time.Time { return clock }, Replica: "r1", Plans: plans})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	alice := planRef{"alice", "p"}
	v, ok := b.store.get(alice)
	if !ok || v.rec.Plan.Hold != "h" {
		t.Fatalf("the old plan: %+v %v", v, ok)
	}
	if _, err := b.mutate(ctx, alice, func(r *planRecord) error { r.Plan.Budget = 7; return nil }); err != nil {
		t.Fatal(err)
	}
	if e, err := plans.Get(ctx, old); err != nil || e.Revision() == 1 {
		t.Fatalf("the old plan's key after a change: %v %v", e, err)
	}
	if _, err := plans.Get(ctx, PlanKey("alice", "p")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a change of the old plan wrote a second key: %v", err)
	}
	bob := &planRecord{Request: "fp2", Bids: map[string]bidRec{}, Plan: wire.Plan{ID: "p", User: "bob", Status: wire.PlanRunning, Hold: "hb"}}
	if _, err := b.store.create(ctx, bob); err != nil {
		t.Fatalf("bob's plan of the same id: %v", err)
	}
	if _, err := plans.Get(ctx, PlanKey("bob", "p")); err != nil {
		t.Fatalf("bob's plan's key: %v", err)
	}

	// Deleted under its old key, it is restored there.
	if err := plans.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	testpoll.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if err := b.store.(*kvStore).repair(ctx); err != nil {
			return err
		}
		if e, err := plans.Get(ctx, old); err != nil || e.Operation() != jetstream.KeyValuePut {
			return fmt.Errorf("the old plan is not restored under its key: %v", err)
		}
		return nil
	})
	if b.Damage().Deleted == 0 {
		t.Fatal("the deletion was not reported")
	}

	// Bob's record under alice's key of another id is not alice's.
	moved, _ := json.Marshal(planRecord{Request: "x", Plan: wire.Plan{ID: "q", User: "bob", Status: wire.PlanRunning}})
	if _, err := plans.Put(ctx, PlanKey("alice", "q"), moved); err != nil {
		t.Fatal(err)
	}
	testpoll.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if b.Damage().Refused == 0 {
			return errors.New("the misplaced record is not refused yet")
		}
		return nil
	})
	for _, ref := range []planRef{{"alice", "q"}, {"bob", "q"}} {
		if _, ok := b.store.get(ref); ok {
			t.Fatalf("a misplaced record became plan %s", ref)
		}
	}
}
