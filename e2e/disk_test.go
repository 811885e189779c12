package e2e

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/hadoopvm/worker"
	"github.com/mrmarket/mrmarket/hadoopvm/workertest"
	"github.com/mrmarket/mrmarket/hadoopvm/yarnfacade"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// diskCaseKiBps is the disk the agent divides in the disk-bound half of
// case a: stated below what the device reads (world.diskKiBps), as an
// operator may sell less of a disk than it reads, so that the guests'
// reads and not their CPUs bound the jobs. The word counts read about
// 11 MB per second of CPU; at 4 MiB/s the faster of two readers takes
// 3 MiB/s, a quarter of a CPU.
const diskCaseKiBps = 4096

// diskCaseMiB is what each job of the disk case reads: two maps of two of
// its worker's 16 MiB splits.
const diskCaseMiB = 64

// caseDisk: the disk-bound half of case a. Alice's first worker and bob's
// second, each on a host CPU of its own (the other guests there idle, so
// neither job waits for a CPU), run equal word counts over 64 MiB of
// their input disks. The agent, restarted stating the disk at
// diskCaseKiBps, divides it by their shares. The model: one phase each,
// on the disk, at the shares the agent set; bob's time over alice's is
// held on the wall clock (the disk's caps are bytes per second of it),
// within 10 %. While both read, alice's part of what the two read is her
// share of their two shares, within 10 %. Mutation: with the disk
// throttle off (agent --disk-mode none) the device reads both faster than
// their CPUs compute, each job is bound by its own CPU, bob's time over
// alice's is about 1, and both checks fail.
func (w *world) caseDisk(t *testing.T) {
	w.restartAgent(t, diskCaseKiBps)
	defer w.restartAgent(t, w.diskKiBps)
	w.waitRatio("alice", "bob", 3)
	a, b := w.clusters["alice"], w.clusters["bob"]
	va, vb := a.Workers[0], b.Workers[1]
	if w.pinned[va] == w.pinned[vb] {
		t.Fatalf("%s and %s share host CPU %d: the case needs each job on a CPU of its own", va, vb, w.pinned[va])
	}
	shares := w.shares()
	qa, qb := shares[va].Share, shares[vb].Share

	smp := w.sample(time.Second)
	ra, rb := w.readersOn(t, "wc-disk", a, va, b, vb)
	samples := smp.end()
	t.Logf("timeline:\n%s", timeline(samples, w.vms(), ra.Submitted))
	job := func(q float64) flow {
		return flow{phases: []phase{{"disk", 1, nil}}, shares: map[string]float64{"disk": q}}
	}
	end := finishes([]flow{job(qa), job(qb)})
	want := end[1] / end[0]
	ta, tb := took(ra), took(rb)

	// The disk's division while both read: from the later submission to
	// the earlier end, once the agent's caps divide the disk. The agent
	// plans a guest's cap from two readings of its reads in a row, so an
	// idle guest that starts reading has none for a tick and reads as fast
	// as the device (run 68: 343 and 243 MB/s in the jobs' first sample, which
	// made alice's part of the window 0.601).
	from, to := maxTime(ra.Submitted, rb.Submitted), minTime(ra.Finished, rb.Finished)
	device := float64(diskCaseKiBps) / 1024 // MiB/s, as caps are
	for _, s := range samples {
		if !s.at.Before(from) && s.vms[va].Caps[wire.ResourceDisk] < device && s.vms[vb].Caps[wire.ResourceDisk] < device {
			from = maxTime(from, s.setAt())
			break
		}
	}
	if to.Sub(from) < 5*time.Second {
		t.Fatalf("the agent's caps divided the disk for %v of the jobs' reads only", to.Sub(from))
	}
	read := func(vm string) float64 {
		return guestAmount(samples, []string{vm}, to, diskOf) - guestAmount(samples, []string{vm}, from, diskOf)
	}
	ma, mb := read(va), read(vb)
	part, partWant := ma/(ma+mb), qa/(qa+qb)
	w.add(row{fmt.Sprintf("a: equal word counts of %d MiB, each alone on its CPU, reading a disk stated at %d KiB/s, alice:bob spending 3:1 (agent's shares %.3f/%.3f)",
		diskCaseMiB, diskCaseKiBps, qa, qb), "disk",
		fmt.Sprintf("bob/alice time %.3f; alice's part of the disk while both read %.3f", want, partWant),
		fmt.Sprintf("%.3f (alice %.1f s, bob %.1f s, wall clock); %.3f over %.1f s (%.1f and %.1f MiB read)",
			tb/ta, ta, tb, part, to.Sub(from).Seconds(), ma/(1<<20), mb/(1<<20))})
	within(t, "bob's word count's time over alice's, on the disk (wall clock)", tb/ta, want)
	if math.Abs(part/partWant-1) > tolerance {
		t.Errorf("alice's part of the disk while both read: measured %.3f, expected %.3f (tolerance %.0f %%)", part, partWant, 100*tolerance)
	}
}

// diskOf is a sample's disk bytes, read and written.
func diskOf(c counters) float64 { return float64(c.disk) }

// readersOn runs equal word counts over diskCaseMiB of each worker's
// input, alice's on va and bob's on vb, side by side.
func (w *world) readersOn(t *testing.T, name string, a *workertest.Cluster, va string, b *workertest.Cluster, vb string) (ra, rb yarnfacade.Result) {
	t.Helper()
	spec := func(c *workertest.Cluster, vm string) yarnfacade.JobSpec {
		s := c.Job(name, worker.WordCount, 1, 1)
		s.Splits = slotMaps(c, vm, worker.WordCount, 2)[:diskCaseMiB/32]
		return s
	}
	return w.runPair(t, spec(a, va), spec(b, vb), nil)
}

// restartAgent stops the host's agent and starts it again stating the
// guests' disk at diskKiBps, and waits until the broker has every guest
// from the new agent's state: until then it shows the former agent's
// caps, and the guests have no caps of the new one (run 63: the jobs,
// started at once, read 35 MB in their first 3 s, alice 0.58 of it).
func (w *world) restartAgent(t *testing.T, diskKiBps uint) {
	t.Helper()
	w.agent.Stop()
	args := slices.Clone(w.agent.Args)
	i := slices.Index(args, "--disk-kibps")
	args[i+1] = fmt.Sprint(diskKiBps)
	w.agent.Args = args
	spawned := w.agent.Start(t)
	testpoll.CheckFor(t, time.Minute, 200*time.Millisecond, func() error {
		shares := w.shares()
		for _, vm := range w.guests() {
			if !shares[vm].Updated.After(spawned) {
				return fmt.Errorf("the broker's state of %s is from %v, before the agent's restart at %v", vm, shares[vm].Updated, spawned)
			}
		}
		return nil
	})
}
