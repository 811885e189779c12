package strategies_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/strategies"
)

type alloc = strategies.Allocation

func vm(name, host string, idle bool) strategies.VM {
	return strategies.VM{Name: name, Host: host, Idle: idle}
}

// registeredCases are each registered strategy over fixed snapshots: the
// exact budgets and durations the broker turns into bids, and the stages
// it records.
var registeredCases = []struct {
	name     string
	strategy string
	s        strategies.Snapshot
	want     []alloc
	stage    []int
}{
	{"fair splits evenly, the first VMs a micro-credit more", "fair",
		strategies.Snapshot{Remaining: 10_000_001, Left: time.Hour, VMs: []strategies.VM{vm("a1", "h1", false), vm("a2", "h2", true)}},
		[]alloc{{"a1", "h1", 5_000_001, time.Hour}, {"a2", "h2", 5_000_000, time.Hour}}, nil},
	{"fair with no time left spends nothing", "fair",
		strategies.Snapshot{Remaining: 10, VMs: []strategies.VM{vm("a1", "h1", false)}, Stage: []int{1}}, nil, []int{1}},
	{"workflow weighs the workflows, each VM once", "workflow", strategies.Snapshot{Remaining: 9_000_001, Left: time.Hour,
		Stage: []int{0, 0}, Workflows: []strategies.Workflow{
			{Name: "high", Weight: 1, Stages: []strategies.Stage{{Weight: 1, VMs: []strategies.VM{vm("a1", "h1", true), vm("a3", "h2", false)}}, {Weight: 1, VMs: []strategies.VM{vm("a1", "h1", true)}}}},
			{Name: "low", Weight: 0.5, Stages: []strategies.Stage{{Weight: 1, VMs: []strategies.VM{vm("a2", "h1", false), vm("a4", "h2", false)}}}}}},
		[]alloc{{"a1", "h1", 3_000_001, time.Hour}, {"a3", "h2", 3_000_000, time.Hour}, {"a2", "h1", 1_500_000, time.Hour}, {"a4", "h2", 1_500_000, time.Hour}},
		[]int{0, 0}},
	{"workflow weights all zero spend nothing", "workflow", strategies.Snapshot{Remaining: 100, Left: time.Hour,
		Workflows: []strategies.Workflow{{Stages: []strategies.Stage{{VMs: []strategies.VM{vm("a1", "h1", false)}}}}}, Stage: []int{0}}, nil, []int{0}},
	{"stage-carry funds each workflow's active stage over its slice of the time left", "stage-carry", digg(false, false, 0),
		[]alloc{{"a1", "h1", 6_666_667, time.Hour}, {"a3", "h2", 6_666_666, time.Hour}, {"a2", "h1", 1_833_333, 90 * time.Minute}},
		[]int{0, 0}},
	{"stage-carry moves past a stage whose VMs are all idle", "stage-carry", digg(true, false, 0),
		[]alloc{{"a5", "h1", 7_333_334, 90 * time.Minute}, {"a2", "h1", 1_833_333, 90 * time.Minute}},
		[]int{1, 0}},
	// Mutation: moving past every idle stage — the next stage's VMs are
	// idle until its job starts, and it would start unfunded.
	{"an idle stage keeps its funds until a later one is busy", "stage-carry", digg(true, true, 0),
		[]alloc{{"a1", "h1", 6_666_667, time.Hour}, {"a3", "h2", 6_666_666, time.Hour}, {"a2", "h1", 1_833_333, 90 * time.Minute}},
		[]int{0, 0}},
	// Mutation: moving to the first later stage that is busy — a stage
	// still busy from an earlier run is funded, and the next one, not
	// started yet, starts unfunded.
	{"an idle stage is left only for the next one", "stage-carry", threeStages(false, false, true),
		[]alloc{{"s1", "h1", 3_000_000, 20 * time.Minute}},
		[]int{0}},
	{"the last stage spends even when idle", "stage-carry", digg(true, true, 2),
		[]alloc{{"a1", "h1", 7_333_334, 3 * time.Hour}, {"a3", "h2", 7_333_333, 3 * time.Hour}, {"a2", "h1", 1_833_333, 90 * time.Minute}},
		[]int{2, 0}},
	{"stage-carry never moves back", "stage-carry", digg(false, false, 1),
		[]alloc{{"a5", "h1", 7_333_334, 90 * time.Minute}, {"a2", "h1", 1_833_333, 90 * time.Minute}},
		[]int{1, 0}},
	{"stage-bottleneck boosts the active stage's busy VMs", "stage-bottleneck", mapReduce(false),
		[]alloc{{"m1", "h1", 2_700_000, 30 * time.Minute}, {"m2", "h1", 900_000, 30 * time.Minute}, {"m3", "h2", 2_700_000, 30 * time.Minute}, {"m4", "h2", 900_000, 30 * time.Minute}},
		[]int{0}},
	{"stage-bottleneck moves on when the stage is idle", "stage-bottleneck", mapReduce(true),
		[]alloc{{"r1", "h1", 9_600_000, time.Hour}},
		[]int{1}},
	{"bottleneck: idle VMs give f of the flat rate to the busy ones", "bottleneck", strategies.Snapshot{Remaining: 10_800_000, Left: time.Hour, Boost: 0.9,
		VMs: []strategies.VM{vm("a1", "h1", true), vm("a2", "h2", false), vm("a3", "h3", false)}},
		[]alloc{{"a1", "h1", 359_999, time.Hour}, {"a2", "h2", 5_220_000, time.Hour}, {"a3", "h3", 5_220_000, time.Hour}}, nil},
	{"bottleneck: all idle spend (1 − f) of the flat rate", "bottleneck", strategies.Snapshot{Remaining: 3_600_000, Left: time.Hour, Boost: 0.5,
		VMs: []strategies.VM{vm("a1", "h1", true), vm("a2", "h2", true)}},
		[]alloc{{"a1", "h1", 900_000, time.Hour}, {"a2", "h2", 900_000, time.Hour}}, nil},
	{"bottleneck: the micro-credits rounding puts over the budget come off the largest", "bottleneck",
		strategies.Snapshot{Remaining: 449383877780846980, Left: 3*time.Hour + 41*time.Minute + 20*time.Second, Boost: 0.19,
			VMs: []strategies.VM{vm("a1", "h1", true), vm("a2", "h2", false)}},
		[]alloc{{"a1", "h1", 182000470501243040, 3*time.Hour + 41*time.Minute + 20*time.Second}, {"a2", "h2", 267383407279603940, 3*time.Hour + 41*time.Minute + 20*time.Second}}, nil},
	{"bottleneck: a boost out of range spends nothing", "bottleneck", strategies.Snapshot{Remaining: 100, Left: time.Hour, Boost: 1,
		VMs: []strategies.VM{vm("a1", "h1", true)}}, nil, nil},
	{"best response: equal hosts share equally, a host's part split over its VMs, own rates left out", "best-response",
		strategies.Snapshot{Remaining: 2_000_000, Left: 1000 * time.Second,
			VMs:    []strategies.VM{vm("a1", "h1", false), vm("a1b", "h1", false), vm("a2", "h2", false)},
			Prices: map[string]float64{"h1": 1500, "h2": 1000}, OwnRates: map[string]float64{"a1": 300, "a1b": 200}},
		[]alloc{{"a1", "h1", 500_000, 1000 * time.Second}, {"a1b", "h1", 500_000, 1000 * time.Second}, {"a2", "h2", 1_000_000, 1000 * time.Second}}, nil},
	{"best response: a host worth nothing gets nothing, a free one ε", "best-response",
		strategies.Snapshot{Remaining: 1_000_000, Left: 1000 * time.Second,
			VMs:         []strategies.VM{vm("a1", "h1", false), vm("a2", "h2", false), vm("a3", "h3", false)},
			Prices:      map[string]float64{"h1": 1000, "h2": 1000, "h3": 0},
			HostWeights: map[string]float64{"h2": 0}},
		[]alloc{{"a1", "h1", 999_999, 1000 * time.Second}, {"a3", "h3", 1, 1000 * time.Second}}, nil},
	{"deadline: a waiting job bids nothing", "deadline", job(0, nil), nil, nil},
	{"deadline: a best-effort job buys its share against the best-effort rates, over its predicted run", "deadline",
		job(0.8, func(_ *strategies.Snapshot, j *strategies.Job) { j.Deadline = false }),
		[]alloc{{"d1", "h1", 500_000, 125 * time.Second}, {"d2", "h2", 125_000, 125 * time.Second}, {"d3", "h2", 125_000, 125 * time.Second}}, nil},
	{"deadline: a deadline job spends its budget over its run, up to the rate buying 0.95 of each host", "deadline", job(0.8, nil),
		[]alloc{{"d1", "h1", 2_375_000, 125 * time.Second}, {"d2", "h2", 593_750, 125 * time.Second}, {"d3", "h2", 593_750, 125 * time.Second}}, nil},
	{"deadline: its control loop's share, if higher, and the others' shares on a host raise its rate; a small budget scales it down", "deadline",
		job(0.8, func(s *strategies.Snapshot, j *strategies.Job) {
			j.Control, j.HostShares, s.Remaining = 0.9, map[string]float64{"h1": 0.8, "h2": 0.85}, 10_000
		}),
		[]alloc{{"d1", "h1", 5_000, 111111111111 * time.Nanosecond}, {"d2", "h2", 2_499, 111111111111 * time.Nanosecond}, {"d3", "h2", 2_499, 111111111111 * time.Nanosecond}}, nil},
	{"deadline: a run shorter than a tick is bid over a tick", "deadline",
		job(0.8, func(_ *strategies.Snapshot, j *strategies.Job) { j.Deadline, j.Progress = false, 0.99 }),
		[]alloc{{"d1", "h1", 40_000, 10 * time.Second}, {"d2", "h2", 10_000, 10 * time.Second}, {"d3", "h2", 10_000, 10 * time.Second}}, nil},
}

