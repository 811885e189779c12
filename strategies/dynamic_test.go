package strategies_test

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"gonum.org/v1/gonum/optimize"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/strategies"
)

func TestWeightSplitIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	for range 2000 {
		n := 1 + rng.IntN(20)
		ws := make([]float64, n)
		for i := range ws {
			ws[i] = rng.Float64() * 100
			if rng.IntN(5) == 0 {
				ws[i] = 0
			}
		}
		ws[rng.IntN(n)] = 1 + rng.Float64() // not all zero
		total := money.Micro(rng.Int64N(int64(money.Max)))
		parts, err := strategies.WeightSplit(total, ws)
		if err != nil {
			t.Fatal(err)
		}
		var sum money.Micro
		wsum := new(big.Rat)
		for _, w := range ws {
			wsum.Add(wsum, new(big.Rat).SetFloat64(w))
		}
		for i, p := range parts {
			sum += p
			exact := new(big.Rat).Mul(new(big.Rat).SetInt64(int64(total)), new(big.Rat).SetFloat64(ws[i]))
			exact.Quo(exact, wsum)
			diff := new(big.Rat).Sub(new(big.Rat).SetInt64(int64(p)), exact)
			if diff.Abs(diff).Cmp(big.NewRat(1, 1)) >= 0 {
				t.Fatalf("part %d = %d, exact %s", i, p, exact.FloatString(3))
			}
			if ws[i] == 0 && p != 0 {
				t.Fatalf("a zero weight got %d", p)
			}
		}
		if sum != total {
			t.Fatalf("parts sum to %d, not %d", sum, total)
		}
	}
	for _, bad := range [][]float64{nil, {0, 0}, {-1, 2}, {math.NaN()}, {math.Inf(1)}} {
		if _, err := strategies.WeightSplit(100, bad); !errors.Is(err, strategies.ErrWeights) {
			t.Errorf("weights %v: %v", bad, err)
		}
	}
}

func TestWorkflowPriority(t *testing.T) {
	wfs := []strategies.Workflow{
		{Name: "high", Weight: 1, Stages: []strategies.Stage{{VMs: []strategies.VM{{Name: "a1", Host: "h1"}, {Name: "a2", Host: "h2"}}}}},
		{Name: "low", Weight: 0.5, Stages: []strategies.Stage{{VMs: []strategies.VM{{Name: "b1", Host: "h1"}, {Name: "b2", Host: "h2"}}}}},
	}
	d := strategies.WorkflowPriority{}.Allocate(strategies.Snapshot{Remaining: 3_000_001, Left: time.Hour, Workflows: wfs, Stage: []int{0, 0}})
	got := map[string]money.Micro{}
	var sum money.Micro
	for _, a := range d.Allocs {
		got[a.VM] = a.Budget
		sum += a.Budget
	}
	if sum != 3_000_001 || got["a1"]+got["a2"] != 2_000_001 || got["b1"] != 500_000 {
		t.Fatalf("allocations %v", got)
	}
}

// TestStagePrioritySpendsTheBudget: stages of equal length spend their
// weighted parts, and the whole budget is spent by the end — under Eq. 9's
// fixed split and under stage-carry alike.
func TestStagePrioritySpendsTheBudget(t *testing.T) {
	for _, p := range []strategies.StagePriority{{}, {Carry: true}} {
		t.Run(p.Name(), func(t *testing.T) { stagesOfEqualLength(t, p) })
	}
}

