package workload_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/hadoopvm/sim"
	"github.com/mrmarket/mrmarket/hadoopvm/sim/experiments"
	"github.com/mrmarket/mrmarket/hadoopvm/sim/workload"
)

// paperRuns are Sandholm and Lai §7's two-user scenarios on the real broker,
// agents and strategies (experiments.TwoUsers).
var paperRuns = map[string]experiments.TwoUsers{
	// §7.2: GridMix monsterQueries on 40 hosts, workflow priority 1 vs 0.5
	// over a series, the other user the opposite series.
	"gridmix": {Hosts: 40, IO: workload.IOPaper, Users: [2]experiments.User{
		{Jobs: gridmix, Spend: experiments.Series([]float64{1, 0.5}, 1)},
		{Jobs: gridmix, Spend: experiments.Series([]float64{0.5, 1}, 1)}}},
	// §7.3: Digg on 23 hosts, stage priority {1, 20, 1} against fair share.
	"digg": {Hosts: 23, IO: workload.IOPaper, Users: [2]experiments.User{
		{Jobs: digg, Spend: experiments.Series([]float64{1, 20, 1}, 1)},
		{Jobs: digg, Spend: experiments.Fair}}},
	// §7.4: VideoToon (16 MB) on 18 hosts, extra load on a random half,
	// bottleneck elimination (f = 0.9) against fair share.
	"videotoon": {Hosts: 18, Heterogeneous: true, Users: [2]experiments.User{
		{Jobs: videoToon, Spend: experiments.Bottleneck(0.9)},
		{Jobs: videoToon, Spend: experiments.Fair}}},
}

func gridmix(u string, vms []string) []sim.JobSpec {
	j, _ := workload.GridMix(workload.Queries, u, u, vms, 0, workload.IOPaper)
	return j
}
func digg(u string, vms []string) []sim.JobSpec      { return workload.Digg(u, u, vms, 0, workload.IOPaper) }
func videoToon(u string, vms []string) []sim.JobSpec { return workload.VideoToon(u, u, vms, 0, 16) }

// TestPaperScenariosRun: each two-user scenario runs to the end on the
// real broker, agents and strategies, and repeats exactly for a seed.
func TestPaperScenariosRun(t *testing.T) {
	for name, r := range paperRuns {
		a, err := r.Run(5)
		if err != nil {
			t.Fatal(err)
		}
		b, err := r.Run(5)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) || a.T[0] <= 0 || a.T[1] <= 0 || a.Paid[0] <= 0 || a.Paid[1] <= 0 {
			t.Fatalf("%s: %+v then %+v", name, a, b)
		}
		t.Logf("%s: user 1 %s (paid %s), user 2 %s (paid %s)", name, a.T[0].Round(time.Second), a.Paid[0], a.T[1].Round(time.Second), a.Paid[1])
	}
}

// BenchmarkPaperScenarios is the wall time of one run of each of Sandholm
// and Lai's two-user scenarios in the simulator.
func BenchmarkPaperScenarios(b *testing.B) {
	for _, name := range []string{"gridmix", "digg", "videotoon"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				start := time.Now()
				if _, err := paperRuns[name].Run(5); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(time.Since(start).Seconds(), "wall-s")
			}
		})
	}
}
