package market

import (
	"math"
	"testing"

	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// runnerOn is a job runner over VMs of one-CPU hosts, without a market:
// the tests set the tasks' rates (the CPU the VMs got) themselves.
func runnerOn(vms ...string) *jobRunner {
	r := newJobRunner(nil)
	for _, id := range vms {
		r.addVM(id, nil, 1).owned = true
	}
	return r
}

func (r *jobRunner) add(spec wire.JobSpec) *simJob {
	j := r.newJob(&simJob{id: "job-" + spec.Name, user: "alice", spec: spec, status: wire.JobRunning, started: true})
	r.jobs = append(r.jobs, j)
	return j
}

func (r *jobRunner) setRates(rate float64) {
	for _, v := range r.vmOrder {
		for _, k := range v.Running {
			k.Rate = rate
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

// TestTasksChainInTheirSlotsWithinAStep: a slot whose task finishes mid-step
// goes on with the next task at the same rate, so no CPU the VM received
// is lost; maps run in waves over the slots, the reduces after the last
// map (a first-wave reduce shuffles the first-shuffle time).
func TestTasksChainInTheirSlotsWithinAStep(t *testing.T) {
	r := runnerOn("v1", "v2")
	j := r.add(wire.JobSpec{Name: "etl", VMs: []string{"v1", "v2"}, Maps: 4, Reduces: 1, MapSlots: 2, ReduceSlots: 1,
		Profile: strategies.JobProfile{MapAvg: 10, MapMax: 10, Sh1Avg: 2, Sh1Max: 2, ShTypAvg: 3, ShTypMax: 3, ReduceAvg: 4, ReduceMax: 4}})
	r.schedule()
	if len(r.vms["v1"].Running) != 1 || len(r.vms["v2"].Running) != 1 {
		t.Fatalf("one map per VM's slot: %d, %d", len(r.vms["v1"].Running), len(r.vms["v2"].Running))
	}
	r.setRates(1)
	r.run(15)
	if j.tasks.MapsDone != 2 || len(r.vms["v1"].Running) != 1 || !near(r.vms["v1"].Running[0].Left(), 5) {
		t.Fatalf("after 15 s at a full CPU: %d maps done, v1 runs %d (left %v); want 2 done and the second wave half way",
			j.tasks.MapsDone, len(r.vms["v1"].Running), r.vms["v1"].Running[0].Left())
	}
	r.run(5)
	if j.tasks.MapsDone != 4 || len(r.vms["v1"].Running) != 1 || !r.vms["v1"].Running[0].Reduce || len(r.vms["v2"].Running) != 0 {
		t.Fatalf("after the maps: %d done; v1 runs %v, v2 %v; want the reduce on v1's reduce slot", j.tasks.MapsDone, r.vms["v1"].Running, r.vms["v2"].Running)
	}
	if k := r.vms["v1"].Running[0]; !near(k.Left(), 2+4) {
		t.Fatalf("the first-wave reduce's work: %v, want first shuffle 2 + reduce 4", k.Left())
	}
	r.run(6)
	if !j.tasks.Done() || j.tasks.ReducesDone != 1 {
		t.Fatalf("after the reduce: done %v, %d reduces", j.tasks.Done(), j.tasks.ReducesDone)
	}
}

// TestSlotsShareTheirVMsCPU: two slots of a VM on a one-CPU host each get
// half of it when the VM has the whole host, and a task then takes the
// profile's time — the profile is a task's time at a full share with its
// slot-mates beside it.
func TestSlotsShareTheirVMsCPU(t *testing.T) {
	r := runnerOn("v1")
	j := r.add(wire.JobSpec{Name: "sort", VMs: []string{"v1"}, Maps: 4, MapSlots: 2,
		Profile: strategies.JobProfile{MapAvg: 10, MapMax: 10}})
	r.schedule()
	if len(r.vms["v1"].Running) != 2 {
		t.Fatalf("%d tasks on 2 slots", len(r.vms["v1"].Running))
	}
	r.setRates(0.5) // the host's one CPU, split over the VM's two tasks
	r.run(10 - 1e-6)
	if j.tasks.MapsDone != 0 {
		t.Fatalf("%d maps done before the profile's 10 s", j.tasks.MapsDone)
	}
	r.run(2e-6)
	if j.tasks.MapsDone != 2 {
		t.Fatalf("%d maps done after the profile's 10 s, want the first wave", j.tasks.MapsDone)
	}
	r.run(10)
	if !j.tasks.Done() {
		t.Fatalf("not done after two waves: %d maps", j.tasks.MapsDone)
	}
}

// TestTaskTimesStayWithinTheProfile: drawn times average the profile's and
// never pass its maximum; the same job id draws the same times.
func TestTaskTimesStayWithinTheProfile(t *testing.T) {
	spec := wire.JobSpec{Name: "big", VMs: []string{"v1"}, Maps: 2000, MapSlots: 1, Profile: strategies.JobProfile{MapAvg: 20, MapMax: 27}}
	a, b := runnerOn("v1").add(spec), runnerOn("v1").add(spec)
	var sum float64
	for i, k := range a.tasks.Pending {
		if k.Work() < 0 || k.Work() > 27 || k.Work() != b.tasks.Pending[i].Work() {
			t.Fatalf("map %d: %v s (again %v)", i, k.Work(), b.tasks.Pending[i].Work())
		}
		sum += k.Work()
	}
	if mean := sum / float64(len(a.tasks.Pending)); math.Abs(mean-20) > 0.5 {
		t.Fatalf("mean map time %v, want about 20", mean)
	}
}
