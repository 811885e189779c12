package experiments_test

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/mrmarket/mrmarket/hadoopvm/sim/experiments"
)

// TestMRMDeterministicAndSane: one run of each MRM experiment twice gives
// the same means, and the figures are in range.
func TestMRMDeterministicAndSane(t *testing.T) {
	for _, name := range []string{"mrm-pricing", "mrm-baselines"} {
		e, err := experiments.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		if e.Steps(3) != 3 {
			t.Errorf("%s: Steps(3) = %d", name, e.Steps(3))
		}
		var res [2]experiments.Result
		for i := range res {
			steps := 0
			res[i], err = e.Run(context.Background(), experiments.Config{Seed: 7, Runs: 1, Progress: func(d, _ int) { steps = d }})
			if err != nil {
				t.Fatal(err)
			}
			if steps != e.Steps(1) {
				t.Errorf("%s: %d steps, want %d", name, steps, e.Steps(1))
			}
		}
		if len(res[0].Rows) == 0 || len(res[0].Rows) != len(res[1].Rows) {
			t.Fatalf("%s: %d and %d rows", name, len(res[0].Rows), len(res[1].Rows))
		}
		for i, r := range res[0].Rows {
			if r.Mean != res[1].Rows[i].Mean {
				t.Errorf("%s: %s: %v then %v", name, r.Metric, r.Mean, res[1].Rows[i].Mean)
			}
			if math.IsNaN(r.Mean) || math.IsInf(r.Mean, 0) {
				t.Errorf("%s: %s = %v", name, r.Metric, r.Mean)
			}
			switch {
			case strings.Contains(r.Metric, "tardy") || strings.Contains(r.Metric, "violations") || strings.Contains(r.Metric, "DS jobs"):
				if r.Mean < 0 || r.Mean > 100 {
					t.Errorf("%s: %s = %v, not a percentage", name, r.Metric, r.Mean)
				}
			case strings.Contains(r.Metric, "slack"):
				if r.Mean < 0 {
					t.Errorf("%s: %s = %v < 0", name, r.Metric, r.Mean)
				}
			case strings.Contains(r.Metric, "premium"):
				if r.Mean <= 0 {
					t.Errorf("%s: %s = %v ≤ 0", name, r.Metric, r.Mean)
				}
			}
		}
		t.Logf("%s: %d rows in %s", name, len(res[0].Rows), res[0].Wall)
	}
}

// TestMRMConclusionsPerSeed: MRM §6.3's conclusions (Tables 5, 6, 8)
// on each test seed at the high load: a DS user who pays more (larger α)
// pays a larger premium and buys less slack, and more of the jobs are
// tardy — never fewer — as α grows. Mutation that fails it: Eq. 13's
// first term without the slack (a deadline costs κ·p however far it is),
// so buying less slack costs nothing more.
func TestMRMConclusionsPerSeed(t *testing.T) {
	alphas := []string{"1.1", "1.5", "2"}
	perSeed(t, "mrm-pricing", 1, map[string]string{"alpha": strings.Join(alphas, ","), "gap": "50"}, func(seed uint64, res experiments.Result) {
		var prem, slack, tardy []float64
		for _, a := range alphas {
			tag := ", α=" + a + ", H (50 s)"
			prem = append(prem, metric(t, res, "median DS premium (price/p)"+tag))
			slack = append(slack, metric(t, res, "median DS slack"+tag))
			tardy = append(tardy, metric(t, res, "tardy jobs"+tag))
		}
		for i := 1; i < len(alphas); i++ {
			if !(prem[i] > prem[i-1]) {
				t.Errorf("seed %d: DS premium %v is not rising with α %v", seed, prem, alphas)
			}
			if !(slack[i] < slack[i-1]) {
				t.Errorf("seed %d: DS slack %v is not falling with α %v", seed, slack, alphas)
			}
			if tardy[i] < tardy[i-1] {
				t.Errorf("seed %d: tardy jobs %v fall as α %v grows", seed, tardy, alphas)
			}
		}
	})
}

// TestMRMBaselinesConclusionsPerSeed: MRM's §1 and §6.3 on each test seed
// at 40 s between arrivals (three traces of 1,000 jobs): under MRM a good
// part of the delay-sensitive jobs jump ahead of earlier ones (the paper:
// 35 %) while the deadline violations stay those of FCFS — delay-tolerant
// and delay-sensitive jobs each miss no more than a tenth of a point more
// than under FCFS (§1: "comparable to that of the FCFS scheduler"); the
// priority scheduler misses over 30 % of the delay-tolerant jobs'.
// Mutation that fails it: MRMPrice without its second term (the charge
// for the slack taken from the jobs jumped over, Eq. 13): delay-sensitive
// jobs then take each other's slack for free and miss 0.4–0.8 % of their
// deadlines against FCFS's 0–0.1 % (tuning and test seeds).
func TestMRMBaselinesConclusionsPerSeed(t *testing.T) {
	perSeed(t, "mrm-baselines", 3, map[string]string{"gap": "40", "jobs": "1000"}, func(seed uint64, res experiments.Result) {
		prio := metric(t, res, "deadline violations, DT jobs, priority, 40 s")
		jump := metric(t, res, "DS jobs finishing ahead of an earlier job, MRM, 40 s")
		for _, class := range []string{"DS", "DT"} {
			mrm := metric(t, res, "deadline violations, "+class+" jobs, MRM, 40 s")
			fcfs := metric(t, res, "deadline violations, "+class+" jobs, FCFS, 40 s")
			if mrm > fcfs+0.1 {
				t.Errorf("seed %d: MRM misses %.2f %% of %s deadlines, FCFS %.2f %%", seed, mrm, class, fcfs)
			}
		}
		if prio <= 30 {
			t.Errorf("seed %d: priority misses only %.2f %% of DT deadlines (the paper: over 30 %%)", seed, prio)
		}
		if jump < 20 {
			t.Errorf("seed %d: only %.1f %% of DS jobs jump ahead under MRM (the paper: 35.4 %%)", seed, jump)
		}
	})
}
