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

// TestCTableReadsTheBin: C(p) between grid points is the bin's value —
// the time left when the job first reached the point below — not a line
// towards the next point. With the maps done at p = 0.52 and the reduces
// finishing together at the end, the line read 40 % less than the 10
// minutes really left.
func TestCTableReadsTheBin(t *testing.T) {
	tbl := strategies.CTable{Progress: []float64{0, 0.5, 0.55, 1}, Alloc: []float64{1},
		Remaining: [][]time.Duration{{20 * time.Minute}, {10 * time.Minute}, {0}, {0}}}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0, 20 * time.Minute}, {0.3, 20 * time.Minute}, {0.5, 10 * time.Minute}, {0.52, 10 * time.Minute}, {0.55, 0}, {1, 0}, {1.2, 0}} {
		if got := tbl.C(c.p, 0); got != c.want {
			t.Errorf("C(%v) = %s, want %s", c.p, got, c.want)
		}
	}
}

// TestJockeyDeadZoneHoldsCuts: a job a little ahead (predicted to finish
// within the dead zone of its shifted deadline at the allocation it has)
// keeps it although a smaller one would do; a job well ahead is cut; a job
// behind gets more at once.
func TestJockeyDeadZoneHoldsCuts(t *testing.T) {
	// At progress 0.5: 12 min left at 0.25, 10 min at 0.5.
	tbl := strategies.CTable{Progress: []float64{0, 0.5, 1}, Alloc: []float64{0.25, 0.5},
		Remaining: [][]time.Duration{{80 * time.Minute, 20 * time.Minute}, {12 * time.Minute, 10 * time.Minute}, {0, 0}}}
	jockey := func() *strategies.Jockey {
		j := &strategies.Jockey{Table: tbl, Deadline: 60 * time.Minute, Slack: 1, Alpha: 1, DeadZone: 3 * time.Minute}
		if a, _, _ := j.Step(0, 0); a != 0.5 {
			t.Fatalf("start: %v, want 0.5 (80 min at 0.25 misses the shifted 57)", a)
		}
		return j
	}
	// 44.5 min in: 0.25 would finish at 56.5 ≤ 57, so the controller wants
	// it, but at 0.5 the job finishes at 54.5, within 3 min of 57: held.
	if a, raw, _ := jockey().Step(44*time.Minute+30*time.Second, 0.5); raw != 0.25 || a != 0.5 {
		t.Errorf("a little ahead: %v (raw %v), want 0.5 held", a, raw)
	}
	// 30 min in: at 0.5 it finishes at 40, well ahead: cut to 0.25.
	if a, raw, _ := jockey().Step(30*time.Minute, 0.5); raw != 0.25 || a != 0.25 {
		t.Errorf("well ahead: %v (raw %v), want the cut to 0.25", a, raw)
	}
	// Cut to 0.25, then behind: 50 min in, 0.25 finishes at 62, 0.5 at 60:
	// more at once.
	j := jockey()
	j.Step(30*time.Minute, 0.5)
	if a, _, _ := j.Step(50*time.Minute, 0.5); a != 0.5 {
		t.Errorf("behind: %v, want 0.5 at once", a)
	}
}
