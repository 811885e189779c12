package market_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestStageStartNeedsTheUsersSignature: a stage start on
// mrm.v1.broker.stage moves the running stage-priority plans of the user
// who signed it, forward only, and no one else's; signed by another user
// for her, or malformed, it is refused and no plan moves; an unknown
// workflow or stage, or a stage the plan is at or past, is an empty
// answer. The admin may move anyone's.
func TestStageStartNeedsTheUsersSignature(t *testing.T) {
	ctx := context.Background()
	m, _, bc, brc := testMarket(t)
	for _, u := range []string{"alice", "bob"} {
		if _, err := bc.Grant(ctx, &wire.GrantRequest{ID: "g-" + u, User: u, Amount: credits(t, "20")}); err != nil {
			t.Fatal(err)
		}
	}
	// Alice and bob each run a workflow named etl: stage-1 on their VM of
	// host-1, stage-2 on their VM of host-2.
	spend := func(user, id, vm1, vm2 string) {
		t.Helper()
		req := &wire.SpendRequest{ID: id, User: user, Budget: credits(t, "10"), Duration: wire.Duration(time.Hour), Strategy: wire.StrategyStage,
			Workflows: []wire.WorkflowSpec{{Name: "etl", Weight: 1, Stages: []wire.StageSpec{
				{Name: "stage-1", Weight: 1, VMs: []string{vm1}}, {Name: "stage-2", Weight: 1, VMs: []string{vm2}}}}}}
		if err := mandate.SignCaps(req); err != nil {
			t.Fatal(err)
		}
		if rep, err := brc.Spend(ctx, req); err != nil || rep.Plan.Status != wire.PlanRunning {
			t.Fatalf("%s's spend: %+v %v", user, rep, err)
		}
	}
	spend("alice", "alice-etl", "a1", "a2")
	spend("bob", "bob-etl", "b1", "b2")
	stages := func() map[string][]int {
		t.Helper()
		rep, err := brc.Plans(ctx, &wire.PlansRequest{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]int{}
		for _, p := range rep.Plans {
			out[p.ID] = p.Stage
		}
		return out
	}
	want := func(why string, alice, bob int) {
		t.Helper()
		if got := stages(); !slices.Equal(got["alice-etl"], []int{alice}) || !slices.Equal(got["bob-etl"], []int{bob}) {
			t.Fatalf("%s: stages %v, want alice-etl at %d and bob-etl at %d", why, got, alice, bob)
		}
	}
	want("at the start", 0, 0)

	nc, err := m.NC("stage-client")
	if err != nil {
		t.Fatal(err)
	}
	alice := broker.Client{NC: nc, Signer: signer(t, m, wire.RoleUser, "alice")}
	bob := broker.Client{NC: nc, Signer: signer(t, m, wire.RoleUser, "bob")}
	aliceStage2 := &wire.StageRequest{User: "alice", Workflow: "etl", Stage: "stage-2"}

	// Bob for alice, unsigned, malformed: refused, nothing moves.
	if rep, err := bob.StageStarted(ctx, aliceStage2); !errors.Is(err, wire.ErrForbidden) {
		t.Errorf("bob moving alice's plans: %+v %v, want forbidden", rep, err)
	}
	if rep, err := (broker.Client{NC: nc}).StageStarted(ctx, aliceStage2); !errors.Is(err, wire.ErrForbidden) {
		t.Errorf("an unsigned stage start: %+v %v, want forbidden", rep, err)
	}
	aliceKey := signer(t, m, wire.RoleUser, "alice")
	for _, body := range []string{
		`{"v":1,"user":"alice","workflow":"etl","stage":"stage.2"}`,
		`{"v":1,"user":"alice","workflow":"etl"}`,
		`{"v":1,"user":"alice","workflow":"etl","stage":"stage-2","plan":"alice-etl"}`,
		`{"v":2,"user":"alice","workflow":"etl","stage":"stage-2"}`,
	} {
		msg, err := aliceKey.Sign(wire.BrokerStage, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if err := send(ctx, nc, msg); !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("alice's %s: %v, want bad_request", body, err)
		}
	}
	want("after the refusals", 0, 0)

	// Unknown workflow or stage: nothing moves, and that is no error.
	for _, req := range []*wire.StageRequest{
		{User: "alice", Workflow: "etl", Stage: "stage-9"},
		{User: "alice", Workflow: "report", Stage: "stage-2"},
	} {
		if rep, err := alice.StageStarted(ctx, req); err != nil || rep.Plans == nil || len(rep.Plans) != 0 {
			t.Errorf("%s:%s: %+v %v, want an empty answer", req.Workflow, req.Stage, rep, err)
		}
	}
	want("after unknown stages", 0, 0)

	// Alice's own: her plan moves, bob's of the same names does not.
	rep, err := alice.StageStarted(ctx, aliceStage2)
	if err != nil || !slices.Equal(rep.Plans, []string{"alice-etl"}) {
		t.Fatalf("alice's stage-2: %+v %v, want alice-etl moved", rep, err)
	}
	want("after alice's stage-2", 1, 0)
	if b, _ := json.Marshal(rep); string(b) != `{"plans":["alice-etl"]}` {
		t.Errorf("the reply travels as %s", b)
	}
	// Told again, or of the stage before: no plan moves back.
	for _, stage := range []string{"stage-2", "stage-1"} {
		if rep, err := alice.StageStarted(ctx, &wire.StageRequest{User: "alice", Workflow: "etl", Stage: stage}); err != nil || len(rep.Plans) != 0 {
			t.Errorf("alice's %s again: %+v %v, want nothing moved", stage, rep, err)
		}
	}
	want("after the repeats", 1, 0)

	// The admin may move bob's.
	admin := broker.Client{NC: nc, Signer: signer(t, m, wire.RoleAdmin, "admin")}
	if rep, err := admin.StageStarted(ctx, &wire.StageRequest{User: "bob", Workflow: "etl", Stage: "stage-2"}); err != nil || !slices.Equal(rep.Plans, []string{"bob-etl"}) {
		t.Fatalf("the admin's stage-2 for bob: %+v %v", rep, err)
	}
	want("after the admin's", 1, 1)
}
