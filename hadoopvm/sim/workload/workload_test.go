package workload_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/hadoopvm/sim"
	"github.com/mrmarket/mrmarket/hadoopvm/sim/workload"
)

var t0 = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// alone runs a workflow alone on n 2-core hosts with one 2-slot VM each
// and returns its completion time.
func alone(t *testing.T, n int, jobs func(vms []string) []sim.JobSpec) time.Duration {
	t.Helper()
	var hosts []sim.HostSpec
	var vms []sim.VMSpec
	var ids []string
	for h := range n {
		hosts = append(hosts, sim.HostSpec{ID: fmt.Sprint("h", h), Cores: 2})
		id := fmt.Sprint("vm", h)
		vms = append(vms, sim.VMSpec{ID: id, Owner: "u", Host: fmt.Sprint("h", h), Slots: 2})
		ids = append(ids, id)
	}
	s, err := sim.New(sim.Config{Seed: 1, Start: t0}, hosts, vms)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs(ids) {
		if err := s.Submit(j); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.Run(24 * time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return res[len(res)-1].Finish.Sub(t0)
}

// TestCalibration: alone on clusters of the paper's sizes, the workflows
// take the paper's uncontended times (within 10 %); VideoToon's target is
// built from the paper's 20 minutes per chunk.
func TestCalibration(t *testing.T) {
	for _, c := range []struct {
		name  string
		hosts int
		want  time.Duration
		jobs  func([]string) []sim.JobSpec
	}{
		{"gridmix queries", 40, 454 * time.Second, func(v []string) []sim.JobSpec { j, _ := workload.GridMix(workload.Queries, "r", "u", v, 0); return j }},
		{"gridmix web", 40, 386 * time.Second, func(v []string) []sim.JobSpec { j, _ := workload.GridMix(workload.Web, "r", "u", v, 0); return j }},
		{"gridmix text", 40, 527 * time.Second, func(v []string) []sim.JobSpec { j, _ := workload.GridMix(workload.Text, "r", "u", v, 0); return j }},
		// split 60 s + the slowest of 16 chunks of ~20 min (≈ +10 % with skew) + join 120 s
		{"videotoon 16 MB", 18, 60*time.Second + 1320*time.Second + 120*time.Second, func(v []string) []sim.JobSpec { return workload.VideoToon("r", "u", v, 0, 16) }},
	} {
		got := alone(t, c.hosts, c.jobs)
		t.Logf("%s on %d hosts: %s (paper %s)", c.name, c.hosts, got.Round(time.Second), c.want)
		if math.Abs(got.Seconds()-c.want.Seconds()) > 0.1*c.want.Seconds() {
			t.Errorf("%s: %s, want %s ± 10%%", c.name, got, c.want)
		}
	}
	if d := alone(t, 23, func(v []string) []sim.JobSpec { return workload.Digg("r", "u", v, 0) }); d <= 0 {
		t.Fatal("digg did not run")
	}
	if _, err := workload.GridMix("bogus", "r", "u", []string{"vm0"}, 0); err == nil {
		t.Fatal("unknown program accepted")
	}
}
