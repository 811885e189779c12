package strategies_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mrmarket/mrmarket/strategies"
)

// TestOverlapFig2 is Lin et al.'s Fig. 2: jobs (1,2), (3,1), (2,2) served
// first come first served finish at 2, 4 and 6.
func TestOverlapFig2(t *testing.T) {
	jobs := []strategies.OverlapJob{{Map: 1, Shuffle: 2}, {Map: 3, Shuffle: 1}, {Map: 2, Shuffle: 2}}
	got, err := strategies.SimulateOverlap(jobs, strategies.PolicyFIFO)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []float64{2, 4, 6} {
		if math.Abs(got[i]-want) > 1e-9 {
			t.Fatalf("completions %v, want 2, 4, 6", got)
		}
	}
}

// TestOverlapPolicies: on random batches every policy finishes every job no
// earlier than its own work allows, and the SRPT-based policies beat
// k-LPS's mean response time, as in Lin et al. §6.
func TestOverlapPolicies(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	mean := map[string]float64{}
	for range 50 {
		var jobs []strategies.OverlapJob
		at := 0.0
		for range 30 {
			at += rng.ExpFloat64() * 1.3
			x := math.Exp(rng.NormFloat64())
			jobs = append(jobs, strategies.OverlapJob{Release: at, Map: x, Shuffle: x * math.Exp(rng.NormFloat64())})
		}
		for _, p := range []string{strategies.PolicyFIFO, strategies.PolicyMaxSRPT, strategies.PolicySplitSRPT, strategies.PolicyKLPS} {
			done, err := strategies.SimulateOverlap(jobs, p)
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			for i, j := range jobs {
				if done[i] < j.Release+math.Max(j.Map, j.Shuffle)-1e-9 {
					t.Fatalf("%s: job %d done at %v, before its work allows", p, i, done[i])
				}
				mean[p] += done[i] - j.Release
			}
		}
	}
	t.Logf("mean response (sum over runs): %v", mean)
	if !(mean[strategies.PolicyMaxSRPT] < mean[strategies.PolicyKLPS] && mean[strategies.PolicySplitSRPT] < mean[strategies.PolicyKLPS]) {
		t.Fatalf("SRPT policies do not beat k-LPS: %v", mean)
	}
	if _, err := strategies.SimulateOverlap(nil, "lifo"); err == nil {
		t.Fatal("unknown policy accepted")
	}
}

var overlapPolicies = []string{strategies.PolicyFIFO, strategies.PolicyMaxSRPT, strategies.PolicySplitSRPT, strategies.PolicyKLPS}

// meanResponse is the mean of completion − release under policy.
func meanResponse(t *testing.T, jobs []strategies.OverlapJob, policy string) float64 {
	t.Helper()
	done, err := strategies.SimulateOverlap(jobs, policy)
	if err != nil {
		t.Fatalf("%s: %v", policy, err)
	}
	sum := 0.0
	for i, j := range jobs {
		sum += done[i] - j.Release
	}
	return sum / float64(len(jobs))
}

// TestOverlapLowerBoundFig2: on Fig. 2's jobs SRPT on the map sizes 1, 3, 2
// gives 1 + 3 + 6 = 10 and on the shuffle sizes 2, 1, 2 gives 3 + 1 + 5 = 9,
// one busy period, so the bound is 10/3, below every policy (FIFO: 4).
func TestOverlapLowerBoundFig2(t *testing.T) {
	jobs := []strategies.OverlapJob{{Map: 1, Shuffle: 2}, {Map: 3, Shuffle: 1}, {Map: 2, Shuffle: 2}}
	lb, err := strategies.OverlapLowerBound(jobs)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(lb-10.0/3) > 1e-12 {
		t.Fatalf("bound %v, want 10/3", lb)
	}
	for _, p := range overlapPolicies {
		if m := meanResponse(t, jobs, p); lb > m+1e-9 {
			t.Fatalf("%s: mean response %v below the bound %v", p, m, lb)
		}
	}
}

// TestOverlapLowerBoundRandom: on random instances the bound is never above
// any policy's mean response.
func TestOverlapLowerBoundRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	closest := math.Inf(1) // the least mean response / bound seen
	for run := range 200 {
		var jobs []strategies.OverlapJob
		at := 0.0
		for range 1 + rng.IntN(30) {
			at += rng.ExpFloat64() * 1.5
			x := math.Exp(rng.NormFloat64())
			jobs = append(jobs, strategies.OverlapJob{Release: at, Map: x, Shuffle: x * math.Exp(rng.NormFloat64())})
		}
		lb, err := strategies.OverlapLowerBound(jobs)
		if err != nil {
			t.Fatal(err)
		}
		if lb <= 0 {
			t.Fatalf("run %d: bound %v, want > 0", run, lb)
		}
		for _, p := range overlapPolicies {
			if m := meanResponse(t, jobs, p); lb > m+1e-9 {
				t.Fatalf("run %d, %s: mean response %v below the bound %v", run, p, m, lb)
			} else {
				closest = math.Min(closest, m/lb)
			}
		}
	}
	t.Logf("least mean response / bound: %v", closest)
}