func TestRegisteredStrategies(t *testing.T) {
	for _, c := range registeredCases {
		t.Run(c.name, func(t *testing.T) {
			st, err := strategies.ByName(c.strategy)
			if err != nil {
				t.Fatal(err)
			}
			d := st.Allocate(c.s)
			if !slices.Equal(d.Allocs, c.want) || !slices.Equal(d.Stage, c.stage) {
				t.Fatalf("got %v stage %v\nwant %v stage %v", d.Allocs, d.Stage, c.want, c.stage)
			}
			var sum money.Micro
			for _, a := range d.Allocs {
				sum += a.Budget
			}
			if sum > c.s.Remaining {
				t.Fatalf("allocated %s of %s", sum, c.s.Remaining)
			}
		})
	}
}

// digg is a stage-priority plan of two workflows over 3 h: digg (weight 2:
// join 20, dist 1, pearson 1) and other (weight 1: one 1, two 3); join's
// and dist's VMs idle as asked, digg at stage from.
func digg(joinIdle, distIdle bool, from int) strategies.Snapshot {
	return strategies.Snapshot{Remaining: 22_000_000, Left: 3 * time.Hour, Stage: []int{from, 0}, Workflows: []strategies.Workflow{
		{Name: "digg", Weight: 2, Stages: []strategies.Stage{
			{Name: "join", Weight: 20, VMs: []strategies.VM{vm("a1", "h1", joinIdle), vm("a3", "h2", joinIdle)}},
			{Name: "dist", Weight: 1, VMs: []strategies.VM{vm("a5", "h1", distIdle)}},
			{Name: "pearson", Weight: 1, VMs: []strategies.VM{vm("a1", "h1", joinIdle), vm("a3", "h2", joinIdle)}}}},
		{Name: "other", Weight: 1, Stages: []strategies.Stage{
			{Name: "one", Weight: 1, VMs: []strategies.VM{vm("a2", "h1", false)}},
			{Name: "two", Weight: 3, VMs: []strategies.VM{vm("a4", "h2", false)}}}}}}
}

