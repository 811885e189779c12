// Package workload generates the MapReduce workflows of the case studies
// (§6) of Sandholm and Lai, "MapReduce Optimization Using Regulated Dynamic
// Prioritization", for the simulator: GridMix (monsterQueries, webdataSort,
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
//
// Resources. Sandholm and Lai call GridMix "predominantly I/O bound, and only
// makes limited use of the CPU(s)" (§6.1), the text sort the most limited
// by cross-node bandwidth (§7.2), Digg's join I/O bound and its Pearson
// stage CPU bound (§6.2), and VideoToon not I/O bound (§7.2). With an IO
// other than IONone a task's uncontended time is split [recon] into
// reading its input from disk, CPU work and writing its output (a map), or
// fetching its shuffle over the network, CPU work and writing its result
// (a reduce), in the fractions of each program's shape below, the
// megabytes sized for the testbed's bandwidth (DiskMBps shared by a VM's
// maps, NetMBps for one reduce per host), so the calibrated
// times hold under every IO. IONone makes the whole time CPU work (the
// CPU-only model).
package workload

import (
	"errors"
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

// The testbed's per-host bandwidth the workflows' I/O is sized for
// [recon: the paper names dual-CPU hosts with a 64 GiB disk on Xen, not
// their bandwidth]: a virtualised commodity disk and gigabit Ethernet.
const (
	DiskMBps = 60
	NetMBps  = 100
)

// IO is how a world's hosts treat I/O.
type IO string

// The I/O models.
const (
	// IOPaper is Sandholm and Lai's testbed: the network (into and out of each
	// VM) governed by the shares, the disk not — shared equally among the
	// VMs using it, whatever they pay (§7.2).
	IOPaper IO = "paper"
	// IOGoverned governs disk and network by the shares, as mrmarket's
	// agents enforce blkio weights and interface bandwidth.
	IOGoverned IO = "governed"
	// IOThrottled is mrmarket's agents on a host whose disk and network
	// do not weigh their users (a disk under mq-deadline, tap devices):
	// each device divides itself equally, and the agents' throttles cap
	// each VM at its share of the measured bandwidth, re-spread each tick
	// (agent.Throttle).
	IOThrottled IO = "throttled"
	// IONone is the CPU-only model: a task's whole time is CPU work.
	IONone IO = "none"
)

// ErrIO is an I/O model that is none of the above.
var ErrIO = errors.New("workload: unknown I/O model (paper, governed, throttled, none)")

// Check reports an unknown model.
func (io IO) Check() error {
	switch io {
	case IOPaper, IOGoverned, IOThrottled, IONone:
		return nil
	}
	return fmt.Errorf("%w: %q", ErrIO, string(io))
}

// Host is a testbed host under io: two cores and, unless IONone, the
// disk and network bandwidth, the disk shared equally under IOPaper.
func (io IO) Host(id string) sim.HostSpec {
	h := sim.HostSpec{ID: id, Cores: 2}
	if io != IONone {
		h.Disk, h.Net, h.DiskFair = DiskMBps, NetMBps, io == IOPaper
		h.DiskThrottle, h.NetThrottle = io == IOThrottled, io == IOThrottled
	}
	return h
}

// jobShape is a job's tasks: their uncontended times (two maps at once on
// a VM, one reduce) and the fractions of those times spent on I/O.
type jobShape struct {
	name                string
	maps, reduces       int
	mapSecs, reduceSecs float64
	mapCV, reduceCV     float64
	// fractions of mapSecs reading input and writing output, of
	// reduceSecs fetching the shuffle and writing the result
	read, write, shuffle, result float64
}

// mapsOnDisk is how many of a VM's two maps read or write at once, on
// average, when the workflows run alone: the I/O sizes that keep their
// calibrated times.
const mapsOnDisk = 1.4

// spec is the shape as a job under io.
func (s jobShape) spec(io IO) sim.JobSpec {
	j := sim.JobSpec{Maps: s.maps, Reduces: s.reduces,
		Map:    sim.Dist{Mean: s.mapSecs, CV: s.mapCV},
		Reduce: sim.Dist{Mean: s.reduceSecs, CV: s.reduceCV}}
	if io == IONone {
		return j
	}
	// A VM's two maps are out of step, so on average fewer than two use
	// the disk at once (mapsOnDisk, measured by TestCalibration); a
	// reduce has the host's network and disk to itself.
	j.MapRead = s.read * s.mapSecs * DiskMBps / mapsOnDisk
	j.MapWrite = s.write * s.mapSecs * DiskMBps / mapsOnDisk
	j.Map.Mean = (1 - s.read - s.write) * s.mapSecs
	if s.reduces > 0 {
		j.ShuffleMB = s.shuffle * s.reduceSecs * NetMBps
		j.ReduceWrite = s.result * s.reduceSecs * DiskMBps
		j.Reduce.Mean = (1 - s.shuffle - s.result) * s.reduceSecs
	}
	return j
}

// chain makes a workflow of jobs run one after the other.
func chain(workflow, runID, user string, vms []string, submit time.Duration, io IO, shapes []jobShape) []sim.JobSpec {
	out := make([]sim.JobSpec, len(shapes))
	for i, s := range shapes {
		j := s.spec(io)
		j.ID, j.Name, j.User, j.VMs, j.Submit = fmt.Sprintf("%s-%d-%s", runID, i, s.name), workflow+":"+s.name, user, vms, submit
		if i > 0 {
			j.After = []string{out[i-1].ID}
		}
		out[i] = j
	}
	return out
}

// GridMix is one run of a GridMix program for user on vms (40 in the
// paper). [recon] I/O: every program reads its input and shuffles over
// the network; the sorts write as much as they read, the text sort
// fetches the most (§7.2: cross-node bandwidth limited it most).
func GridMix(program, runID, user string, vms []string, submit time.Duration, io IO) ([]sim.JobSpec, error) {
	var n int
	var m, r float64
	var read, write, shuffle, result float64
	switch program {
	case Queries:
		n, m, r = 13, 11.56, 9.32
		read, write, shuffle, result = 0.45, 0.05, 0.40, 0.05
	case Web:
		n, m, r = 7, 18.8, 14.0
		read, write, shuffle, result = 0.35, 0.25, 0.40, 0.20
	case Text:
		n, m, r = 6, 29.9, 22.5
		read, write, shuffle, result = 0.30, 0.25, 0.55, 0.15
	default:
		return nil, fmt.Errorf("workload: unknown GridMix program %q (queries, web, text)", program)
	}
	if err := io.Check(); err != nil {
		return nil, err
	}
	shapes := make([]jobShape, n)
	for i := range shapes {
		shapes[i] = jobShape{name: fmt.Sprintf("job%d", i), maps: 100, reduces: 1 + (i*7)%18, mapSecs: m, reduceSecs: r, mapCV: 0.1, reduceCV: 0.1,
			read: read, write: write, shuffle: shuffle, result: result}
	}
	return chain("gridmix-"+program, runID, user, vms, submit, io, shapes), nil
}

// Digg is one run of the Digg workflow (23 VMs in the paper). [recon]
// I/O: the join reads the stories and diggs and shuffles them whole (I/O
// bound), the distribution reads the join's output and shuffles per-user
// counts, Pearson works on partial sums (CPU bound).
func Digg(runID, user string, vms []string, submit time.Duration, io IO) []sim.JobSpec {
	return DiggSized(runID, user, vms, submit, io, [3]float64{1, 1, 1})
}

// DiggSized is Digg with each stage's task times (join, distribution,
// Pearson) multiplied by size: the paper does not give them.
func DiggSized(runID, user string, vms []string, submit time.Duration, io IO, size [3]float64) []sim.JobSpec {
	p := 2 * len(vms) // two waves of maps on 2-slot VMs
	shapes := []jobShape{
		{name: "join", maps: p, reduces: len(vms), mapSecs: 30, reduceSecs: 20, mapCV: 0.2, reduceCV: 0.2,
			read: 0.6, write: 0.15, shuffle: 0.5, result: 0.2},
		{name: "dist", maps: p, reduces: len(vms) / 2, mapSecs: 20, reduceSecs: 10, mapCV: 0.2, reduceCV: 0.2,
			read: 0.3, write: 0.1, shuffle: 0.3, result: 0.1},
		{name: "pearson", maps: p, reduces: len(vms), mapSecs: 60, reduceSecs: 20, mapCV: 0.3, reduceCV: 0.2,
			read: 0.05, shuffle: 0.05, result: 0.05},
	}
	for i := range shapes {
		shapes[i].mapSecs *= size[i]
		shapes[i].reduceSecs *= size[i]
	}
	return chain("digg", runID, user, vms, submit, io, shapes)
}

// VideoToon is one run of VideoToon over a stream of megabytes (16 in the
// paper, on 18 VMs): one chunk per MB, about 20 minutes each, with skew.
// It is CPU bound (§7.2: "not I/O-bound"), the same under every IO.
func VideoToon(runID, user string, vms []string, submit time.Duration, megabytes int) []sim.JobSpec {
	return chain("videotoon", runID, user, vms, submit, IONone, []jobShape{
		{name: "split", maps: 1, mapSecs: 60, mapCV: 0.1},
		{name: "colour", maps: megabytes, mapSecs: 1200, mapCV: 0.1},
		{name: "join", maps: 1, reduces: 1, mapSecs: 60, reduceSecs: 60, mapCV: 0.1, reduceCV: 0.1},
	})
}
