package yarn_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/hadoopvm/yarn"
	"github.com/mrmarket/mrmarket/hadoopvm/yarn/yarntest"
)

var t0 = time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)

func sec(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func newCluster(t *testing.T, vms ...string) (*yarntest.Cluster, *yarn.Monitor) {
	t.Helper()
	c := yarntest.New(t0)
	t.Cleanup(c.Close)
	for _, vm := range vms {
		c.AddNode(vm, 2)
	}
	return c, &yarn.Monitor{RM: c.RMURL(), History: c.HistoryURL(), Retries: 4, Backoff: 20 * time.Millisecond}
}

// runTask starts and finishes one attempt of a task.
func runTask(t *testing.T, c *yarntest.Cluster, app, kind string, n int, node string, from, to time.Time, phases *yarntest.ReducePhases) {
	t.Helper()
	id, err := c.StartAttempt(app, c.TaskID(app, kind, n), node, from)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.FinishAttempt(app, id, to, true, phases); err != nil {
		t.Fatal(err)
	}
}

// TestStagesAndIdleNodes: a three-stage workflow whose first stage is
// done and second is half way; the nodes running its tasks are active, the
// others idle.
func TestStagesAndIdleNodes(t *testing.T) {
	c, m := newCluster(t, "vm1", "vm2", "vm3", "vm4")
	join := c.Submit("alice", "digg:join", 2, 0, sec(0))
	runTask(t, c, join, yarn.TypeMap, 0, "vm1", sec(1), sec(20), nil)
	runTask(t, c, join, yarn.TypeMap, 1, "vm2", sec(1), sec(25), nil)
	if err := c.FinishApp(join, sec(26)); err != nil {
		t.Fatal(err)
	}
	dist := c.Submit("alice", "digg:dist", 4, 0, sec(30))
	runTask(t, c, dist, yarn.TypeMap, 0, "vm1", sec(31), sec(40), nil)
	runTask(t, c, dist, yarn.TypeMap, 1, "vm2", sec(31), sec(41), nil)
	for i, vm := range []string{"vm1", "vm2"} { // two still running
		if _, err := c.StartAttempt(dist, c.TaskID(dist, yarn.TypeMap, 2+i), vm, sec(42)); err != nil {
			t.Fatal(err)
		}
	}
	other := c.Submit("bob", "report", 1, 0, sec(35)) // another user's one-stage workflow
	_ = other

	snap, err := m.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Workflows) != 2 {
		t.Fatalf("workflows: %+v", snap.Workflows)
	}
	digg := snap.Workflows[0]
	if digg.Name != "digg" || digg.User != "alice" || len(digg.Stages) != 2 || digg.Active != 1 {
		t.Fatalf("digg: %+v", digg)
	}
	if digg.Stages[0].Progress != 1 || math.Abs(digg.Stages[1].Progress-0.5) > 1e-9 {
		t.Fatalf("stage progress: %+v", digg.Stages)
	}
	want := map[string]int{"vm1": 1, "vm2": 1, "vm3": 0, "vm4": 0}
	for _, n := range snap.Nodes {
		if n.Running != want[n.Node] || n.Idle != (want[n.Node] == 0) {
			t.Errorf("node %+v, want %d running", n, want[n.Node])
		}
	}
}

