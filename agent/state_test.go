package agent_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestRestartNeverChargesTwice: an agent killed mid-plan and restarted from

func TestRestartNeverChargesTwice(t *testing.T) {
	ctx := context.Background()
	h := newHost(t, agent.VM{ID: "a", Owner: "alice"}, agent.VM{ID: "b", Owner: "bob"})
	state := filepath.Join(t.TempDir(), "agent.json")
	now := func() time.Time { return *h.clock }
	start := func() *agent.Agent {
		a, err := agent.New(agent.Config{Host: "host-1", Enforcer: h.sim, Capturer: h.bank, Now: now, StateFile: state})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := start()
	h.fund(t, "alice", "ha", 7200)
	h.fund(t, "bob", "hb", 3600)
	if _, err := a.SetBids(ctx, &wire.BidRequest{Set: []wire.Bid{
		{VM: "a", Owner: "alice", Plan: "pa", Hold: "ha", Budget: 7200, Duration: wire.Duration(time.Hour)},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetBids(ctx, &wire.BidRequest{Set: []wire.Bid{
		{VM: "b", Owner: "bob", Plan: "pb", Hold: "hb", Budget: 3600, Duration: wire.Duration(time.Hour)},
	}}); err != nil {
		t.Fatal(err)
	}
	tick := func(a *agent.Agent, at time.Duration) {
		*h.clock = t0.Add(at)
		if _, err := a.Tick(ctx, *h.clock); err != nil {
			t.Fatal(err)
		}
	}
	tick(a, 10*time.Minute)
	stale, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	tick(a, 20*time.Minute)

	// Crash: the process dies, the hypervisor's weights are reset, and the
	// state file on disk is the one from before the last capture.
	if err := os.WriteFile(state, stale, 0o600); err != nil {
		t.Fatal(err)
	}
	h.sim.Tamper("a", 0.5)
	h.sim.Tamper("b", 0.5)
	a = start()
	applied, _ := h.sim.Applied(ctx)
	if math.Abs(applied["a"]/applied["b"]-2) > 1e-9 {
		t.Fatalf("right after the restart: applied %v, want 2:1", applied)
	}
	for at := 21 * time.Minute; at <= 61*time.Minute; at += 5 * time.Minute {
		tick(a, at)
	}
	// The file the agent restarted from was written at 10m, so for all it
	// knows nobody enforced the bids from 10m to 20m: that is excused, and
	// each bid is charged 50 of its 60 minutes — once, though the bank had
	// captured up to 20m already.
	for u, want := range map[string]int64{"alice": 7200 * 50 / 60, "bob": 3600 * 50 / 60} {
		bal, err := h.bank.Balance(ctx, &wire.BalanceRequest{User: u})
		if err != nil {
			t.Fatal(err)
		}
		if int64(bal.Spent) != want {
			t.Errorf("%s spent %s of a %d budget across a restart", u, bal.Spent, want)
		}
	}
	h.captured(t, "") // the invariant holds
}

func TestCorruptStateFileIsRefused(t *testing.T) {
	h := newHost(t, agent.VM{ID: "a", Owner: "alice"})
	state := filepath.Join(t.TempDir(), "agent.json")
	if err := os.WriteFile(state, []byte(`{"version":1,"host":"other"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.New(agent.Config{Host: "host-1", Enforcer: h.sim, Capturer: h.bank, StateFile: state}); err == nil {
		t.Fatal("a state file of another host was accepted")
	}
	if err := os.WriteFile(state, []byte(`{garbage`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.New(agent.Config{Host: "host-1", Enforcer: h.sim, Capturer: h.bank, StateFile: state}); err == nil {
		t.Fatal("a corrupt state file was accepted")
	}
}
