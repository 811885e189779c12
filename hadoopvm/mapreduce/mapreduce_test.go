package mapreduce_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mrmarket/mrmarket/hadoopvm/mapreduce"
	"github.com/mrmarket/mrmarket/strategies"
)

func rng() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

// on is where each started task runs, by VM id.
func on(started []*mapreduce.Task) []string {
	var out []string
	for _, t := range started {
		out = append(out, t.VM.ID)
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestPlacementSpreadsOrPacksAWave: the simulator's placement spreads a
// wave over the job's VMs, up's fills a VM's slots before the next's.
func TestPlacementSpreadsOrPacksAWave(t *testing.T) {
	for _, c := range []struct {
		cfg  mapreduce.Config
		want []string
	}{
		{mapreduce.Config{Slots: mapreduce.VMSlots, Placement: mapreduce.Widest}, []string{"a", "b", "a", "b"}},
		{mapreduce.Config{Slots: mapreduce.JobSlots, Placement: mapreduce.Packed}, []string{"a", "a", "b", "b"}},
	} {
		cl := mapreduce.New(c.cfg)
		a, b := cl.AddVM("a", 2), cl.AddVM("b", 2)
		cl.Add("j", mapreduce.Spec{Maps: 6, Map: mapreduce.Dist{Mean: 1}, MapSlots: 4}, []*mapreduce.VM{a, b}, rng())
		if got := on(cl.Schedule()); !equal(got, c.want) {
			t.Errorf("%+v: the first wave ran on %v, want %v", c.cfg, got, c.want)
		}
	}
}

// TestJobSlotsAreTheJobsOwn: with JobSlots a VM runs any number of jobs'
// tasks, each job within its own map slots there; with VMSlots the VM's
// slots are shared.
func TestJobSlotsAreTheJobsOwn(t *testing.T) {
	for _, c := range []struct {
		scope mapreduce.SlotScope
		want  int
	}{{mapreduce.JobSlots, 4}, {mapreduce.VMSlots, 2}} {
		cl := mapreduce.New(mapreduce.Config{Slots: c.scope})
		v := cl.AddVM("v", 2)
		for _, id := range []string{"j1", "j2"} {
			cl.Add(id, mapreduce.Spec{Maps: 5, Map: mapreduce.Dist{Mean: 1}, MapSlots: 2}, []*mapreduce.VM{v}, rng())
		}
		if got := len(cl.Schedule()); got != c.want {
			t.Errorf("slots %v: %d tasks started, want %d", c.scope, got, c.want)
		}
	}
}

// finish ends every running task of v at once.
func finish(cl *mapreduce.Cluster, v *mapreduce.VM) {
	for _, k := range append([]*mapreduce.Task(nil), v.Running...) {
		k.Cur().Left = 0
		for k.End() == mapreduce.NextPhase {
			k.Cur().Left = 0
		}
		cl.Release(k)
		cl.Done(k)
	}
}

// TestOrderOfJobsTakingSlots: a job whose tasks had all started and that
// then has reduces waiting goes behind a later job with Requeue, and keeps
// its place with Arrival.
func TestOrderOfJobsTakingSlots(t *testing.T) {
	for _, c := range []struct {
		order mapreduce.Order
		first string
	}{{mapreduce.Requeue, "late"}, {mapreduce.Arrival, "early"}} {
		cl := mapreduce.New(mapreduce.Config{Order: c.order})
		v := cl.AddVM("v", 1)
		cl.Add("early", mapreduce.Spec{Maps: 1, Reduces: 1, Map: mapreduce.Dist{Mean: 1}, Reduce: mapreduce.Dist{Mean: 1}}, []*mapreduce.VM{v}, rng())
		cl.Schedule()
		cl.Add("late", mapreduce.Spec{Maps: 1, Map: mapreduce.Dist{Mean: 1}}, []*mapreduce.VM{v}, rng())
		finish(cl, v) // early's map: its reduce waits now
		if got := cl.Schedule(); len(got) != 1 || got[0].Job.ID != c.first {
			t.Errorf("order %v: %v took the slot, want %s", c.order, got[0].Job.ID, c.first)
		}
	}
}

// TestShuffleWaitsForMapOutput: with slow start, a reduce shuffles only
// the map output there is, and the reduce work after its shuffle waits for
// every map.
func TestShuffleWaitsForMapOutput(t *testing.T) {
	cl := mapreduce.New(mapreduce.Config{})
	v := cl.AddVM("v", 5)
	j := cl.Add("j", mapreduce.Spec{Maps: 4, Reduces: 1, SlowStart: 0.25, Map: mapreduce.Dist{Mean: 10},
		Shuffle: mapreduce.Dist{Mean: 8}, Reduce: mapreduce.Dist{Mean: 2}}, []*mapreduce.VM{v}, rng())
	cl.Schedule()
	k := v.Running[0]
	k.Cur().Left = 0
	cl.Release(k)
	cl.Done(k)
	if len(j.Pending) != 1 || !j.Pending[0].Reduce {
		t.Fatalf("after one map of four: %d waiting, want the reduce", len(j.Pending))
	}
	cl.Schedule()
	r := v.Running[len(v.Running)-1]
	// Of its 10 of work, 3/4 of the 8 of shuffle cannot be done yet, nor the 2 of reduce.
	if !r.Reduce || math.Abs(r.Floor()-8) > 1e-9 || r.Blocked() {
		t.Fatalf("the reduce's floor %v, want 8 (blocked %v)", r.Floor(), r.Blocked())
	}
	r.Cur().Left = 8
	if !r.Blocked() || r.End() != mapreduce.Waiting {
		t.Fatal("a reduce that shuffled the output there is does not wait")
	}
}

// TestFailedAttemptRunsAgainFirst: an attempt that fails part way is run
// again before its job's other tasks, counted as an attempt of its own.
func TestFailedAttemptRunsAgainFirst(t *testing.T) {
	cl := mapreduce.New(mapreduce.Config{})
	v := cl.AddVM("v", 1)
	j := cl.Add("j", mapreduce.Spec{Maps: 3, Map: mapreduce.Dist{Mean: 10}}, []*mapreduce.VM{v}, rng())
	cl.Schedule()
	k := v.Running[0]
	k.FailAt = 4
	k.Cur().Left = 4
	if k.End() != mapreduce.Failed {
		t.Fatal("the attempt did not fail at its failure point")
	}
	cl.Release(k)
	cl.Done(k)
	again := cl.Schedule()
	if len(again) != 1 || again[0].Index != 0 || again[0].Attempts != 2 || j.Attempts != 2 || j.MapsDone != 0 {
		t.Fatalf("after the failure: %+v, job attempts %d", again, j.Attempts)
	}
}

// TestProfileTimes: a profile's times are uniform around each average and
// within its maximum, the first wave of reduces shuffles the first
// shuffle, and the progress weighs the stages by the averages.
func TestProfileTimes(t *testing.T) {
	p := strategies.JobProfile{MapAvg: 20, MapMax: 27, Sh1Avg: 2, Sh1Max: 2, ShTypAvg: 30, ShTypMax: 30, ReduceAvg: 4, ReduceMax: 4}
	spec := mapreduce.ProfileSpec(p, 1000, 3, 1, 2)
	var sum float64
	r := rng()
	for range 1000 {
		w, failAt := spec.Map.Draw(r)
		if w < 13 || w > 27 || failAt != -1 {
			t.Fatalf("a map of %v s (fails at %v)", w, failAt)
		}
		sum += w
	}
	if math.Abs(sum/1000-20) > 0.5 {
		t.Fatalf("maps average %v s, want about 20", sum/1000)
	}
	cl := mapreduce.New(mapreduce.Config{Slots: mapreduce.JobSlots})
	v := cl.AddVM("v", 0)
	j := cl.Add("j", mapreduce.ProfileSpec(p, 1, 3, 1, 2), []*mapreduce.VM{v}, rng())
	cl.Schedule()
	finish(cl, v)
	for i, k := range j.Pending {
		if want := []float64{6, 6, 34}[i]; k.Work() != want {
			t.Errorf("reduce %d: %v s of work, want %v", i, k.Work(), want)
		}
	}
	if got, want := j.Progress(), 20.0/(20+3*34); math.Abs(got-want) > 1e-6 {
		t.Errorf("progress with the map done %v, want %v", got, want)
	}
}

// TestMapsGoWhereTheirInputIs: with MapVMs a free slot takes a map whose
// input is on its VM, in the job's line; a VM whose inputs are all taken
// takes another VM's map rather than stay idle; reduces have no input.
func TestMapsGoWhereTheirInputIs(t *testing.T) {
	cl := mapreduce.New(mapreduce.Config{Slots: mapreduce.VMSlots})
	a, b := cl.AddVM("a", 1), cl.AddVM("b", 1)
	spec := mapreduce.Spec{Maps: 5, Reduces: 1, Map: mapreduce.Dist{Mean: 1}, Reduce: mapreduce.Dist{Mean: 1},
		MapVMs: []string{"b", "b", "a", "b", "b"}}
	j := cl.Add("j", spec, []*mapreduce.VM{a, b}, rng())
	first := cl.Schedule()
	got := map[string]*mapreduce.Task{}
	for _, tk := range first {
		got[tk.VM.ID] = tk
	}
	if len(first) != 2 || got["a"].Index != 2 || got["b"].Index != 0 {
		t.Fatalf("first wave: %v, want map 2 on a and map 0 on b", on(first))
	}
	finish := func(tk *mapreduce.Task) {
		cl.Release(tk)
		cl.Done(tk)
	}
	finish(got["a"]) // a is free; its only input is done: it takes b's next
	tk := cl.StartOn(a)
	if tk == nil || tk.Reduce || tk.Index != 1 {
		t.Fatalf("a took %+v, want map 1 (b's input, read remotely)", tk)
	}
	finish(got["b"])
	if tk := cl.StartOn(b); tk == nil || tk.Index != 3 {
		t.Fatalf("b took %+v, want map 3", tk)
	}
	if j.MapsDone != 2 {
		t.Fatalf("maps done %d", j.MapsDone)
	}
}