// TestProfileExtraction: the ARIA profile of a finished job, from the
// history server.
func TestProfileExtraction(t *testing.T) {
	c, m := newCluster(t, "vm1", "vm2")
	app := c.Submit("alice", "wordcount", 4, 2, sec(0))
	// A failed map attempt, re-executed: not part of the profile.
	id, _ := c.StartAttempt(app, c.TaskID(app, yarn.TypeMap, 0), "vm2", sec(0))
	_ = c.FinishAttempt(app, id, sec(0), false, nil)
	for i, d := range []int{10, 20, 30, 40} { // the maps end at 40 s
		runTask(t, c, app, yarn.TypeMap, i, "vm1", sec(0), sec(d), nil)
	}
	// First wave: started at 5 s, shuffle done 5 s after the maps, reduce 12 s.
	runTask(t, c, app, yarn.TypeReduce, 0, "vm2", sec(5), sec(57), &yarntest.ReducePhases{ShuffleFinish: sec(45), MergeFinish: sec(45)})
	// Typical: started after the maps, shuffle 8 s + merge 1 s, reduce 14 s.
	runTask(t, c, app, yarn.TypeReduce, 1, "vm2", sec(60), sec(83), &yarntest.ReducePhases{ShuffleFinish: sec(68), MergeFinish: sec(69)})
	if err := c.SetCounters(app, []yarn.CounterGroup{
		{CounterGroupName: yarn.FileSystemCounters, Counter: []yarn.Counter{
			{Name: "HDFS_BYTES_READ", MapCounterValue: 400 << 20, TotalCounterValue: 400 << 20},
			{Name: "HDFS_BYTES_WRITTEN", ReduceCounterValue: 10 << 20, TotalCounterValue: 10 << 20}}},
		{CounterGroupName: yarn.TaskCounters, Counter: []yarn.Counter{
			{Name: "MAP_OUTPUT_BYTES", MapCounterValue: 100 << 20, TotalCounterValue: 100 << 20},
			{Name: "REDUCE_SHUFFLE_BYTES", ReduceCounterValue: 40 << 20, TotalCounterValue: 40 << 20}}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.FinishApp(app, sec(84)); err != nil {
		t.Fatal(err)
	}
	p, err := m.ProfileJob(context.Background(), yarn.JobID(app))
	if err != nil {
		t.Fatal(err)
	}
	s := 1.0 // the profile is in seconds
	if p.Maps != 4 || p.Reduces != 2 || p.MapMin != 10*s || p.MapAvg != 25*s || p.MapMax != 40*s {
		t.Fatalf("map phase: %+v", p)
	}
	if p.Sh1Avg != 5*s || p.Sh1Max != 5*s || p.ShTypAvg != 9*s || p.ShTypMax != 9*s || p.ReduceAvg != 13*s || p.ReduceMax != 14*s {
		t.Fatalf("shuffle and reduce: %+v", p)
	}
	if p.InputPerMap != 100<<20 || p.MapSelectivity != 0.25 || p.ReduceSelectivity != 0.25 {
		t.Fatalf("input and selectivities: %+v", p)
	}
	if _, err := m.ProfileJob(context.Background(), "job_0_0000"); !errors.Is(err, yarn.ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
}

// TestRMRestartMidJob: the ResourceManager goes away in the middle of a job
// and comes back: the monitor waits it out; gone for good, it says so.
func TestRMRestartMidJob(t *testing.T) {
	c, m := newCluster(t, "vm1")
	app := c.Submit("alice", "etl:load", 2, 0, sec(0))
	if _, err := c.StartAttempt(app, c.TaskID(app, yarn.TypeMap, 0), "vm1", sec(1)); err != nil {
		t.Fatal(err)
	}
	c.SetDown(true)
	done := make(chan error, 1)
	go func() {
		snap, err := m.Snapshot(context.Background())
		if err == nil && (len(snap.Workflows) != 1 || snap.Nodes[0].Running != 1) {
			err = errors.New("wrong snapshot after the restart")
		}
		done <- err
	}()
	time.Sleep(60 * time.Millisecond) // the monitor is retrying meanwhile
	c.SetDown(false)
	if err := <-done; err != nil {
		t.Fatalf("across the restart: %v", err)
	}
	c.SetDown(true)
	if _, err := m.Snapshot(context.Background()); !errors.Is(err, yarn.ErrUnavailable) {
		t.Fatalf("RM down for good: %v", err)
	}
}

// TestTimeouts: a ResourceManager that hangs is given up on per request
// and retried; once it answers in time again the monitor gets through.
func TestTimeouts(t *testing.T) {
	c, m := newCluster(t, "vm1")
	m.Client = &http.Client{Timeout: 30 * time.Millisecond}
	c.Submit("alice", "etl:load", 1, 0, sec(0))
	c.SetDelay(time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := m.Apps(context.Background())
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // a try or two time out meanwhile
	c.SetDelay(0)
	if err := <-done; err != nil {
		t.Fatalf("after the RM recovered: %v", err)
	}
	c.SetDelay(time.Second)
	if _, err := m.Apps(context.Background()); !errors.Is(err, yarn.ErrUnavailable) {
		t.Fatalf("RM hung for good: %v", err)
	}
	c.SetDelay(0)
}

// TestJobProgress: a running application's task counts come from its AM,
// a finished one's from the history server; the newest application of the
// name is the one read; an unknown one is not found.
func TestJobProgress(t *testing.T) {
	c, m := newCluster(t, "vm1")
	ctx := context.Background()
	old := c.Submit("alice", "etl", 2, 1, sec(0))
	if err := c.FinishApp(old, sec(5)); err != nil {
		t.Fatal(err)
	}
	app := c.Submit("alice", "etl", 4, 2, sec(10))
	c.Submit("bob", "etl", 9, 9, sec(11))
	runTask(t, c, app, yarn.TypeMap, 0, "vm1", sec(11), sec(20), nil)
	runTask(t, c, app, yarn.TypeMap, 1, "vm1", sec(11), sec(21), nil)
	p, err := m.JobProgress(ctx, "alice", "etl")
	if err != nil {
		t.Fatal(err)
	}
	if p.App != app || p.Maps != 4 || p.MapsDone != 2 || p.Reduces != 2 || p.ReducesDone != 0 || p.Done {
		t.Fatalf("running: %+v", p)
	}
	runTask(t, c, app, yarn.TypeMap, 2, "vm1", sec(21), sec(30), nil)
	runTask(t, c, app, yarn.TypeMap, 3, "vm1", sec(21), sec(31), nil)
	runTask(t, c, app, yarn.TypeReduce, 0, "vm1", sec(31), sec(40), &yarntest.ReducePhases{ShuffleFinish: sec(33), MergeFinish: sec(34)})
	runTask(t, c, app, yarn.TypeReduce, 1, "vm1", sec(31), sec(41), &yarntest.ReducePhases{ShuffleFinish: sec(33), MergeFinish: sec(34)})
	if err := c.FinishApp(app, sec(42)); err != nil {
		t.Fatal(err)
	}
	if p, err = m.JobProgress(ctx, "alice", "etl"); err != nil {
		t.Fatal(err)
	}
	if !p.Done || !p.Succeeded || p.MapsDone != 4 || p.ReducesDone != 2 {
		t.Fatalf("finished: %+v", p)
	}
	if _, err := m.JobProgress(ctx, "alice", "nope"); !errors.Is(err, yarn.ErrNotFound) {
		t.Fatalf("unknown: %v", err)
	}
}
