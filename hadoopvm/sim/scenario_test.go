package sim_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/hadoopvm/sim"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// videoToon is a scenario like §7.4 of Sandholm and Lai, "MapReduce
// Optimization Using Regulated Dynamic Prioritization": 18 hosts with a CPU-hungry
// background VM each and extra load on a random half; two users with a VM
// on every host run a three-stage workflow (split → colour reduction, CPU
// heavy with skewed chunks → join); user 1 spends with strategy s1, user 2
// with fair share, through the real broker driven in-process. It returns
// the two workflows' completion times and what each plan paid.
func videoToon(t testing.TB, seed uint64, s1 string) (d1, d2 time.Duration, paid1, paid2 money.Micro) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	var hosts []sim.HostSpec
	var vms []sim.VMSpec
	users := []string{"u1", "u2"}
	mine := map[string][]string{}
	for h := range 18 {
		bg := 1.0
		if rng.IntN(2) == 0 {
			bg = 2 // the extra load on half the nodes
		}
		hosts = append(hosts, sim.HostSpec{ID: fmt.Sprint("h", h), Cores: 2, Background: bg, BackgroundRate: 100})
		for _, u := range users {
			id := fmt.Sprintf("%s-h%d", u, h)
			vms = append(vms, sim.VMSpec{ID: id, Owner: u, Host: fmt.Sprint("h", h), Slots: 1})
			mine[u] = append(mine[u], id)
		}
	}
	start := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	s, err := sim.New(sim.Config{Seed: seed, Start: start, Tick: 10 * time.Second}, hosts, vms)
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(broker.Config{Agents: s.Agents(), Bank: s.Ledger(), Now: s.Now, Tick: 10 * time.Second, Settle: 20 * time.Second, Serial: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Attach(b)
	ctx := context.Background()
	for i, u := range users {
		strategy := wire.StrategyFair
		if i == 0 {
			strategy = s1
		}
		if _, err := b.Spend(ctx, &wire.SpendRequest{ID: "plan-" + u, User: u, Budget: 100_000_000, Duration: wire.Duration(3 * time.Hour),
			VMs: mine[u], Strategy: strategy, Boost: 0.9}); err != nil {
			t.Fatal(err)
		}
		split := sim.JobSpec{ID: u + "-split", Name: "videotoon:split", User: u, VMs: mine[u], Maps: 18, Map: sim.Dist{Mean: 30, CV: 0.2}}
		colour := sim.JobSpec{ID: u + "-colour", Name: "videotoon:colour", User: u, VMs: mine[u], After: []string{split.ID}, Maps: 36,
			Map: sim.Dist{Mean: 600, CV: 0.6, StragglerProb: 0.1, Straggler: 2.5}}
		join := sim.JobSpec{ID: u + "-join", Name: "videotoon:join", User: u, VMs: mine[u], After: []string{colour.ID}, Maps: 1, Reduces: 1,
			Map: sim.Dist{Mean: 60}, Reduce: sim.Dist{Mean: 60}}
		for _, j := range []sim.JobSpec{split, colour, join} {
			if err := s.Submit(j); err != nil {
				t.Fatal(err)
			}
		}
	}
	res, err := s.Run(6 * time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]sim.JobResult{}
	for _, r := range res {
		byID[r.ID] = r
		if testing.Verbose() {
			t.Logf("%s: %s → %s (%d attempts)", r.ID, r.Submit.Sub(start), r.Finish.Sub(start), r.Attempts)
		}
	}
	d1 = byID["u1-join"].Finish.Sub(byID["u1-split"].Submit)
	d2 = byID["u2-join"].Finish.Sub(byID["u2-split"].Submit)
	return d1, d2, s.Ledger().Paid(holdOf(b, "plan-u1")), s.Ledger().Paid(holdOf(b, "plan-u2"))
}

func holdOf(b *broker.Broker, plan string) string {
	for _, p := range b.Plans(&wire.PlansRequest{}).Plans {
		if p.ID == plan {
			return p.Hold
		}
	}
	return ""
}

// TestStrategiesInTheSimulator: the real broker, its strategies and the
// agents run the two-user VideoToon scenario on the virtual clock; both
// workflows finish and neither plan pays more than its budget.
func TestStrategiesInTheSimulator(t *testing.T) {
	for _, s1 := range []string{wire.StrategyFair, wire.StrategyBottleneck} {
		d1, d2, p1, p2 := videoToon(t, 11, s1)
		t.Logf("user 1 %s: %s (paid %s); user 2 fair: %s (paid %s)", s1, d1.Round(time.Second), p1, d2.Round(time.Second), p2)
		if d1 <= 0 || d2 <= 0 || p1 > 100_000_000 || p2 > 100_000_000 || p1 <= 0 {
			t.Fatalf("%s: %s %s %s %s", s1, d1, d2, p1, p2)
		}
		e1, e2, q1, q2 := videoToon(t, 11, s1)
		if e1 != d1 || e2 != d2 || q1 != p1 || q2 != p2 {
			t.Fatalf("%s: the same seed gave another run", s1)
		}
	}
}

// BenchmarkTwoUserScenario is the wall time of one of Sandholm and Lai's
// two-user scenarios (bottleneck elimination against fair share) in the simulator.
func BenchmarkTwoUserScenario(b *testing.B) {
	for b.Loop() {
		start := time.Now()
		videoToon(b, 11, wire.StrategyBottleneck)
		b.ReportMetric(time.Since(start).Seconds(), "wall-s")
	}
}
