package workload_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/hadoopvm/sim"
	"github.com/mrmarket/mrmarket/hadoopvm/sim/workload"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// paperRun is one run of a seed-003 §7 two-user experiment in the
// simulator: hosts with a background VM each (extra load on a random half
// when heterogeneous), two users with a 2-slot VM on every host, each
// running a workflow built by jobs, spending budget over the run with its
// strategy through the real broker. It returns each user's workflow
// completion time.
type paperRun struct {
	hosts         int
	heterogeneous bool
	jobs          func(user string, vms []string) []sim.JobSpec
	spend         [2]func(user string, vms []string, jobs []sim.JobSpec) *wire.SpendRequest
}

func (r paperRun) run(tb testing.TB, seed uint64) [2]time.Duration {
	tb.Helper()
	rng := rand.New(rand.NewPCG(seed, 2))
	var hosts []sim.HostSpec
	var vms []sim.VMSpec
	users := [2]string{"u1", "u2"}
	mine := map[string][]string{}
	for h := range r.hosts {
		bg := 0.5
		if r.heterogeneous && rng.IntN(2) == 0 {
			bg = 1.5
		}
		hosts = append(hosts, sim.HostSpec{ID: fmt.Sprint("h", h), Cores: 2, Background: bg, BackgroundRate: 50})
		for _, u := range users {
			id := fmt.Sprintf("%s-h%d", u, h)
			vms = append(vms, sim.VMSpec{ID: id, Owner: u, Host: fmt.Sprint("h", h), Slots: 2})
			mine[u] = append(mine[u], id)
		}
	}
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	s, err := sim.New(sim.Config{Seed: seed, Start: start, Tick: 10 * time.Second}, hosts, vms)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := broker.New(broker.Config{Agents: s.Agents(), Bank: s.Ledger(), Now: s.Now, Tick: 10 * time.Second, Settle: 20 * time.Second, Serial: true})
	if err != nil {
		tb.Fatal(err)
	}
	s.Attach(b)
	s.Observe(sim.StageFeed(b))
	var first, last [2]string
	for i, u := range users {
		jobs := r.jobs(u, mine[u])
		first[i], last[i] = jobs[0].ID, jobs[len(jobs)-1].ID
		if _, err := b.Spend(context.Background(), r.spend[i](u, mine[u], jobs)); err != nil {
			tb.Fatal(err)
		}
		for _, j := range jobs {
			if err := s.Submit(j); err != nil {
				tb.Fatal(err)
			}
		}
	}
	res, err := s.Run(12 * time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	at := map[string]sim.JobResult{}
	for _, j := range res {
		at[j.ID] = j
	}
	var out [2]time.Duration
	for i := range users {
		out[i] = at[last[i]].Finish.Sub(at[first[i]].Submit)
	}
	return out
}

const budget = 1_000_000_000

func fair(user string, vms []string, _ []sim.JobSpec) *wire.SpendRequest {
	return &wire.SpendRequest{ID: "p-" + user, User: user, Budget: budget, Duration: wire.Duration(4 * time.Hour), VMs: vms, Strategy: wire.StrategyFair}
}

// series turns a user's chain of jobs into one workflow whose stages are
// the jobs, weighted: workflow priority over a series (Eq. 8) and stage
// priority (Eq. 9) are the same split over time.
func series(weights []float64) func(string, []string, []sim.JobSpec) *wire.SpendRequest {
	return func(user string, vms []string, jobs []sim.JobSpec) *wire.SpendRequest {
		wf := wire.WorkflowSpec{Name: workflowName(jobs[0].Name), Weight: 1}
		for i, j := range jobs {
			wf.Stages = append(wf.Stages, wire.StageSpec{Name: stageName(j.Name), Weight: weights[i%len(weights)], VMs: vms})
		}
		return &wire.SpendRequest{ID: "p-" + user, User: user, Budget: budget, Duration: wire.Duration(4 * time.Hour),
			Workflows: []wire.WorkflowSpec{wf}, Strategy: wire.StrategyStage}
	}
}

func workflowName(name string) string { w, _, _ := cut(name); return w }
func stageName(name string) string    { _, s, _ := cut(name); return s }
func cut(name string) (string, string, bool) {
	for i := range name {
		if name[i] == ':' {
			return name[:i], name[i+1:], true
		}
	}
	return name, "", false
}

func bottleneck(user string, vms []string, _ []sim.JobSpec) *wire.SpendRequest {
	r := fair(user, vms, nil)
	r.Strategy, r.Boost = wire.StrategyBottleneck, 0.9
	return r
}

var paperRuns = map[string]paperRun{
	// §7.2: GridMix monsterQueries on 40 hosts, workflow priority 1 vs 0.5
	// over a series, the other user the opposite series.
	"gridmix": {hosts: 40,
		jobs: func(u string, vms []string) []sim.JobSpec {
			j, _ := workload.GridMix(workload.Queries, u, u, vms, 0)
			return j
		},
		spend: [2]func(string, []string, []sim.JobSpec) *wire.SpendRequest{series([]float64{1, 0.5}), series([]float64{0.5, 1})}},
	// §7.3: Digg on 23 hosts, stage priority {1, 20, 1} against fair share.
	"digg": {hosts: 23,
		jobs:  func(u string, vms []string) []sim.JobSpec { return workload.Digg(u, u, vms, 0) },
		spend: [2]func(string, []string, []sim.JobSpec) *wire.SpendRequest{series([]float64{1, 20, 1}), fair}},
	// §7.4: VideoToon (16 MB) on 18 hosts, extra load on a random half,
	// bottleneck elimination (f = 0.9) against fair share.
	"videotoon": {hosts: 18, heterogeneous: true,
		jobs:  func(u string, vms []string) []sim.JobSpec { return workload.VideoToon(u, u, vms, 0, 16) },
		spend: [2]func(string, []string, []sim.JobSpec) *wire.SpendRequest{bottleneck, fair}},
}

// TestPaperScenariosRun: each two-user scenario runs to the end on the
// real broker, agents and strategies, and repeats exactly for a seed.
func TestPaperScenariosRun(t *testing.T) {
	for name, r := range paperRuns {
		a, b := r.run(t, 5), r.run(t, 5)
		if a != b || a[0] <= 0 || a[1] <= 0 {
			t.Fatalf("%s: %v then %v", name, a, b)
		}
		t.Logf("%s: user 1 %s, user 2 %s", name, a[0].Round(time.Second), a[1].Round(time.Second))
	}
}

// BenchmarkPaperScenarios is the wall time of one run of each seed-003
// two-user scenario in the simulator.
func BenchmarkPaperScenarios(b *testing.B) {
	for _, name := range []string{"gridmix", "digg", "videotoon"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				start := time.Now()
				paperRuns[name].run(b, 5)
				b.ReportMetric(time.Since(start).Seconds(), "wall-s")
			}
		})
	}
}