func stagesOfEqualLength(t *testing.T, p strategies.StagePriority) {
	stages := []strategies.Stage{
		{Name: "join", Weight: 20, VMs: []strategies.VM{{Name: "a"}, {Name: "b"}}},
		{Name: "dist", Weight: 1, VMs: []strategies.VM{{Name: "a"}}},
		{Name: "pearson", Weight: 1, VMs: []strategies.VM{{Name: "b"}, {Name: "c"}}},
	}
	budget, d := money.Micro(2_200_000), 3*time.Hour
	remaining, left := budget, d
	var spent float64
	for s := range stages {
		dec := p.Allocate(strategies.Snapshot{Remaining: remaining, Left: left, Budget: budget, Duration: d,
			Workflows: []strategies.Workflow{{Name: "w", Weight: 1, Stages: stages}}, Stage: []int{s}})
		if !slices.Equal(dec.Stage, []int{s}) {
			t.Fatalf("stage %d moved to %v", s, dec.Stage)
		}
		// Each stage spends its part over its slice of the time left: an hour.
		var cost float64
		for _, a := range dec.Allocs {
			if math.Abs((a.Duration - time.Hour).Seconds()) > 1e-6 {
				t.Fatalf("stage %d spends over %s", s, a.Duration)
			}
			cost += float64(a.Budget)
		}
		spent += cost
		remaining -= money.Micro(math.Round(cost))
		left -= time.Hour
		want := []float64{2_000_000, 100_000, 100_000}[s]
		if math.Abs(cost-want) > 1 {
			t.Fatalf("stage %d spent %v, want %v", s, cost, want)
		}
	}
	if math.Abs(spent-float64(budget)) > 2 {
		t.Fatalf("spent %v of %d", spent, budget)
	}
}

// TestStagePriorityFixedSplit: under Eq. 9 a stage's part is its own. The
// boosted first stage (weight 20 of 22) ends after half an hour having
// spent 1.0 of its 2.0: the next stage still spends its own part at its
// own rate (0.1 over an hour's slice: the flat rate), and the 1.0 left by
// the first stage is not spent on it — while stage-carry re-splits what is
// left over the stages left and the second stage spends 0.6 over 1h15m,
// 4.8 times as fast. A stage that runs long keeps its rate but never eats
// the later stages' parts.
func TestStagePriorityFixedSplit(t *testing.T) {
	stages := []strategies.Stage{
		{Name: "join", Weight: 20, VMs: []strategies.VM{{Name: "a"}}},
		{Name: "dist", Weight: 1, VMs: []strategies.VM{{Name: "b"}}},
		{Name: "pearson", Weight: 1, VMs: []strategies.VM{{Name: "c"}}},
	}
	budget, d := money.Micro(2_200_000), 3*time.Hour
	snap := func(remaining money.Micro, left time.Duration, stage int) strategies.Snapshot {
		return strategies.Snapshot{Remaining: remaining, Left: left, Budget: budget, Duration: d,
			Workflows: []strategies.Workflow{{Name: "w", Weight: 1, Stages: stages}}, Stage: []int{stage}}
	}
	rate := func(dec strategies.Decision) (float64, money.Micro) {
		if len(dec.Allocs) != 1 {
			t.Fatalf("allocations %v", dec.Allocs)
		}
		a := dec.Allocs[0]
		return float64(a.Budget) / a.Duration.Seconds(), a.Budget
	}
	fixed, _ := rate(strategies.StagePriority{}.Allocate(snap(1_200_000, d-30*time.Minute, 1)))
	if want := 100_000.0 / 3600; math.Abs(fixed-want) > 1e-6 {
		t.Errorf("Eq. 9: dist spends %v µ/s, want its part over its slice, %v", fixed, want)
	}
	carry, _ := rate(strategies.StagePriority{Carry: true}.Allocate(snap(1_200_000, d-30*time.Minute, 1)))
	if want := 600_000.0 / 4500; math.Abs(carry-want) > 1e-6 {
		t.Errorf("stage-carry: dist spends %v µ/s, want %v", carry, want)
	}
	// join still running at 2h30m with 1.0 left: at its own rate, but only
	// what is not the later stages' (0.2).
	r, committed := rate(strategies.StagePriority{}.Allocate(snap(1_000_000, 30*time.Minute, 0)))
	if want := 2_000_000.0 / 3600; math.Abs(r-want) > 1e-6 || committed != 800_000 {
		t.Errorf("a long join: %v µ/s committing %v, want %v µ/s and at most 0.8", r, committed, want)
	}
	// Nothing left but the later stages' parts: nothing to spend.
	if dec := (strategies.StagePriority{}).Allocate(snap(200_000, time.Hour, 0)); len(dec.Allocs) != 0 {
		t.Errorf("join spent the later stages' parts: %v", dec.Allocs)
	}
}

