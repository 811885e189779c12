package sim_test

import (
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/hadoopvm/sim"
	"github.com/mrmarket/mrmarket/strategies"
)

// tableJob is 20 maps and 2 reduces on 2 VMs (2 slots each, on 2-core
// hosts): 200 + 20 core-seconds of work on 4 slots, ideally 55 s.
func tableJob() sim.JobSpec {
	return sim.JobSpec{ID: "j", User: "alice", VMs: []string{"vm1", "vm2"}, Maps: 20, Reduces: 2,
		Map: sim.Dist{Mean: 10, CV: 0.2}, Shuffle: sim.Dist{Mean: 2}, Reduce: sim.Dist{Mean: 8, CV: 0.2}}
}

var tableAllocs = []float64{0.25, 0.5, 0.75, 1}

func TestJobProgress(t *testing.T) {
	j := tableJob() // map stage 200 s, reduce stage 2·(2+8) = 20 s
	for _, c := range []struct {
		maps, reds int
		want       float64
	}{{0, 0, 0}, {10, 0, 100.0 / 220}, {20, 0, 200.0 / 220}, {20, 1, 210.0 / 220}, {20, 2, 1}} {
		if got := sim.JobProgress(j, c.maps, c.reds); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%d maps, %d reduces: %v, want %v", c.maps, c.reds, got, c.want)
		}
	}
	j.Reduces = 0 // no reduce stage: the maps are all of it
	if got := sim.JobProgress(j, 10, 0); math.Abs(got-0.5) > 1e-12 {
		t.Errorf("map-only job half done: %v", got)
	}
	if got := sim.JobProgress(j, 20, 0); got != 1 {
		t.Errorf("map-only job done: %v", got)
	}
}

// TestJockeyTable: C(p, a) falls with progress and with allocation, is 0
// at progress 1, starts near the job's ideal time at the whole host, and is
// the same for the same seed.
func TestJockeyTable(t *testing.T) {
	job := tableJob()
	tbl, err := sim.JockeyTable(job, 2, 2, tableAllocs, 11, 20, 7)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(tbl.Alloc, tableAllocs) || len(tbl.Progress) != 11 || tbl.Progress[0] != 0 || tbl.Progress[10] != 1 {
		t.Fatalf("grid: alloc %v progress %v", tbl.Alloc, tbl.Progress)
	}
	for i := 1; i < len(tbl.Progress); i++ {
		if tbl.Progress[i] <= tbl.Progress[i-1] {
			t.Fatalf("progress not increasing: %v", tbl.Progress)
		}
	}
	for k, a := range tbl.Alloc {
		for i := 1; i < len(tbl.Progress); i++ {
			if tbl.Remaining[i][k] >= tbl.Remaining[i-1][k] {
				t.Errorf("a=%v: C(%v)=%s not below C(%v)=%s", a, tbl.Progress[i], tbl.Remaining[i][k], tbl.Progress[i-1], tbl.Remaining[i-1][k])
			}
		}
		if tbl.Remaining[len(tbl.Progress)-1][k] != 0 {
			t.Errorf("a=%v: C(1) = %s", a, tbl.Remaining[len(tbl.Progress)-1][k])
		}
	}
	for i, p := range tbl.Progress {
		for k := 1; k < len(tbl.Alloc); k++ {
			if float64(tbl.Remaining[i][k]) > 1.05*float64(tbl.Remaining[i][k-1]) {
				t.Errorf("p=%v: C(p, %v)=%s above C(p, %v)=%s", p, tbl.Alloc[k], tbl.Remaining[i][k], tbl.Alloc[k-1], tbl.Remaining[i][k-1])
			}
		}
	}
	// Ideal: all the work over the 4 slots, each a whole core at speed 1.
	work := float64(job.Maps)*job.Map.Mean + float64(job.Reduces)*(job.Shuffle.Mean+job.Reduce.Mean)
	ideal := work / 4
	if got := tbl.Remaining[0][len(tbl.Alloc)-1].Seconds(); got < ideal || got > 1.25*ideal {
		t.Errorf("C(0, 1) = %.1fs, want within 25%% of the ideal %.1fs", got, ideal)
	}
	// A quarter of the host is much slower than the whole of it.
	if q, w := tbl.Remaining[0][0], tbl.Remaining[0][len(tbl.Alloc)-1]; float64(q) < 2.5*float64(w) {
		t.Errorf("C(0, 0.25) = %s, C(0, 1) = %s", q, w)
	}
	if testing.Verbose() {
		for i, p := range tbl.Progress {
			t.Logf("p=%.1f %v", p, tbl.Remaining[i])
		}
	}
	again, err := sim.JockeyTable(job, 2, 2, []float64{1, 0.75, 0.5, 0.25}, 11, 20, 7)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(tbl, again) {
		t.Fatal("two builds with one seed differ")
	}
	other, err := sim.JockeyTable(job, 2, 2, tableAllocs, 11, 20, 8)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(tbl, other) {
		t.Fatal("two seeds gave the same table")
	}
}

