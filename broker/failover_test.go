package broker_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestFailover: two broker replicas share the plans in the MRM_PLANS
// bucket. The replica running a plan dies mid-plan; within three ticks the
// survivor takes it over and keeps re-planning it (its idle VM loses its
// spending), the dead replica — were it to wake — can no longer touch it,
// and the plan ends once, within its budget.
func TestFailover(t *testing.T) {
	ctx := context.Background()
	clock := t0
	now := func() time.Time { return clock }
	const tick = 10 * time.Second
	ns := natstest.Server(t)
	bk, err := bank.Open(filepath.Join(t.TempDir(), "bank.db"), bank.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	defer bk.Close()
	if _, err := bk.Grant(ctx, &wire.GrantRequest{ID: "g", User: "alice", Amount: 10_000_000}); err != nil {
		t.Fatal(err)
	}
	// Two hosts, each with one of alice's VMs, their agents on NATS.
	agentNC := natstest.Connect(t, ns)
	var agents []*agent.Agent
	var sims []*agent.SimEnforcer
	for _, h := range []string{"host-1", "host-2"} {
		sim := agent.NewSimEnforcer(now, 1, agent.VM{ID: "a-" + h, Owner: "alice"})
		a, err := agent.New(agent.Config{Host: h, Enforcer: sim, Capturer: bk, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		stop, err := agent.Serve(agentNC, a)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		agents, sims = append(agents, a), append(sims, sim)
	}
	var log lockedBuf
	replica := func(name string) *broker.Broker {
		nc := natstest.Connect(t, ns)
		assets := natstest.Assets(t, nc)
		b, err := broker.New(broker.Config{NC: nc, Bank: bk, Now: now, Tick: tick, Settle: tick, Plans: assets.Plans, Replica: name,
			Logger: slog.New(slog.NewTextHandler(&log, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		return b
	}
	b1, b2 := replica("broker-1"), replica("broker-2")
	round := func(live ...*broker.Broker) {
		t.Helper()
		clock = clock.Add(tick)
		for _, a := range agents {
			st, err := a.Tick(ctx, clock)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range live {
				b.Observe(st)
			}
		}
		for _, b := range live {
			if err := b.Tick(ctx, clock); err != nil {
				t.Fatal(err)
			}
		}
	}
	plan := func(b *broker.Broker) wire.Plan {
		t.Helper()
		ps := b.Plans(&wire.PlansRequest{})
		if len(ps.Plans) != 1 {
			t.Fatalf("%s sees %d plans", b.Replica(), len(ps.Plans))
		}
		return ps.Plans[0]
	}
	round(b1, b2)
	if _, err := b1.Spend(ctx, &wire.SpendRequest{ID: "p", User: "alice", Budget: 3_600_000, Duration: wire.Duration(time.Hour),
		VMs: []string{"a-host-1", "a-host-2"}, Strategy: wire.StrategyBottleneck, Boost: 0.5}); err != nil {
		t.Fatal(err)
	}
	round(b1, b2)
	round(b1, b2)
	if p := plan(b2); p.Owner != "broker-1" || p.Status != wire.PlanRunning {
		t.Fatalf("before the death, as broker-2 sees it: %+v", p)
	}
	// broker-1 dies. Its VM on host-2 then goes idle.
	died := clock
	sims[1].SetDemand("a-host-2", 0)
	for plan(b2).Owner != "broker-2" {
		if clock.Sub(died) > 3*tick {
			t.Fatalf("no takeover within 3 ticks of the death (owner %s)", plan(b2).Owner)
		}
		round(b2)
	}
	t.Logf("broker-2 took the plan over %s after broker-1's last tick", clock.Sub(died))
	want := `"broker: plans taken over: their replica is silent" from=broker-1 plans=1 replica=broker-2`
	if got := log.String(); strings.Count(got, "plans taken over") != 1 || !strings.Contains(got, want) {
		t.Errorf("want one line of the failover, from broker-1, of its one plan:\n%s", got)
	}
	// The survivor runs it: within a few rounds the idle VM loses its money.
	for range 6 {
		round(b2)
	}
	p := plan(b2)
	var idleRate, busyRate float64
	for _, v := range p.VMs {
		if v.VM == "a-host-2" {
			idleRate = v.Rate
		} else {
			busyRate = v.Rate
		}
	}
	if !(idleRate > 0 && busyRate > 2*idleRate) {
		t.Fatalf("after the takeover the plan was not re-planned: %+v", p.VMs)
	}
	// broker-1 wakes up: its heartbeat is fresh again, but the plan is
	// broker-2's, whose heartbeat is fresh too: broker-1 leaves it alone.
	before := plan(b2)
	clock = clock.Add(tick)
	if err := b2.Tick(ctx, clock); err != nil {
		t.Fatal(err)
	}
	if err := b1.Tick(ctx, clock); err != nil {
		t.Fatal(err)
	}
	if after := plan(b2); after.Owner != "broker-2" || after.Spent < before.Spent {
		t.Fatalf("the woken replica interfered: %+v", after)
	}
	// To the end: one release, within budget.
	for clock.Before(t0.Add(time.Hour + 3*tick)) {
		round(b2)
	}
	p = plan(b2)
	bal, err := bk.Balance(ctx, &wire.BalanceRequest{User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status != wire.PlanDone || bal.Held != 0 || bal.Spent > 3_600_000 || bal.Spent+bal.Balance != 10_000_000 {
		t.Fatalf("at the end: plan %+v, alice %+v", p, bal)
	}
	l, err := bk.Ledger(ctx)
	if err != nil || len(l.Violations) > 0 {
		t.Fatalf("ledger: %v %v", l.Violations, err)
	}
	t.Logf("plan done once by %s: spent %s of 3.6, released %s", p.Owner, bal.Spent, p.Released)
}

// lockedBuf is a log's output, written by the replicas' goroutines.
type lockedBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