// threeStages is a stage-carry plan of one workflow over 1 h, three stages
// of equal weight on a VM each, busy as given.
func threeStages(busy1, busy2, busy3 bool) strategies.Snapshot {
	return strategies.Snapshot{Remaining: 9_000_000, Left: time.Hour, Stage: []int{0}, Workflows: []strategies.Workflow{
		{Name: "w", Weight: 1, Stages: []strategies.Stage{
			{Name: "one", Weight: 1, VMs: []strategies.VM{vm("s1", "h1", !busy1)}},
			{Name: "two", Weight: 1, VMs: []strategies.VM{vm("s2", "h1", !busy2)}},
			{Name: "three", Weight: 1, VMs: []strategies.VM{vm("s3", "h2", !busy3)}}}}}}
}

// mapReduce is a stage-bottleneck plan of one workflow over 1 h: map
// (weight 3, two of its four VMs idle, or all) then reduce (weight 1).
func mapReduce(mapDone bool) strategies.Snapshot {
	return strategies.Snapshot{Remaining: 9_600_000, Left: time.Hour, Boost: 0.5, Stage: []int{0}, Workflows: []strategies.Workflow{
		{Name: "w", Weight: 1, Stages: []strategies.Stage{
			{Name: "map", Weight: 3, VMs: []strategies.VM{vm("m1", "h1", mapDone), vm("m2", "h1", true), vm("m3", "h2", mapDone), vm("m4", "h2", true)}},
			{Name: "reduce", Weight: 1, VMs: []strategies.VM{vm("r1", "h1", false)}}}}}}
}

// job is a deadline plan on h1 (one VM) and h2 (two), 100 s of work at a
// full share, best-effort prices 1000 and 500 µ/s, EDF's share as given on
// every host, 5 credits left of an hour; edit changes it.
func job(share float64, edit func(s *strategies.Snapshot, j *strategies.Job)) strategies.Snapshot {
	s := strategies.Snapshot{Remaining: 5_000_000, Left: time.Hour,
		VMs: []strategies.VM{vm("d1", "h1", false), vm("d2", "h2", false), vm("d3", "h2", false)}}
	j := &strategies.Job{Deadline: true, Work: 100, Share: share, HostShares: map[string]float64{"h1": share, "h2": share},
		BestEffort: map[string]float64{"h1": 1000, "h2": 500}, MinDuration: 10 * time.Second}
	if edit != nil {
		edit(&s, j)
	}
	s.Job = j
	return s
}

