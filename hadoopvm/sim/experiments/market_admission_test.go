package experiments_test

import (
	"fmt"
	"testing"
)

// admissionSeeds are the seeds the admission test runs on: not the ones
// the experiments' constants were chosen on (1, 11, 22, 33, 44).
var admissionSeeds = []uint64{101, 202, 303, 404, 505}

// TestMRMMarketAdmittedJobsOnTimePerSeed: an admitted deadline is a
// promise. Through the market (mrm-market: 100 jobs of mrm's trace at
// each of the paper's gaps, 50, 100 and 200 s, quoted and admitted by the
// broker, run by EDF on the simulator's hosts), no admitted job finishes
// after its deadline, on every seed. Mutations that fail it: admission
// planning at the regression's bound alone (broker.estimate's margin set
// to 1); the estimator's GP without its linear trend (fitGP without
// detrend), which estimates jobs larger than any seen near the size of
// those.
func TestMRMMarketAdmittedJobsOnTimePerSeed(t *testing.T) {
	for _, seed := range admissionSeeds {
		res := runMarket(t, "mrm-market", seed, map[string]string{"gap": "50,100,200", "jobs": "100"})
		for _, gap := range []int{50, 100, 200} {
			tag := fmt.Sprintf("gap %d s, α=2", gap)
			admitted := metric(t, res, "admitted jobs, market (each budget pays its quote's cheapest point, so a refusal would be the broker's; "+
				"the model admits every job: no counterpart), "+tag)
			late := metric(t, res, "admitted jobs finishing after their deadline, market, "+tag)
			margin := metric(t, res, "median safety margin admission planned with (work over the estimate's upper bound), market, "+tag)
			window := metric(t, res, "median deadline − arrival, s, market, "+tag)
			t.Logf("seed %d, gap %d s: admitted %.0f %%, late %.1f %%, median margin %.2f, median window %.0f s", seed, gap, 100*admitted, 100*late, margin, window)
			if !(admitted > 0 && late == 0) {
				t.Errorf("seed %d, gap %d s: %.0f %% of the jobs admitted, %.1f %% of them late: want some admitted, none late", seed, gap, 100*admitted, 100*late)
			}
		}
	}
}
