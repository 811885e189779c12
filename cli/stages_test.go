package cli_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/cli"
	"github.com/mrmarket/mrmarket/hadoopvm/yarn/yarntest"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestStagesCommands: `stages start` and `stages watch` move the user's
// stage-priority plan to the stage an application of hers named
// "workflow:stage" runs, and nothing else: not another user's plan or for
// another user's application, not for a name without a ':' or an
// application that had ended before the watch began, never back.
func TestStagesCommands(t *testing.T) {
	m, clock := startMarket(t)
	n := "--nats=" + m.URL
	grant(t, n, "100", "alice", "bob")
	for user, vm := range map[string]string{"alice": "a1", "bob": "b1"} {
		plan := writeFile(t, `{"workflows": [{"name": "etl", "weight": 1, "stages": [
			{"name": "stage-1", "weight": 1, "vms": ["`+vm+`"]}, {"name": "stage-2", "weight": 2, "vms": ["`+vm+`"]}]}]}`)
		if r := mrmarket("spend", n, "--user", user, "--budget", "10", "--duration", "1h", "--plan", plan, "--strategy", "stage", "--id", user+"-etl"); r.code != 0 {
			t.Fatalf("%s's spend: %+v", user, r)
		}
	}
	want := func(why string, alice, bob int) {
		t.Helper()
		r := mrmarket("plans", n, "--json")
		var rep wire.PlansReply
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil {
			t.Fatalf("plans: %+v", r)
		}
		got := map[string][]int{}
		for _, p := range rep.Plans {
			got[p.ID] = p.Stage
		}
		if !slices.Equal(got["alice-etl"], []int{alice}) || !slices.Equal(got["bob-etl"], []int{bob}) {
			t.Fatalf("%s: stages %v, want alice-etl at %d, bob-etl at %d", why, got, alice, bob)
		}
	}
	want("at the start", 0, 0)

	yc := yarntest.New(*clock)
	t.Cleanup(yc.Close)
	yc.AddNode("a1", 2)
	old := yc.Submit("alice", "etl:stage-2", 1, 0, clock.Add(-time.Hour)) // yesterday's run
	if err := yc.FinishApp(old, clock.Add(-50*time.Minute)); err != nil {
		t.Fatal(err)
	}
	yc.Submit("bob", "etl:stage-2", 1, 0, *clock)
	yc.Submit("alice", "etl", 1, 0, *clock)
	watch := []string{"stages", "watch", n, "--user", "alice", "--yarn", yc.RMURL(), "--once"}
	if r := mrmarket(watch...); r.code != 0 || r.stdout != "" {
		t.Fatalf("stages watch with bob's application, one not a stage's and one ended: %+v", r)
	}
	want("after bob's application", 0, 0)

	app := yc.Submit("alice", "etl:stage-2", 1, 0, *clock)
	r := mrmarket(watch...)
	if r.code != 0 || r.stdout != app+" etl:stage-2 (RUNNING): moved plan alice-etl\n" {
		t.Fatalf("stages watch with alice's etl:stage-2 running: %+v", r)
	}
	want("after alice's application", 1, 0)
	r = mrmarket(append(watch, "--json")...)
	var told struct {
		App   string   `json:"app"`
		Plans []string `json:"plans"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &told) != nil || told.App != app || told.Plans == nil || len(told.Plans) != 0 {
		t.Fatalf("stages watch --json again: %+v, want %s told with no plan moved", r, app)
	}

	start := func(user, stage string, json ...string) run {
		return mrmarket(append([]string{"stages", "start", n, "--user", user, "--workflow", "etl", "--stage", stage}, json...)...)
	}
	if r := start("alice", "stage-1"); r.code != 0 || !strings.Contains(r.stdout, "no plan moved") {
		t.Fatalf("stages start of alice's stage-1, after stage-2: %+v", r)
	}
	if r := start("alice", "stage-9"); r.code != 0 || !strings.Contains(r.stdout, "no plan moved") {
		t.Fatalf("stages start of a stage no plan has: %+v", r)
	}
	want("after alice's stage-1 and stage-9", 1, 0)
	r = start("bob", "stage-2", "--json")
	var rep wire.StageReply
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil || !slices.Equal(rep.Plans, []string{"bob-etl"}) {
		t.Fatalf("stages start --json of bob's stage-2: %+v", r)
	}
	want("after bob's stage-2", 1, 1)

	refuse(t, m, []refusal{
		{[]string{"stages", "start", n, "--user", "alice", "--stage", "stage-2"}, cli.ExitBadInput, "--workflow is required"},
		{[]string{"stages", "start", n, "--user", "alice", "--workflow", "etl"}, cli.ExitBadInput, "--stage is required"},
		{[]string{"stages", "start", n, "--user", "alice", "--workflow", "etl", "--stage", "a.b"}, cli.ExitBadInput, "invalid stage"},
		{[]string{"stages", "start", n, "--workflow", "etl", "--stage", "stage-2"}, cli.ExitBadInput, "--user"},
		{[]string{"stages", "start", n, "--user", "mallory", "--workflow", "etl", "--stage", "stage-2"}, cli.ExitBadInput, "no credentials"},
		{[]string{"stages", "watch", n, "--user", "alice"}, cli.ExitBadInput, "--yarn"},
		{[]string{"stages", "watch", n, "--user", "alice", "--yarn", yc.RMURL(), "--every", "1ms"}, cli.ExitBadInput, "--every"},
		{[]string{"stages", "strat"}, cli.ExitBadInput, "did you mean `mrmarket stages start`?"},
	})
}