// TestOverlapLowerBoundSingleStation: with map work only, sizes 1, 2, 3
// released at 0, the bound is SRPT's (1 + 3 + 6)/3 = 10/3, and MaxSRPT
// (which cannot run a job without shuffle work, so given a negligible one)
// achieves it.
func TestOverlapLowerBoundSingleStation(t *testing.T) {
	jobs := []strategies.OverlapJob{{Map: 3}, {Map: 1}, {Map: 2}}
	lb, err := strategies.OverlapLowerBound(jobs)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(lb-10.0/3) > 1e-12 {
		t.Fatalf("bound %v, want 10/3", lb)
	}
	for i := range jobs {
		jobs[i].Shuffle = 1e-12
	}
	if lb2, err := strategies.OverlapLowerBound(jobs); err != nil || math.Abs(lb2-lb) > 1e-12 {
		t.Fatalf("bound with negligible shuffles %v, %v; want %v", lb2, err, lb)
	}
	if m := meanResponse(t, jobs, strategies.PolicyMaxSRPT); math.Abs(m-lb) > 1e-9 {
		t.Fatalf("MaxSRPT mean response %v, want the bound %v", m, lb)
	}
}

// TestOverlapLowerBoundBusyPeriods: the bound takes the larger station per
// busy period, not over the whole run. A map-only job at 0 and a
// shuffle-only job at 5 give totals 1 and 1 on the two stations; per period
// the bound is (1 + 1)/2 = 1, not max(1, 1)/2.
func TestOverlapLowerBoundBusyPeriods(t *testing.T) {
	lb, err := strategies.OverlapLowerBound([]strategies.OverlapJob{{Map: 1}, {Release: 5, Shuffle: 1}})
	if err != nil || math.Abs(lb-1) > 1e-12 {
		t.Fatalf("bound %v, %v; want 1", lb, err)
	}
	// Preemption: a long job at 0 and a short one at 1 on the map station
	// finish at 1+1=2 and 5: responses 1 and 5, mean 3.
	lb, err = strategies.OverlapLowerBound([]strategies.OverlapJob{{Map: 4}, {Release: 1, Map: 1}})
	if err != nil || math.Abs(lb-3) > 1e-12 {
		t.Fatalf("bound %v, %v; want 3", lb, err)
	}
	if lb, err := strategies.OverlapLowerBound(nil); err != nil || lb != 0 {
		t.Fatalf("no jobs: %v, %v", lb, err)
	}
}

// TestOverlapLowerBoundInvalid: negative, NaN and infinite inputs wrap
// ErrOverlapJob, as SimulateOverlap's do.
func TestOverlapLowerBoundInvalid(t *testing.T) {
	for _, j := range []strategies.OverlapJob{
		{Map: -1, Shuffle: 1},
		{Map: 1, Shuffle: math.NaN()},
		{Release: math.NaN(), Map: 1, Shuffle: 1},
		{Release: -1, Map: 1, Shuffle: 1},
		{Map: math.Inf(1), Shuffle: 1},
	} {
		jobs := []strategies.OverlapJob{{Map: 1, Shuffle: 1}, j}
		if _, err := strategies.OverlapLowerBound(jobs); !errors.Is(err, strategies.ErrOverlapJob) {
			t.Errorf("OverlapLowerBound(%v): %v, want ErrOverlapJob", j, err)
		}
		if _, err := strategies.SimulateOverlap(jobs, strategies.PolicyMaxSRPT); !errors.Is(err, strategies.ErrOverlapJob) {
			t.Errorf("SimulateOverlap(%v): %v, want ErrOverlapJob", j, err)
		}
	}
	if _, err := strategies.SimulateOverlap([]strategies.OverlapJob{{Map: 1}}, strategies.PolicyFIFO); !errors.Is(err, strategies.ErrOverlapJob) {
		t.Errorf("SimulateOverlap without shuffle work: %v, want ErrOverlapJob", err)
	}
}

