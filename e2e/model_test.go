package e2e

import (
	"math"
	"testing"
)

func TestModel(t *testing.T) {
	cpu := func(w float64) []phase { return []phase{{"cpu", w, nil}} }
	on := func(ph []phase, r string, q float64) flow { return flow{phases: ph, shares: map[string]float64{r: q}} }
	for _, c := range []struct {
		name   string
		jobs   []flow
		ratios float64 // end[1]/end[0]
	}{
		{"3:1 one phase", []flow{on(cpu(10), "cpu", 0.75), on(cpu(10), "cpu", 0.25)}, 1.5},
		{"1:1 one phase", []flow{on(cpu(10), "cpu", 0.5), on(cpu(10), "cpu", 0.5)}, 1},
		{"3:1 phases on one resource", []flow{on([]phase{{"cpu", 4, nil}, {"cpu", 6, nil}}, "cpu", 3), on([]phase{{"cpu", 4, nil}, {"cpu", 6, nil}}, "cpu", 1)}, 1.5},
		// Alone on different resources, neither slows the other.
		{"disjoint", []flow{on([]phase{{"cpu", 10, nil}}, "cpu", 0.75), on([]phase{{"net", 10, nil}}, "net", 0.25)}, 1},
	} {
		end := finishes(c.jobs)
		if got := end[1] / end[0]; math.Abs(got-c.ratios) > 1e-9 {
			t.Errorf("%s: ends %v, ratio %v, want %v", c.name, end, got, c.ratios)
		}
	}
	// A job on the CPU then the link against one on the CPU: the second
	// has the CPU alone once the first moves on.
	end := finishes([]flow{{phases: []phase{{"cpu", 3, nil}, {"net", 3, nil}}, shares: map[string]float64{"cpu": 0.75, "net": 0.75}},
		on(cpu(6), "cpu", 0.25)})
	// The first: 3/0.75 = 4 s on the CPU, the second done 1 s of its 6
	// by then and alone after: 4 + 5 = 9; the first 4 + 3 = 7.
	if math.Abs(end[0]-7) > 1e-9 || math.Abs(end[1]-9) > 1e-9 {
		t.Errorf("cpu then net: ends %v, want [7 9]", end)
	}
	// A phase on the link that keeps 0.4 of its CPU busy, against a job on
	// that CPU. At CPU shares 3:1 the first takes the 0.4 it can use and
	// the second the 0.6 left: it ends at 4/0.6; the first, never held
	// back, at 10. At 1:3 the first has 0.25 of the CPU and so goes at
	// 0.25/0.4 of its speed, the second at 0.75 (its share; it cannot use
	// what the first leaves of the link) and ends at 4/0.75; the first has
	// then 10 - 0.625·16/3 left, alone: it ends at 12.
	moves := []phase{{"net", 10, map[string]float64{"cpu": 0.4}}}
	for _, c := range []struct {
		name       string
		cpuA, cpuB float64
		want       [2]float64
	}{{"3:1", 0.75, 0.25, [2]float64{10, 4 / 0.6}}, {"1:3", 0.25, 0.75, [2]float64{12, 4 / 0.75}}} {
		end := finishes([]flow{{phases: moves, shares: map[string]float64{"net": 0.5, "cpu": c.cpuA}},
			{phases: cpu(4), shares: map[string]float64{"net": 0.5, "cpu": c.cpuB}}})
		if math.Abs(end[0]-c.want[0]) > 1e-9 || math.Abs(end[1]-c.want[1]) > 1e-9 {
			t.Errorf("a phase using a second resource, CPU shares %s: ends %v, want %v", c.name, end, c.want)
		}
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
