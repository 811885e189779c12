package sim_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/hadoopvm/sim"
	"github.com/mrmarket/mrmarket/internal/wire"
)

var t0 = time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)

// TestSingleJobMatchesItsAnalyticTime: on an idle 2-core host, a VM with 2
// slots runs 4 maps of 10 core-seconds in two waves (20 s) and then one
// reduce of 5 (5 s): 25 s.
func TestSingleJobMatchesItsAnalyticTime(t *testing.T) {
	s, err := sim.New(sim.Config{Seed: 1, Start: t0}, []sim.HostSpec{{ID: "h1", Cores: 2}}, []sim.VMSpec{{ID: "vm1", Owner: "alice", Host: "h1", Slots: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(sim.JobSpec{ID: "j", User: "alice", VMs: []string{"vm1"}, Maps: 4, Reduces: 1,
		Map: sim.Dist{Mean: 10}, Reduce: sim.Dist{Mean: 5}}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got := res[0].Duration(); got != 25*time.Second {
		t.Fatalf("job took %s, want 25s", got)
	}
	// Twice the speed halves it.
	s, _ = sim.New(sim.Config{Seed: 1, Start: t0}, []sim.HostSpec{{ID: "h1", Cores: 2, Speed: 2}}, []sim.VMSpec{{ID: "vm1", Owner: "alice", Host: "h1", Slots: 2}})
	_ = s.Submit(sim.JobSpec{ID: "j", User: "alice", VMs: []string{"vm1"}, Maps: 4, Reduces: 1, Map: sim.Dist{Mean: 10}, Reduce: sim.Dist{Mean: 5}})
	if res, _ := s.Run(time.Hour); res[0].Duration() != 12500*time.Millisecond {
		t.Fatalf("at speed 2: %s", res[0].Duration())
	}
}

// TestRatesTwoToOneProgressTwoToOne: two VMs bidding 2:1 on a saturated
// one-core host get CPU 2:1, through the agents' share rule.
func TestRatesTwoToOneProgressTwoToOne(t *testing.T) {
	s, err := sim.New(sim.Config{Seed: 1, Start: t0}, []sim.HostSpec{{ID: "h1", Cores: 1}},
		[]sim.VMSpec{{ID: "a", Owner: "alice", Host: "h1", Slots: 1}, {ID: "b", Owner: "bob", Host: "h1", Slots: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Bid("a", "pa", 7200_000_000, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Bid("b", "pb", 3600_000_000, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, j := range []sim.JobSpec{
		{ID: "ja", User: "alice", VMs: []string{"a"}, Maps: 1, Map: sim.Dist{Mean: 1000}},
		{ID: "jb", User: "bob", VMs: []string{"b"}, Maps: 1, Map: sim.Dist{Mean: 1000}},
	} {
		if err := s.Submit(j); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.Run(2 * time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// alice's task needs 1000 s of CPU at 2/3 of a core: 1500 s; bob's has
	// 500 s done then and the whole core after: 1500 + 500 = 2000 s.
	if a, b := res[0].Duration(), res[1].Duration(); math.Abs(a.Seconds()-1500) > 1 || math.Abs(b.Seconds()-2000) > 1 {
		t.Fatalf("alice %s, bob %s; want 1500s and 2000s", a, b)
	}
	if paid := s.Ledger().Paid("hold-pa"); paid <= 0 {
		t.Fatal("the agents charged nothing")
	}
}

func scenario(seed uint64) ([]sim.JobResult, int64) {
	var hosts []sim.HostSpec
	var vms []sim.VMSpec
	for h := range 8 {
		hosts = append(hosts, sim.HostSpec{ID: fmt.Sprint("h", h), Cores: 4, Background: 1, BackgroundRate: 100})
		for _, u := range []string{"alice", "bob"} {
			vms = append(vms, sim.VMSpec{ID: fmt.Sprintf("%s-%d", u, h), Owner: u, Host: fmt.Sprint("h", h), Slots: 2})
		}
	}
	s, err := sim.New(sim.Config{Seed: seed, Start: t0}, hosts, vms)
	if err != nil {
		panic(err)
	}
	for i := range 20 {
		u := []string{"alice", "bob"}[i%2]
		var mine []string
		for h := range 8 {
			mine = append(mine, fmt.Sprintf("%s-%d", u, h))
		}
		_ = s.Submit(sim.JobSpec{ID: fmt.Sprint("j", i), User: u, VMs: mine, Submit: time.Duration(i) * 7 * time.Second, Maps: 12, Reduces: 2,
			Map: sim.Dist{Mean: 30, CV: 0.4, StragglerProb: 0.05, Straggler: 4, FailProb: 0.02}, Reduce: sim.Dist{Mean: 20, CV: 0.3}})
	}
	res, err := s.Run(24 * time.Hour)
	if err != nil {
		panic(err)
	}
	return res, s.Events()
}

// TestDeterministic: the same seed gives the same run, another seed another.
func TestDeterministic(t *testing.T) {
	a, ea := scenario(42)
	b, eb := scenario(42)
	if !reflect.DeepEqual(a, b) || ea != eb {
		t.Fatal("two runs with one seed differ")
	}
	c, _ := scenario(43)
	if reflect.DeepEqual(a, c) {
		t.Fatal("two seeds gave the same run")
	}
	for _, r := range a {
		if r.Finish.IsZero() || r.Attempts < 14 {
			t.Fatalf("job %+v", r)
		}
	}
}

// TestShuffleOverlapsTheMaps: with slow start, a reduce starts while maps
// run, shuffles the map output there is, waits for the rest, then reduces.
// 3 slots on 3 cores; 4 maps of 10 s (the 4th runs 10–20 s); a reduce of 4 s
// shuffle + 5 s reduce. Slow start 0.5: it starts at 10 s, shuffles 3/4 by
// 13 s, waits, finishes the shuffle at 21 s and the reduce at 26 s. Without
// slow start it runs 20–29 s.
func TestShuffleOverlapsTheMaps(t *testing.T) {
	run := func(slow float64) time.Duration {
		s, err := sim.New(sim.Config{Seed: 1, Start: t0}, []sim.HostSpec{{ID: "h1", Cores: 3}}, []sim.VMSpec{{ID: "vm1", Owner: "alice", Host: "h1", Slots: 3}})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Submit(sim.JobSpec{ID: "j", User: "alice", VMs: []string{"vm1"}, Maps: 4, Reduces: 1, SlowStart: slow,
			Map: sim.Dist{Mean: 10}, Shuffle: sim.Dist{Mean: 4}, Reduce: sim.Dist{Mean: 5}}); err != nil {
			t.Fatal(err)
		}
		res, err := s.Run(time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return res[0].Duration()
	}
	if got := run(0.5); math.Abs(got.Seconds()-26) > 1e-6 {
		t.Fatalf("with slow start: %s, want 26s", got)
	}
	if got := run(0); math.Abs(got.Seconds()-29) > 1e-6 {
		t.Fatalf("without: %s, want 29s", got)
	}
}

// TestBackgroundLoadChangesMidRun: a task shares its core 1:1 with a
// background VM paying the same rate; when the background stops at 50 s the
// task gets the whole core. 100 core-seconds: 25 done by 50 s, 75 more by
// 125 s.
func TestBackgroundLoadChangesMidRun(t *testing.T) {
	s, err := sim.New(sim.Config{Seed: 1, Start: t0}, []sim.HostSpec{{ID: "h1", Cores: 1, Background: 1, BackgroundRate: 100}},
		[]sim.VMSpec{{ID: "vm1", Owner: "alice", Host: "h1", Slots: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Bid("vm1", "p", 360_000, time.Hour); err != nil { // 100 µ/s
		t.Fatal(err)
	}
	if err := s.Submit(sim.JobSpec{ID: "j", User: "alice", VMs: []string{"vm1"}, Maps: 1, Map: sim.Dist{Mean: 100}}); err != nil {
		t.Fatal(err)
	}
	if err := s.RunUntil(t0.Add(50 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := s.SetBackground("h1", 0); err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got := res[0].Duration(); math.Abs(got.Seconds()-125) > 1e-6 {
		t.Fatalf("job took %s, want 125s", got)
	}
	if err := s.SetBackground("nope", 1); err == nil {
		t.Fatal("an unknown host's background changed")
	}
}

// TestFailedAttemptsRunAgain: attempts that fail part way are run again
// until each task succeeds; the job counts every attempt.
func TestFailedAttemptsRunAgain(t *testing.T) {
	s, err := sim.New(sim.Config{Seed: 9, Start: t0}, []sim.HostSpec{{ID: "h1", Cores: 4}}, []sim.VMSpec{{ID: "vm1", Owner: "alice", Host: "h1", Slots: 4}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(sim.JobSpec{ID: "j", User: "alice", VMs: []string{"vm1"}, Maps: 40, Reduces: 4,
		Map: sim.Dist{Mean: 10, FailProb: 0.5}, Reduce: sim.Dist{Mean: 10, FailProb: 0.5}}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(24 * time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Finish.IsZero() || res[0].Attempts <= 44 {
		t.Fatalf("%+v: want more attempts than the 44 tasks", res[0])
	}
	t.Logf("44 tasks, %d attempts", res[0].Attempts)
}

// tickLog is a broker that records when it is ticked.
type tickLog struct{ at []time.Time }

func (l *tickLog) Observe(wire.HostState) {}
func (l *tickLog) Tick(_ context.Context, now time.Time) error {
	l.at = append(l.at, now)
	return nil
}

// ticksIn counts the ticks in (from, to].
func (l *tickLog) ticksIn(from, to time.Time) int {
	n := 0
	for _, t := range l.at {
		if t.After(from) && !t.After(to) {
			n++
		}
	}
	return n
}

// TestTicksGoOnAfterTheClusterGoesIdle: the agents and the broker are
// ticked whenever jobs run, also after every job submitted so far has
// finished and more are submitted later (a trace whose arrivals leave the
// cluster idle a while). A job submitted then ran without its broker's
// rounds: no EDF, no control loop, no bids for the jobs queued behind it.
func TestTicksGoOnAfterTheClusterGoesIdle(t *testing.T) {
	for _, toCompletion := range []bool{false, true} {
		s, err := sim.New(sim.Config{Seed: 1, Start: t0, Tick: 5 * time.Second}, []sim.HostSpec{{ID: "h1", Cores: 2}},
			[]sim.VMSpec{{ID: "vm1", Owner: "alice", Host: "h1", Slots: 2}})
		if err != nil {
			t.Fatal(err)
		}
		l := &tickLog{}
		s.Attach(l)
		if err := s.Submit(sim.JobSpec{ID: "a", User: "alice", VMs: []string{"vm1"}, Maps: 2, Map: sim.Dist{Mean: 10}}); err != nil {
			t.Fatal(err)
		}
		if toCompletion {
			if _, err := s.Run(time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.RunUntil(t0.Add(60 * time.Second)); err != nil { // a is done at 10 s
			t.Fatal(err)
		}
		if err := s.Submit(sim.JobSpec{ID: "b", User: "alice", VMs: []string{"vm1"}, Maps: 2, Map: sim.Dist{Mean: 30}, Submit: 60 * time.Second}); err != nil {
			t.Fatal(err)
		}
		res, err := s.Run(time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		from, to := res[1].Submit, res[1].Finish
		if got, want := l.ticksIn(from, to), int(to.Sub(from)/(5*time.Second)); got < want {
			t.Fatalf("toCompletion %v: %d ticks while b ran %s–%s, want at least %d (all ticks: %v)", toCompletion, got,
				from.Sub(t0), to.Sub(t0), want, l.at)
		}
		for i := 1; i < len(l.at); i++ {
			if d := l.at[i].Sub(t0); d%(5*time.Second) != 0 || !l.at[i].After(l.at[i-1]) {
				t.Fatalf("toCompletion %v: tick %d at %s: want every tick on the 5 s grid, in order", toCompletion, i, d)
			}
		}
	}
}