// TestBottleneckKeepsTheMeanRate is Eq. 10: the mean spending over all VMs
// is the flat rate when any VM is active, and below it when all are idle.
func TestBottleneckKeepsTheMeanRate(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for range 1000 {
		n := 1 + rng.IntN(30)
		vms := make([]string, n)
		idle := map[string]bool{}
		for i := range vms {
			vms[i] = fmt.Sprint("vm", i)
			idle[vms[i]] = rng.IntN(2) == 0
		}
		f := rng.Float64() * 0.99
		rates, err := strategies.BottleneckElimination{Boost: f}.Rates(100, vms, idle)
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		allIdle := true
		for _, vm := range vms {
			sum += rates[vm]
			allIdle = allIdle && idle[vm]
			if idle[vm] && math.Abs(rates[vm]-100*(1-f)) > 1e-9 {
				t.Fatalf("idle VM rate %v", rates[vm])
			}
		}
		mean := sum / float64(n)
		if allIdle && math.Abs(mean-100*(1-f)) > 1e-9 || !allIdle && math.Abs(mean-100) > 1e-9 {
			t.Fatalf("mean rate %v (all idle %v, f %v)", mean, allIdle, f)
		}
	}
	if _, err := (strategies.BottleneckElimination{Boost: 1}).Rates(1, []string{"a"}, nil); err == nil {
		t.Fatal("boost 1 accepted")
	}
	if got := strategies.CapBoosts([]float64{0.9, 0.9}, 0.9); got[0] != 0.45 || got[1] != 0.45 {
		t.Fatalf("two strategic users at 0.9 each under a 0.9 cap: %v", got)
	}
	if got := strategies.CapBoosts([]float64{0.9, 0}, 0.9); got[0] != 0.9 {
		t.Fatalf("one strategic user: %v", got)
	}
}

// numericBestResponse maximises the utility over the simplex Σx = X, x ≥ 0
// with gonum's Nelder-Mead on a softmax parametrisation: the oracle the
// closed form is checked against.
func numericBestResponse(rate float64, hosts []strategies.HostPrice) map[string]float64 {
	n := len(hosts)
	xs := func(z []float64) map[string]float64 {
		m := z[0]
		for _, v := range z {
			m = max(m, v)
		}
		var s float64
		e := make([]float64, n)
		for i, v := range z {
			e[i] = math.Exp(v - m)
			s += e[i]
		}
		out := map[string]float64{}
		for i, h := range hosts {
			out[h.Host] = rate * e[i] / s
		}
		return out
	}
	best := math.Inf(1)
	var bestZ []float64
	for start := range 4 { // a few starts: softmax flattens corners
		z0 := make([]float64, n)
		for i := range z0 {
			z0[i] = float64((i*7+start*3)%5) - 2
		}
		res, err := optimize.Minimize(optimize.Problem{Func: func(z []float64) float64 { return -strategies.Utility(xs(z), hosts) }},
			z0, &optimize.Settings{FuncEvaluations: 40000}, &optimize.NelderMead{})
		if err == nil && res.F < best {
			best, bestZ = res.F, res.X
		}
	}
	return xs(bestZ)
}

func TestBestResponseMatchesANumericOptimiser(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for trial := range 60 {
		n := 2 + rng.IntN(4)
		hosts := make([]strategies.HostPrice, n)
		for i := range hosts {
			hosts[i] = strategies.HostPrice{Host: fmt.Sprint("h", i), Price: 0.1 + rng.Float64()*10, Weight: 0.1 + rng.Float64()*3}
		}
		rate := 0.1 + rng.Float64()*20
		closed, err := strategies.BestResponse{}.Rates(rate, hosts)
		if err != nil {
			t.Fatal(err)
		}
		var sum float64
		for _, x := range closed {
			if x < 0 {
				t.Fatalf("negative bid %v", closed)
			}
			sum += x
		}
		if math.Abs(sum-rate) > 1e-9*rate {
			t.Fatalf("trial %d: bids sum to %v, not %v", trial, sum, rate)
		}
		uc, un := strategies.Utility(closed, hosts), strategies.Utility(numericBestResponse(rate, hosts), hosts)
		if uc < un-1e-6*max(1, un) {
			t.Fatalf("trial %d: closed form utility %v below the numeric optimum %v (%v)", trial, uc, un, hosts)
		}
		// And the oracle is a real one: it finds (nearly) the same optimum.
		if un < uc-1e-3*uc {
			t.Fatalf("trial %d: the numeric optimiser only reached %v of %v", trial, un, uc)
		}
	}
}

