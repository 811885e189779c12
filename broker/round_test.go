package broker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// TestDecide is the planner over one plan at a time: who acts on it, and
// what it sends.
func TestDecide(t *testing.T) {
	now := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	r := &round{now: now, replica: "me", tick: 10 * time.Second, settle: 20 * time.Second,
		beats: map[string]time.Time{"me": now, "alive": now.Add(-20 * time.Second), "dead": now.Add(-21 * time.Second)}}
	plan := func(owner, status string, start, end time.Duration) *planRecord {
		return &planRecord{Plan: wire.Plan{ID: "p", User: "u", Hold: "h", Owner: owner, Status: status, Budget: 7_200_000,
			Start: now.Add(start), End: now.Add(end)}, Bids: map[string]bidRec{
			"a1": {Host: "h1", Budget: 3_600_000, Start: now.Add(-time.Minute), Duration: wire.Duration(time.Hour)},
			"a3": {Host: "h1", Budget: 3_600_000, Start: now.Add(-time.Minute), Duration: wire.Duration(time.Hour)},
		}}
	}
	same := strategies.Decision{Allocs: []strategies.Allocation{
		{VM: "a1", Host: "h1", Budget: 3_540_000, Duration: 59 * time.Minute},
		{VM: "a3", Host: "h1", Budget: 3_540_000, Duration: 59 * time.Minute}}}
	moved := strategies.Decision{Allocs: []strategies.Allocation{
		{VM: "a1", Host: "h1", Budget: 7_080_000, Duration: 59 * time.Minute},
		{VM: "a2", Host: "h2", Budget: 1_000, Duration: 59 * time.Minute}}}
	cases := []struct {
		name  string
		rec   *planRecord
		wants strategies.Decision
		want  string // action, takeover, and each host's request
		asks  bool   // whether the strategy is asked
	}{
		{"another replica's, alive", plan("alive", wire.PlanRunning, -time.Minute, time.Hour), moved, "none", false},
		{"a dead replica's, running: taken over and re-planned", plan("dead", wire.PlanRunning, -time.Minute, time.Hour), same, "rebid takeover", true},
		{"a dead replica's, starting: carried on", plan("dead", planStarting, -time.Minute, time.Hour), same, "start takeover", false},
		{"a dead replica's, starting too long: failed", plan("dead", planStarting, -startingTimeout-time.Second, time.Hour), same, "fail takeover", false},
		{"starting on a replica not heard of yet: left a while", plan("new", planStarting, -20*time.Second, time.Hour), same, "none", false},
		{"starting on a replica never heard of: carried on", plan("new", planStarting, -21*time.Second, time.Hour), same, "start takeover", false},
		{"starting here: a try of start is on it", plan("me", planStarting, -time.Minute, time.Hour), moved, "none", false},
		{"starting here, its spend gone: carried on", plan("me", planStarting, -time.Minute, time.Hour), moved, "start", false},
		{"starting here too long: failed", plan("me", planStarting, -startingTimeout-time.Second, time.Hour), moved, "fail", false},
		{"Settle past its end", plan("me", wire.PlanRunning, -time.Hour, -20*time.Second), moved, "settle", false},
		{"nothing moves", plan("me", wire.PlanRunning, -time.Minute, time.Hour), same, "none", true},
		{"bids move", plan("me", wire.PlanRunning, -time.Minute, time.Hour), moved,
			"rebid h1: a1=7.08/59m0s cancel a3 of p; h2: a2=0.001/59m0s", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			asked := false
			r.startingHere = map[planRef]bool{{"u", "p"}: c.name == "starting here: a try of start is on it"}
			st := r.decide(versioned{c.rec, 1}, func() strategies.Decision { asked = true; return c.wants })
			got := []string{[]string{"none", "fail", "settle", "rebid", "start"}[st.action]}
			if st.takeOver {
				got = append(got, "takeover")
			}
			var reqs []string
			for _, ch := range st.changes {
				var parts []string
				for _, bid := range ch.req.Set {
					parts = append(parts, fmt.Sprintf("%s=%s/%s", bid.VM, bid.Budget, bid.Duration.D()))
				}
				if len(ch.req.Cancel) > 0 {
					parts = append(parts, fmt.Sprintf("cancel %s of %s", strings.Join(ch.req.Cancel, ","), ch.req.Plan))
				}
				reqs = append(reqs, ch.host+": "+strings.Join(parts, " "))
			}
			if len(reqs) > 0 {
				got = append(got, strings.Join(reqs, "; "))
			}
			if s := strings.Join(got, " "); s != c.want {
				t.Fatalf("got %q, want %q", s, c.want)
			}
			if asked != c.asks {
				t.Fatalf("strategy asked: %v", asked)
			}
		})
	}
}

// TestSilenceIsCountedInTheStoresOrder: another replica is silent when this
// one's heartbeats came back from the store two ticks past its last, not
// when the clock has moved on — while the store took no beats (its stream
// lost its leader) or the watch brought none back, neither replica's plans
// are taken. Mutation: measuring silence against the round's clock
// (r.now) takes the plan over in the second and third cases.
func TestSilenceIsCountedInTheStoresOrder(t *testing.T) {
	now := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	const tick = 10 * time.Second
	rec := &planRecord{Plan: wire.Plan{ID: "p", User: "u", Hold: "h", Owner: "other", Status: wire.PlanRunning, Budget: 1,
		Start: now.Add(-time.Hour), End: now.Add(time.Hour)}, Bids: map[string]bidRec{}}
	for _, c := range []struct {
		name  string
		beats map[string]time.Time
		take  bool
	}{
		{"its beats stopped, this one's came back", map[string]time.Time{"me": now, "other": now.Add(-21 * time.Second)}, true},
		{"the store took no beats for a while", map[string]time.Time{"me": now.Add(-15 * time.Second), "other": now.Add(-21 * time.Second)}, false},
		{"this replica's beat not back yet", map[string]time.Time{"other": now.Add(-time.Minute)}, false},
	} {
		r := &round{now: now, replica: "me", tick: tick, settle: tick, beats: c.beats}
		st := r.decide(versioned{rec, 1}, func() strategies.Decision { return strategies.Decision{} })
		if st.takeOver != c.take {
			t.Errorf("%s: taken over %v, want %v", c.name, st.takeOver, c.take)
		}
	}
}
