package e2e

import (
	"math"
	"testing"
)

func TestModel(t *testing.T) {
	cpu := func(w float64) []phase { return []phase{{"cpu", w}} }
	on := func(ph []phase, r string, q float64) flow { return flow{phases: ph, shares: map[string]float64{r: q}} }
	for _, c := range []struct {
		name   string
		jobs   []flow
		ratios float64 // end[1]/end[0]
	}{
		{"3:1 one phase", []flow{on(cpu(10), "cpu", 0.75), on(cpu(10), "cpu", 0.25)}, 1.5},
		{"1:1 one phase", []flow{on(cpu(10), "cpu", 0.5), on(cpu(10), "cpu", 0.5)}, 1},
		{"3:1 phases on one resource", []flow{on([]phase{{"cpu", 4}, {"cpu", 6}}, "cpu", 3), on([]phase{{"cpu", 4}, {"cpu", 6}}, "cpu", 1)}, 1.5},
		// Alone on different resources, neither slows the other.
		{"disjoint", []flow{on([]phase{{"cpu", 10}}, "cpu", 0.75), on([]phase{{"net", 10}}, "net", 0.25)}, 1},
	} {
		end := finishes(c.jobs)
		if got := end[1] / end[0]; math.Abs(got-c.ratios) > 1e-9 {
			t.Errorf("%s: ends %v, ratio %v, want %v", c.name, end, got, c.ratios)
		}
	}
	// A job on the CPU then the link against one on the CPU: the second
	// has the CPU alone once the first moves on.
	end := finishes([]flow{{phases: []phase{{"cpu", 3}, {"net", 3}}, shares: map[string]float64{"cpu": 0.75, "net": 0.75}},
		on(cpu(6), "cpu", 0.25)})
	// The first: 3/0.75 = 4 s on the CPU, the second done 1 s of its 6
	// by then and alone after: 4 + 5 = 9; the first 4 + 3 = 7.
	if math.Abs(end[0]-7) > 1e-9 || math.Abs(end[1]-9) > 1e-9 {
		t.Errorf("cpu then net: ends %v, want [7 9]", end)
	}
	// A top-up: the second job's share goes from 1 to 3 (against 3) at
	// 4 s. Until then the jobs do 3 and 1 of their 10; then half the
	// resource each: the first ends at 4 + 7/0.5 = 18, when the second
	// has 9 - 7 = 2 left, done alone by 20.
	topUp := []flow{on(cpu(10), "cpu", 3), on(cpu(10), "cpu", 1)}
	topUp[1].changes = []change{{4, map[string]float64{"cpu": 3}}}
	end = finishes(topUp)
	if math.Abs(end[0]-18) > 1e-9 || math.Abs(end[1]-20) > 1e-9 {
		t.Errorf("top-up: ends %v, want [18 20]", end)
	}
	// calibrate finds the work back from a finish, of equal jobs or of
	// one against a job of known work.
	for i := range topUp {
		topUp[i].phases = nil
	}
	if w := calibrate(topUp, 0, "cpu", 18); math.Abs(w-10) > 1e-6 {
		t.Errorf("calibrate: %v, want 10", w)
	}
	topUp[1].phases = cpu(10)
	if w := calibrate(topUp, 0, "cpu", 18); math.Abs(w-10) > 1e-6 {
		t.Errorf("calibrate against a known job: %v, want 10", w)
	}
}
