package sim_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/hadoopvm/sim"
	"github.com/mrmarket/mrmarket/internal/cputime"
)

// BenchmarkScale simulates hosts of 8 cores (one busy background core
// each) carrying 4 VMs each for users of 40 VMs, and MapReduce jobs (10
// maps, 2 reduces, lognormal durations with stragglers and failures)
// arriving one a second; it reports the wall time of the whole run, the
// CPU time it took (the figure that holds on a loaded machine; the
// simulation is one goroutine, the garbage collector runs beside it) and
// events per second. Sizes: 1,000 hosts × 10,000 jobs (100 users, over
// three hours) and 10,000 hosts × 100,000 jobs (1,000 users, over 28
// hours), whose goal is under a minute; -short runs the small one only.
func BenchmarkScale(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("hosts=%d/jobs=%d", n, 10*n), func(b *testing.B) {
			if n > 1_000 && testing.Short() {
				b.Skip("-short: the small size only")
			}
			for b.Loop() {
				benchScale(b, n)
			}
		})
	}
}

func benchScale(b *testing.B, nHosts int) {
	users := nHosts / 10
	var hosts []sim.HostSpec
	var vms []sim.VMSpec
	userVMs := map[int][]string{}
	for h := range nHosts {
		hosts = append(hosts, sim.HostSpec{ID: fmt.Sprint("h", h), Cores: 8, Background: 1, BackgroundRate: 10})
		for k := range 4 {
			u := (h/10)*4%100 + k // each user has VMs on 10 hosts… spread over the cluster
			u = (u+h%10*7)%100 + h/1000*100
			id := fmt.Sprintf("u%d-h%d-%d", u, h, k)
			vms = append(vms, sim.VMSpec{ID: id, Owner: fmt.Sprint("u", u), Host: fmt.Sprint("h", h), Slots: 2})
			userVMs[u] = append(userVMs[u], id)
		}
	}
	s, err := sim.New(sim.Config{Seed: 7, Start: t0, Tick: time.Minute}, hosts, vms)
	if err != nil {
		b.Fatal(err)
	}
	for j := range 10 * nHosts {
		u := j % users
		if err := s.Submit(sim.JobSpec{ID: fmt.Sprint("j", j), User: fmt.Sprint("u", u), VMs: userVMs[u],
			Submit: time.Duration(j) * time.Second, Maps: 10, Reduces: 2,
			Map:    sim.Dist{Mean: 60, CV: 0.5, StragglerProb: 0.02, Straggler: 5, FailProb: 0.01},
			Reduce: sim.Dist{Mean: 40, CV: 0.3}}); err != nil {
			b.Fatal(err)
		}
	}
	start, cpu0 := time.Now(), cputime.Process()
	res, err := s.Run(48 * time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	wall := time.Since(start)
	b.ReportMetric(wall.Seconds(), "wall-s")
	b.ReportMetric((cputime.Process() - cpu0).Seconds(), "cpu-s")
	b.ReportMetric(float64(s.Events())/wall.Seconds(), "events/s")
	b.ReportMetric(res[len(res)-1].Finish.Sub(t0).Hours(), "simulated-h")
}