func TestJockeyTableBadInput(t *testing.T) {
	job := tableJob()
	noVMs := job
	noVMs.VMs = nil
	for name, build := range map[string]func() (strategies.CTable, error){
		"no allocs":      func() (strategies.CTable, error) { return sim.JockeyTable(job, 2, 2, nil, 11, 2, 1) },
		"alloc 0":        func() (strategies.CTable, error) { return sim.JockeyTable(job, 2, 2, []float64{0, 1}, 11, 2, 1) },
		"alloc negative": func() (strategies.CTable, error) { return sim.JockeyTable(job, 2, 2, []float64{-0.5}, 11, 2, 1) },
		"alloc above 1":  func() (strategies.CTable, error) { return sim.JockeyTable(job, 2, 2, []float64{0.5, 1.5}, 11, 2, 1) },
		"alloc NaN":      func() (strategies.CTable, error) { return sim.JockeyTable(job, 2, 2, []float64{math.NaN()}, 11, 2, 1) },
		"alloc repeated": func() (strategies.CTable, error) { return sim.JockeyTable(job, 2, 2, []float64{0.5, 0.5}, 11, 2, 1) },
		"1 point":        func() (strategies.CTable, error) { return sim.JockeyTable(job, 2, 2, tableAllocs, 1, 2, 1) },
		"0 runs":         func() (strategies.CTable, error) { return sim.JockeyTable(job, 2, 2, tableAllocs, 11, 0, 1) },
		"0 slots":        func() (strategies.CTable, error) { return sim.JockeyTable(job, 0, 2, tableAllocs, 11, 2, 1) },
		"0 cores":        func() (strategies.CTable, error) { return sim.JockeyTable(job, 2, 0, tableAllocs, 11, 2, 1) },
		"no VMs":         func() (strategies.CTable, error) { return sim.JockeyTable(noVMs, 2, 2, tableAllocs, 11, 2, 1) },
	} {
		if _, err := build(); !errors.Is(err, sim.ErrSpec) {
			t.Errorf("%s: %v, want ErrSpec", name, err)
		}
	}
}

// TestJockeyTableDrivesTheController: with the simulated table, Jockey's
// controller asks for more of the hosts for a tighter deadline: a loose
// one is met with a quarter of each host, one just above the whole
// host's predicted time needs all of it.
func TestJockeyTableDrivesTheController(t *testing.T) {
	tbl, err := sim.JockeyTable(tableJob(), 2, 2, tableAllocs, 11, 10, 3)
	if err != nil {
		t.Fatal(err)
	}
	const slack, dz = 1.2, time.Second
	need := func(k int) time.Duration { return dz + time.Duration(slack*float64(tbl.C(0, k))) }
	raw := func(deadline time.Duration) float64 {
		j := &strategies.Jockey{Table: tbl, Deadline: deadline, Slack: slack, DeadZone: dz}
		_, r, err := j.Step(0, 0)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	loose, tight := raw(need(0)+time.Second), raw(need(len(tbl.Alloc)-1)+time.Second)
	if loose != 0.25 || tight != 1 || tight <= loose {
		t.Fatalf("loose deadline %s: %v, tight %s: %v", need(0), loose, need(len(tbl.Alloc)-1), tight)
	}
	// Half way, late: the remaining half at a quarter would miss it.
	j := &strategies.Jockey{Table: tbl, Deadline: need(0) + time.Second, Slack: slack, DeadZone: dz}
	if _, r, _ := j.Step(time.Duration(0.9*float64(tbl.C(0, 0))), 0.5); r <= loose {
		t.Fatalf("behind schedule half way: raw %v, want above %v", r, loose)
	}
}