// TestOverlapRatesArePolicies: at one moment, MaxSRPT gives the map station
// to the job with the least max(map, shuffle) left, FIFO to the oldest,
// k-LPS shares it, and no station is given more than its capacity.
func TestOverlapRatesArePolicies(t *testing.T) {
	jobs := []strategies.OverlapNow{
		{OverlapJob: strategies.OverlapJob{Release: 0, Map: 10, Shuffle: 10}, MapLeft: 8, ShuffleLeft: 9},
		{OverlapJob: strategies.OverlapJob{Release: 1, Map: 2, Shuffle: 1}, MapLeft: 2, ShuffleLeft: 1},
		{OverlapJob: strategies.OverlapJob{Release: 2, Map: 4, Shuffle: 0}, MapLeft: 4, ShuffleLeft: 0},
	}
	check := func(policy string) ([]float64, []float64) {
		m, s, err := strategies.OverlapRates(jobs, policy)
		if err != nil {
			t.Fatal(err)
		}
		var sm, ss float64
		for i := range m {
			sm, ss = sm+m[i], ss+s[i]
		}
		if sm > 1+1e-9 || ss > 1+1e-9 {
			t.Fatalf("%s: stations over capacity: %v %v", policy, m, s)
		}
		return m, s
	}
	if m, _ := check(strategies.PolicyMaxSRPT); m[1] != 1 {
		t.Errorf("MaxSRPT: map rates %v, want all to job 1", m)
	}
	if m, _ := check(strategies.PolicyFIFO); m[0] != 1 {
		t.Errorf("FIFO: map rates %v, want all to job 0", m)
	}
	if m, _ := check(strategies.PolicyKLPS); math.Abs(m[0]-1.0/3) > 1e-9 || math.Abs(m[2]-1.0/3) > 1e-9 {
		t.Errorf("k-LPS: map rates %v, want a third each", m)
	}
	check(strategies.PolicySplitSRPT)
	if _, _, err := strategies.OverlapRates(jobs, "lottery"); !errors.Is(err, strategies.ErrOverlapJob) {
		t.Errorf("unknown policy: %v", err)
	}
	bad := []strategies.OverlapNow{{OverlapJob: strategies.OverlapJob{Map: 1, Shuffle: 1}, MapLeft: 2}}
	if _, _, err := strategies.OverlapRates(bad, strategies.PolicyMaxSRPT); !errors.Is(err, strategies.ErrOverlapJob) {
		t.Errorf("more left than the job has: %v", err)
	}
}

// TestSplitSRPTIsWorkConserving: the paper's stations are work-conserving
// servers. With only map-heavy jobs present, SplitSRPT gives the whole map
// station to the one with the least map left (not just the class's μ2),
// and a shuffle-heavy job alone gets the whole shuffle station once its
// map is done. The literal reading of Algorithm 2 leaves the other class's
// part idle and takes longer on the same jobs.
func TestSplitSRPTIsWorkConserving(t *testing.T) {
	mapHeavy := []strategies.OverlapNow{
		{OverlapJob: strategies.OverlapJob{Map: 4, Shuffle: 1}, MapLeft: 4, ShuffleLeft: 1},
		{OverlapJob: strategies.OverlapJob{Map: 3, Shuffle: 1}, MapLeft: 2, ShuffleLeft: 1},
	}
	m, _, err := strategies.OverlapRates(mapHeavy, strategies.PolicySplitSRPT)
	if err != nil {
		t.Fatal(err)
	}
	if m[0] != 0 || math.Abs(m[1]-1) > 1e-12 {
		t.Fatalf("map rates %v, want all of the station to job 1 (SRPT on map left)", m)
	}
	shuffleHeavy := []strategies.OverlapNow{{OverlapJob: strategies.OverlapJob{Map: 1, Shuffle: 4}, MapLeft: 0, ShuffleLeft: 3}}
	if _, s, err := strategies.OverlapRates(shuffleHeavy, strategies.PolicySplitSRPT); err != nil || math.Abs(s[0]-1) > 1e-12 {
		t.Fatalf("shuffle rates %v (%v), want the whole station", s, err)
	}
	jobs := []strategies.OverlapJob{{Release: 0, Map: 4, Shuffle: 1}, {Release: 0, Map: 3, Shuffle: 1}, {Release: 1, Map: 1, Shuffle: 5}}
	sum := func(policy string) float64 {
		done, err := strategies.SimulateOverlap(jobs, policy)
		if err != nil {
			t.Fatal(err)
		}
		total := 0.0
		for i, d := range done {
			total += d - jobs[i].Release
		}
		return total
	}
	if wc, lit := sum(strategies.PolicySplitSRPT), sum(strategies.PolicySplitSRPTLiteral); !(wc < lit) {
		t.Fatalf("total response: work-conserving %v, literal %v", wc, lit)
	}
}