// TestBottleneckBudgetsAreItsRates: the registered bottleneck strategy's
// budgets are BottleneckElimination.Rates over the time left, rounded down
// (less what rounding put over the budget).
func TestBottleneckBudgetsAreItsRates(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for range 500 {
		n := 1 + rng.IntN(20)
		s := strategies.Snapshot{Remaining: money.Micro(1 + rng.Int64N(1e12)), Left: time.Duration(1+rng.Int64N(1e6)) * time.Second, Boost: rng.Float64() * 0.99}
		names := make([]string, n)
		idle := map[string]bool{}
		for i := range n {
			names[i] = fmt.Sprint("vm", i)
			idle[names[i]] = rng.IntN(2) == 0
			s.VMs = append(s.VMs, vm(names[i], "h", idle[names[i]]))
		}
		rates, err := strategies.BottleneckElimination{Boost: s.Boost}.Rates(float64(s.Remaining)/s.Left.Seconds()/float64(n), names, idle)
		if err != nil {
			t.Fatal(err)
		}
		d := strategies.BottleneckElimination{}.Allocate(s)
		var sum money.Micro
		for _, a := range d.Allocs {
			if want := money.Micro(math.Floor(rates[a.VM] * s.Left.Seconds())); a.Budget != want && a.Budget != want-1 || a.Duration != s.Left {
				t.Fatalf("%s: %v, its rate says %d", a.VM, a, want)
			}
			sum += a.Budget
		}
		if sum > s.Remaining {
			t.Fatalf("allocated %s of %s", sum, s.Remaining)
		}
	}
}

// TestEDF: deadline jobs in deadline order hold Φ of hosts no earlier job
// holds; best-effort jobs on hosts no deadline job holds share Φ by the
// overlap policy, scaled down to fit a host.
func TestEDF(t *testing.T) {
	at := func(m int) time.Time { return time.Date(2026, 6, 1, 9, m, 0, 0, time.UTC) }
	be := func(id string, left float64, hosts ...string) strategies.EDFJob {
		return strategies.EDFJob{ID: id, Hosts: hosts, Overlap: strategies.OverlapNow{
			OverlapJob: strategies.OverlapJob{Map: 100, Shuffle: 0}, MapLeft: left}}
	}
	jobs := []strategies.EDFJob{
		{ID: "late", Deadline: at(30), Hosts: []string{"h1", "h2"}},
		{ID: "early", Deadline: at(10), Hosts: []string{"h2", "h3"}},
		{ID: "tie-b", Deadline: at(20), Hosts: []string{"h4"}},
		{ID: "tie-a", Deadline: at(20), Hosts: []string{"h4", "h4"}},
		be("blocked", 10, "h3"),
		be("long", 90, "h5", "h6"),
		be("short", 20, "h5"),
	}
	run := strategies.EDF(jobs, 0.8, strategies.PolicyMaxSRPT)
	wantShare := map[string]float64{"early": 0.8, "tie-a": 0.8, "short": 0.8, "long": 0}
	for id, want := range wantShare {
		if got := run.Share[id]; math.Abs(got-want) > 1e-12 {
			t.Errorf("share of %s: %v, want %v (all %v)", id, got, want, run.Share)
		}
	}
	for _, id := range []string{"late", "tie-b", "blocked"} {
		if run.Share[id] != 0 {
			t.Errorf("%s runs at %v; it should wait", id, run.Share[id])
		}
	}
	wantHost := map[string]float64{"h1": 0, "h2": 0.8, "h3": 0.8, "h4": 0.8, "h5": 0.8, "h6": 0}
	for h, want := range wantHost {
		if got := run.Host[h]; math.Abs(got-want) > 1e-12 {
			t.Errorf("host %s: %v, want %v (all %v)", h, got, want, run.Host)
		}
	}
	// k-LPS shares the map station: two jobs on one host get Φ/2 each.
	run = strategies.EDF([]strategies.EDFJob{be("x", 50, "h1"), be("y", 80, "h1")}, 0.8, strategies.PolicyKLPS)
	if math.Abs(run.Share["x"]-0.4) > 1e-12 || math.Abs(run.Share["y"]-0.4) > 1e-12 || math.Abs(run.Host["h1"]-0.8) > 1e-12 {
		t.Errorf("k-LPS: %v %v", run.Share, run.Host)
	}
}
