// Package workload generates the MapReduce workflows of seed 003's case
// studies (§6) for the simulator: GridMix (monsterQueries, webdataSort,
// textSort), Digg (join → probability distribution → Pearson) and
// VideoToon (split → colour reduction → join).
//
// [recon] The paper gives each GridMix program's job count and uncontended
// run time (13 jobs in 454 s, 7 in 386 s, 6 in 527 s; 100 maps and 1–18
// reduces per job on 40 dual-CPU hosts) and VideoToon's cost (about 20
// minutes per 1 MB chunk, a 16 MB stream on 18 hosts); task durations are
// chosen so that each workflow, alone on a cluster of its size with one
// 2-slot VM per 2-core host, takes those times (TestCalibration). Digg's
// run time is not given: its stages are sized as an I/O-bound join, a
// lighter distribution and a CPU-bound Pearson stage.
package workload

import (
	"fmt"
	"time"

	"github.com/mrmarket/mrmarket/hadoopvm/sim"
)

// GridMix program names.
const (
	Queries = "queries" // monsterQueries: 13 jobs, 454 s
	Web     = "web"     // webdataSort: 7 jobs, 386 s
	Text    = "text"    // textSort: 6 jobs, 527 s
)

type jobShape struct {
	name                string
	maps, reduces       int
	mapSecs, reduceSecs float64
	mapCV, reduceCV     float64
}

// chain makes a workflow of jobs run one after the other.
func chain(workflow, runID, user string, vms []string, submit time.Duration, shapes []jobShape) []sim.JobSpec {
	out := make([]sim.JobSpec, len(shapes))
	for i, s := range shapes {
		out[i] = sim.JobSpec{
			ID: fmt.Sprintf("%s-%d-%s", runID, i, s.name), Name: workflow + ":" + s.name, User: user, VMs: vms, Submit: submit,
			Maps: s.maps, Reduces: s.reduces,
			Map:    sim.Dist{Mean: s.mapSecs, CV: s.mapCV},
			Reduce: sim.Dist{Mean: s.reduceSecs, CV: s.reduceCV},
		}
		if i > 0 {
			out[i].After = []string{out[i-1].ID}
		}
	}
	return out
}

// GridMix is one run of a GridMix program for user on vms (40 in the paper).
func GridMix(program, runID, user string, vms []string, submit time.Duration) ([]sim.JobSpec, error) {
	var n int
	var m, r float64
	switch program {
	case Queries:
		n, m, r = 13, 11.56, 9.32
	case Web:
		n, m, r = 7, 18.8, 14.0
	case Text:
		n, m, r = 6, 29.9, 22.5
	default:
		return nil, fmt.Errorf("workload: unknown GridMix program %q (queries, web, text)", program)
	}
	shapes := make([]jobShape, n)
	for i := range shapes {
		shapes[i] = jobShape{name: fmt.Sprintf("job%d", i), maps: 100, reduces: 1 + (i*7)%18, mapSecs: m, reduceSecs: r, mapCV: 0.1, reduceCV: 0.1}
	}
	return chain("gridmix-"+program, runID, user, vms, submit, shapes), nil
}

// Digg is one run of the Digg workflow (23 VMs in the paper).
func Digg(runID, user string, vms []string, submit time.Duration) []sim.JobSpec {
	p := 2 * len(vms) // two waves of maps on 2-slot VMs
	return chain("digg", runID, user, vms, submit, []jobShape{
		{name: "join", maps: p, reduces: len(vms), mapSecs: 30, reduceSecs: 20, mapCV: 0.2, reduceCV: 0.2},
		{name: "dist", maps: p, reduces: len(vms) / 2, mapSecs: 20, reduceSecs: 10, mapCV: 0.2, reduceCV: 0.2},
		{name: "pearson", maps: p, reduces: len(vms), mapSecs: 60, reduceSecs: 20, mapCV: 0.3, reduceCV: 0.2},
	})
}

// VideoToon is one run of VideoToon over a stream of megabytes (16 in the
// paper, on 18 VMs): one chunk per MB, about 20 minutes each, with skew.
func VideoToon(runID, user string, vms []string, submit time.Duration, megabytes int) []sim.JobSpec {
	return chain("videotoon", runID, user, vms, submit, []jobShape{
		{name: "split", maps: 1, mapSecs: 60, mapCV: 0.1},
		{name: "colour", maps: megabytes, mapSecs: 1200, mapCV: 0.1},
		{name: "join", maps: 1, reduces: 1, mapSecs: 60, reduceSecs: 60, mapCV: 0.1, reduceCV: 0.1},
	})
}
