package experiments_test

import (
	"context"
	"encoding/json"
	"math"
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

// TestMarketExperimentsDeterministic: lin-market and mrm-market run
// through the broker on the simulator, give the same rows twice for a
// seed, other rows for another seed, and numbers in range.
func TestMarketExperimentsDeterministic(t *testing.T) {
	for _, c := range []struct {
		name string
		set  map[string]string
	}{
		{"lin-market", map[string]string{"jobs": "40", "load": "0.9"}},
		{"mrm-market", map[string]string{"jobs": "40"}},
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
				if r.Mean < 0 || r.Unit == "%" && r.Mean > 1 {
					t.Errorf("%s: %s = %v", c.name, r.Metric, r.Mean)
				}
			}
		})
	}
}