func TestBestResponseEdges(t *testing.T) {
	br := strategies.BestResponse{}
	// A free host gets only ε; the rest goes to the priced one.
	x, err := br.Rates(10, []strategies.HostPrice{{Host: "free", Price: 0, Weight: 1}, {Host: "busy", Price: 5, Weight: 1}})
	if err != nil || math.Abs(x["free"]-10*strategies.Epsilon) > 1e-15 || math.Abs(x["busy"]-(10-10*strategies.Epsilon)) > 1e-9 {
		t.Fatalf("free and busy: %v %v", x, err)
	}
	// A host worth nothing gets nothing; an expensive, little-valued one is dropped.
	x, _ = br.Rates(1, []strategies.HostPrice{{Host: "a", Price: 1, Weight: 1}, {Host: "zero", Price: 1, Weight: 0}, {Host: "dear", Price: 1000, Weight: 0.01}})
	if x["zero"] != 0 || x["dear"] != 0 || math.Abs(x["a"]-1) > 1e-12 {
		t.Fatalf("drops: %v", x)
	}
	if _, err := br.Rates(0, nil); !errors.Is(err, strategies.ErrBestResponse) {
		t.Fatal("zero rate accepted")
	}
	if _, err := br.Rates(1, []strategies.HostPrice{{Host: "a", Price: -1, Weight: 1}}); !errors.Is(err, strategies.ErrBestResponse) {
		t.Fatal("negative price accepted")
	}
}

func TestPredictionQueriesAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var s strategies.PriceStats
	var sum, sumsq float64
	for range 5000 {
		y := 50 + rng.NormFloat64()*10
		s.Observe(y)
		sum += y
		sumsq += y * y
	}
	mean := sum / 5000
	sd := math.Sqrt((sumsq - 5000*mean*mean) / 4999)
	if math.Abs(s.Mean-mean) > 1e-9 || math.Abs(s.StdDev()-sd) > 1e-6 {
		t.Fatalf("moments %v %v, want %v %v", s.Mean, s.StdDev(), mean, sd)
	}
	d, err := s.Dist()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []float64{0.5, 0.9, 0.99} {
		for _, q := range []float64{0.1, 0.5, 0.8} {
			x := d.GetPrice(q, g)
			if p := d.GetPerformance(x, g); math.Abs(p-q) > 1e-9 {
				t.Fatalf("get_performance(get_price(%v, %v)) = %v", q, g, p)
			}
			if gg := d.GetGuarantee(x, q); math.Abs(gg-g) > 1e-6 {
				t.Fatalf("get_guarantee(get_price(%v, %v)) = %v", q, g, gg)
			}
		}
	}
	if d.GetPrice(0.5, 0.9) <= d.GetPrice(0.5, 0.5) {
		t.Fatal("a stronger guarantee must cost more")
	}
	var empty strategies.PriceStats
	if _, err := empty.Dist(); !errors.Is(err, strategies.ErrNoHistory) {
		t.Fatal("no history accepted")
	}
}

// TestBestResponseAssignsAllThatRemains: the VMs' budgets add up to what
// the plan has left, to the micro-credit, whatever the prices and however
// many VMs share a host. Rounding each VM's budget down (the mutation)
// left up to a micro-credit a VM unassigned.
func TestBestResponseAssignsAllThatRemains(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 7))
	for range 200 {
		s := strategies.Snapshot{Remaining: money.Micro(1 + rng.IntN(50_000_000)), Left: time.Duration(1+rng.IntN(7200)) * time.Second,
			Prices: map[string]float64{}}
		for h := range 1 + rng.IntN(4) {
			host := fmt.Sprint("host-", h)
			s.Prices[host] = rng.Float64() * 3
			for v := range 1 + rng.IntN(3) {
				s.VMs = append(s.VMs, strategies.VM{Name: fmt.Sprint(host, "-vm", v), Host: host})
			}
		}
		var sum money.Micro
		for _, a := range (strategies.BestResponse{}).Allocate(s).Allocs {
			sum += a.Budget
		}
		if sum != s.Remaining {
			t.Fatalf("allocated %s of %s remaining (prices %v, %d VMs)", sum, s.Remaining, s.Prices, len(s.VMs))
		}
	}
}
