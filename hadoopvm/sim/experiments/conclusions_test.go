package experiments_test

import (
	"context"
	"math"
	"testing"

	"github.com/mrmarket/mrmarket/hadoopvm/sim/experiments"
)

// conclusionSeeds are the seeds every paper's conclusion is checked on.
var conclusionSeeds = []uint64{1, 11, 22, 33, 44}

// perSeed runs experiment name once for each conclusion seed — runs runs,
// parameters set — and hands check each seed's result.
func perSeed(t *testing.T, name string, runs int, set map[string]string, check func(seed uint64, res experiments.Result)) {
	t.Helper()
	e, err := experiments.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range conclusionSeeds {
		res, err := e.Run(context.Background(), experiments.Config{Seed: seed, Runs: runs, Set: set})
		if err != nil {
			t.Fatal(err)
		}
		check(seed, res)
	}
}

// metric is the mean of the row named metric in res.
func metric(t *testing.T, res experiments.Result, name string) float64 {
	t.Helper()
	for _, r := range res.Rows {
		if r.Metric == name {
			return r.Mean
		}
	}
	t.Fatalf("%s: no row %q", res.Experiment, name)
	return math.NaN()
}
