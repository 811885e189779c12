package experiments_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/mrmarket/mrmarket/hadoopvm/sim/experiments"
)

// runMarket runs experiment name for seed with one run and set.
func runMarket(t *testing.T, name string, seed uint64, set map[string]string) experiments.Result {
	t.Helper()
	e, err := experiments.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Run(context.Background(), experiments.Config{Seed: seed, Runs: 1, Set: set})
	if err != nil {
		t.Fatal(err)
	}
	if e.Engine != experiments.EngineMarket || res.Engine != experiments.EngineMarket {
		t.Errorf("%s runs on %s, want the market", name, e.Engine)
	}
	for _, r := range res.Rows {
		if math.IsNaN(r.Mean) || math.IsInf(r.Mean, 0) || r.N != 1 {
			t.Errorf("%s: row %q is %v over %d runs", name, r.Metric, r.Mean, r.N)
		}
	}
	return res
}

// rowsJSON is res's rows as JSON (a missing paper figure, NaN, as null).
func rowsJSON(t *testing.T, res experiments.Result) string {
	t.Helper()
	b, err := json.Marshal(res.Rows)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMarketExperimentsDeterministic: lin-market, mrm-market and aria-market run
// through the broker on the simulator, give the same rows twice for a
// seed, other rows for another seed, and numbers in range.
func TestMarketExperimentsDeterministic(t *testing.T) {
	for _, c := range []struct {
		name string
		set  map[string]string
	}{
		{"lin-market", map[string]string{"jobs": "40", "load": "0.9"}},
		{"mrm-market", map[string]string{"jobs": "40"}},
		{"aria-market", map[string]string{"jobs": "30", "gap": "300"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := runMarket(t, c.name, 7, c.set), runMarket(t, c.name, 7, c.set)
			if ja, jb := rowsJSON(t, a), rowsJSON(t, b); ja != jb {
				t.Fatalf("seed 7 twice:\n%s\n%s", ja, jb)
			}
			if o := runMarket(t, c.name, 8, c.set); rowsJSON(t, a) == rowsJSON(t, o) {
				t.Errorf("seeds 7 and 8 give the same rows")
			}
			for _, r := range a.Rows {
				if r.Mean < 0 || r.Unit == "%" && r.Mean > 1 && !strings.HasPrefix(r.Metric, "relative deadline exceeded") {
					t.Errorf("%s: %s = %v", c.name, r.Metric, r.Mean)
				}
			}
		})
	}
}

// TestLinMarketMaxSRPTConclusion: through the market (the broker's job
// order on the simulator's hosts, 60 jobs of lin's trace at load 0.9, one
// run per seed), MaxSRPT's mean response is below FIFO's and k-LPS's on
// every conclusion seed, as lin's model has it on every trace. The margin
// over k-LPS is thin on light traces; the reversals once seen came from
// the simulator no longer ticking after the cluster first went idle
// (notes/conclusions.md, lin-market). Mutation that fails it: MaxSRPT
// serving the jobs in arrival order (allocate, which the broker's job
// order calls, without its order by the least work left).
func TestLinMarketMaxSRPTConclusion(t *testing.T) {
	perSeed(t, "lin-market", 1, map[string]string{"jobs": "60", "load": "0.9", "policies": `["fifo","klps","maxsrpt"]`}, func(seed uint64, res experiments.Result) {
		mx := metric(t, res, "mean response, maxsrpt, load 0.9, market")
		fifo := metric(t, res, "mean response, fifo, load 0.9, market")
		klps := metric(t, res, "mean response, klps, load 0.9, market")
		t.Logf("seed %d: MaxSRPT %.2f, FIFO %.2f, k-LPS %.2f", seed, mx, fifo, klps)
		if !(mx < fifo && mx < klps) {
			t.Errorf("seed %d: MaxSRPT's mean response %.2f is not below FIFO's %.2f and k-LPS's %.2f", seed, mx, fifo, klps)
		}
	})
}

// TestMRMMarketSanity: through the market, on each test seed (40 jobs at
// 100 s between arrivals), every job whose budget pays its quote's
// cheapest point is admitted, no job pays more than the price held for
// it, and a job's price is at least the quote's cheapest point. Mutation
// that fails it: the broker holding half the price its own quote gives
// for the deadline it admits (pricing.terms on a budget).
func TestMRMMarketSanity(t *testing.T) {
	perSeed(t, "mrm-market", 1, map[string]string{"jobs": "40", "gap": "100"}, func(seed uint64, res experiments.Result) {
		tag := "gap 100 s, α=2"
		admitted := metric(t, res, "admitted jobs, market (each budget pays its quote's cheapest point, so a refusal would be the broker's; the model admits every job: no counterpart), "+tag)
		paid := metric(t, res, "mean paid / price held, market (the model pays its price: no counterpart), "+tag)
		premium := metric(t, res, "median price / the quote's cheapest point, market, "+tag)
		late := metric(t, res, "admitted jobs finishing after their deadline, market, "+tag)
		t.Logf("seed %d: admitted %.0f %%, late %.0f %%, paid/price %.2f, price/cheapest %.2f", seed, 100*admitted, 100*late, paid, premium)
		if admitted != 1 {
			t.Errorf("seed %d: admitted %.2f of the jobs, want all", seed, admitted)
		}
		if !(paid > 0 && paid <= 1) {
			t.Errorf("seed %d: jobs paid %.2f of their price on average, want (0, 1]", seed, paid)
		}
		if !(premium >= 0.99) {
			t.Errorf("seed %d: median price is %.2f × the quote's cheapest point", seed, premium)
		}
	})
}

// TestARIAMarketAdmittedMeetDeadlinesPerSeed: ARIA's deadlines met
// through the market, on each test seed (aria's W2 jobs scaled to four
// hosts, 40 a trace at 300 s between arrivals): the broker admits some of
// them, every admitted job meets its deadline, and the jobs it refuses
// asked for tighter deadlines (over their time alone) than those it
// admits. Mutation that fails it: the broker admitting a deadline before
// the earliest finish it quotes (pricing.terms without its ErrDeadline
// check) — admitted jobs then finish late.
func TestARIAMarketAdmittedMeetDeadlinesPerSeed(t *testing.T) {
	perSeed(t, "aria-market", 1, map[string]string{"jobs": "40", "gap": "300"}, func(seed uint64, res experiments.Result) {
		tag := "W2, gap 300 s"
		admitted := metric(t, res, "admitted jobs, market (aria admits every job: no counterpart), "+tag)
		missed := metric(t, res, "admitted jobs missing their deadline, market, "+tag)
		in := metric(t, res, "median deadline / time alone of the admitted jobs, market, "+tag)
		out := metric(t, res, "median deadline / time alone of the refused jobs, market (runs with none refused left out), "+tag)
		t.Logf("seed %d: admitted %.0f %%, of which late %.0f %%; deadline / time alone %.2f admitted, %.2f refused", seed, 100*admitted, 100*missed, in, out)
		if !(admitted > 0 && missed == 0) {
			t.Errorf("seed %d: admitted %.0f %% of the jobs, %.0f %% of them late: want some admitted, none late", seed, 100*admitted, 100*missed)
		}
		if !(out < in) {
			t.Errorf("seed %d: refused jobs' deadlines %.2f × their time alone, admitted ones' %.2f: want the refused tighter", seed, out, in)
		}
	})
}

// TestMarketParams: the market experiments refuse settings they cannot
// run as described (an unknown or repeated job order, a trace too long for
// the agents' floors, no hosts).
func TestMarketParams(t *testing.T) {
	for name, bad := range map[string][]map[string]string{
		"lin-market":  {{"policies": `["srpt"]`}, {"policies": `["fifo","fifo"]`}, {"jobs": "501"}, {"hosts": "0"}, {"load": "1"}},
		"mrm-market":  {{"jobs": "501"}, {"alpha": "0.5"}, {"gap": ""}},
		"aria-market": {{"jobs": "501"}, {"gap": "0"}, {"hosts": "33"}},
	} {
		e, err := experiments.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, set := range bad {
			if _, err := e.Run(context.Background(), experiments.Config{Seed: 1, Runs: 1, Set: set}); !errors.Is(err, experiments.ErrParam) {
				t.Errorf("%s --set %v: %v, want ErrParam", name, set, err)
			}
		}
	}
}
