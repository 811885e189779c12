package strategies_test

import (
	"math"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/strategies"
)

// table: a job of 600 machine-minutes of work, C(p, a) = (1−p)·600/a min.
func table() strategies.CTable {
	t := strategies.CTable{Progress: []float64{0, 0.5, 1}, Alloc: []float64{10, 20, 30, 40, 50, 60}}
	for _, p := range t.Progress {
		var row []time.Duration
		for _, a := range t.Alloc {
			row = append(row, time.Duration((1-p)*600/a*float64(time.Minute)))
		}
		t.Remaining = append(t.Remaining, row)
	}
	return t
}

func TestTotalWorkWithQ(t *testing.T) {
	p := strategies.TotalWorkWithQ([]strategies.StageProgress{
		{Fraction: 1, Queue: time.Minute, Time: 9 * time.Minute},
		{Fraction: 0.5, Queue: 0, Time: 10 * time.Minute},
	})
	if math.Abs(p-0.75) > 1e-12 {
		t.Fatalf("progress %v, want 0.75", p)
	}
}

// TestJockeyDeadZoneAndHysteresis: with slack 1.2 and a 60-minute deadline
// treated as 57 (the dead zone), 600 machine-minutes need 1.2·600/57 ≈ 12.6
// → 20 machines at the start; when the job falls behind (half done at 40
// minutes: 1.2·300/17 ≈ 21.2 → 30) the raw allocation jumps to 30 but the
// smoothed one moves only a fifth of the way each period.
func TestJockeyDeadZoneAndHysteresis(t *testing.T) {
	j := &strategies.Jockey{Table: table(), Deadline: 60 * time.Minute}
	alloc, raw, err := j.Step(0, 0)
	if err != nil || raw != 20 || alloc != 20 {
		t.Fatalf("start: %v %v %v", alloc, raw, err)
	}
	// The dead zone moves the decision 3 minutes earlier: a 39-minute
	// deadline (36 effective) needs 1.2·600/36 = 20 → 20, a 38-minute one
	// (35) 20.6 → 30.
	for _, c := range []struct {
		deadline time.Duration
		want     float64
	}{{39 * time.Minute, 20}, {38 * time.Minute, 30}} {
		jj := &strategies.Jockey{Table: table(), Deadline: c.deadline}
		if _, raw, _ := jj.Step(0, 0); raw != c.want {
			t.Errorf("deadline %s: raw %v, want %v", c.deadline, raw, c.want)
		}
	}
	// Half done at 40 minutes: 300 machine-minutes in 17 (slack 1.2) → 30.
	want := 20.0
	for step := 0; step < 3; step++ {
		alloc, raw, _ = j.Step(40*time.Minute, 0.5)
		want += 0.2 * (30 - want)
		if raw != 30 || math.Abs(alloc-want) > 1e-9 {
			t.Fatalf("step %d: alloc %v raw %v, want %v and 30", step, alloc, raw, want)
		}
	}
	if _, _, err := (&strategies.Jockey{}).Step(0, 0); err == nil {
		t.Fatal("no table accepted")
	}
}
