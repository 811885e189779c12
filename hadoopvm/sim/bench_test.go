package sim_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/hadoopvm/sim"
)

// BenchmarkScale simulates 1,000 hosts (8 cores, one busy background core
// each) carrying 4,000 VMs of 100 users, and 10,000 MapReduce jobs (10
// maps, 2 reduces, lognormal durations with stragglers and failures)
// arriving over three hours; it reports the wall time of the whole run and
// events per second.
func BenchmarkScale(b *testing.B) {
	for b.Loop() {
		var hosts []sim.HostSpec
		var vms []sim.VMSpec
		userVMs := map[int][]string{}
		for h := range 1000 {
			hosts = append(hosts, sim.HostSpec{ID: fmt.Sprint("h", h), Cores: 8, Background: 1, BackgroundRate: 10})
			for k := range 4 {
				u := (h/10)*4%100 + k // each user has VMs on 10 hosts… spread over the cluster
				u = (u + h%10*7) % 100
				id := fmt.Sprintf("u%d-h%d-%d", u, h, k)
				vms = append(vms, sim.VMSpec{ID: id, Owner: fmt.Sprint("u", u), Host: fmt.Sprint("h", h), Slots: 2})
				userVMs[u] = append(userVMs[u], id)
			}
		}
		s, err := sim.New(sim.Config{Seed: 7, Start: t0, Tick: time.Minute}, hosts, vms)
		if err != nil {
			b.Fatal(err)
		}
		for j := range 10_000 {
			u := j % 100
			if err := s.Submit(sim.JobSpec{ID: fmt.Sprint("j", j), User: fmt.Sprint("u", u), VMs: userVMs[u],
				Submit: time.Duration(j) * time.Second, Maps: 10, Reduces: 2,
				Map:    sim.Dist{Mean: 60, CV: 0.5, StragglerProb: 0.02, Straggler: 5, FailProb: 0.01},
				Reduce: sim.Dist{Mean: 40, CV: 0.3}}); err != nil {
				b.Fatal(err)
			}
		}
		start := time.Now()
		res, err := s.Run(48 * time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		wall := time.Since(start)
		b.ReportMetric(wall.Seconds(), "wall-s")
		b.ReportMetric(float64(s.Events())/wall.Seconds(), "events/s")
		b.ReportMetric(res[len(res)-1].Finish.Sub(t0).Hours(), "simulated-h")
	}
}
