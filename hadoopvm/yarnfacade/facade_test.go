package yarnfacade_test

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/hadoopvm/worker"
	"github.com/mrmarket/mrmarket/hadoopvm/workertest"
	"github.com/mrmarket/mrmarket/hadoopvm/yarn"
	"github.com/mrmarket/mrmarket/hadoopvm/yarnfacade"
	"github.com/mrmarket/mrmarket/internal/testpoll"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// TestWordCountOnInProcessWorkers: a word count over two workers' splits
// gives the counts a plain count of the inputs gives, each word in one
// reduce's output in byte order; the facade serves the job as the monitor
// reads YARN, its ARIA profile included.
func TestWordCountOnInProcessWorkers(t *testing.T) {
	c := workertest.InProcess(t, workertest.Options{Inputs: []worker.Input{{Kind: worker.WordCount, Splits: 3, SplitBytes: 256 << 10, Seed: 7}}})
	spec := c.Job("wc", worker.WordCount, 2, 0.5)
	res, err := c.Run(ctx(t), spec)
	if err != nil || !res.Succeeded {
		t.Fatalf("job: %+v %v", res, err)
	}
	if err := c.CheckOutput(spec, res); err != nil {
		t.Error(err)
	}
	inputs, err := c.Inputs()
	if err != nil {
		t.Fatal(err)
	}
	want := workertest.WordCounts(workertest.SplitBytes(inputs, spec.Splits)...)
	var total int64
	for _, n := range want {
		total += n
	}
	if res.MapCounters.RecordsIn != total || res.MapCounters.BytesRead != 6*256<<10 {
		t.Errorf("map counters %+v, want %d words and all the input read", res.MapCounters, total)
	}

	// The monitor reads the finished job from the history server.
	m := c.Monitor()
	p, err := m.JobProgress(ctx(t), "alice", "wc")
	if err != nil || !p.Done || !p.Succeeded || p.MapsDone != 6 || p.ReducesDone != 2 {
		t.Fatalf("job progress %+v %v", p, err)
	}
	prof, err := m.ProfileJob(ctx(t), p.Job)
	if err != nil {
		t.Fatal(err)
	}
	dur := res.Finished.Sub(res.Started).Seconds()
	if prof.Maps != 6 || prof.Reduces != 2 || prof.MapAvg <= 0 || prof.MapMax > dur || prof.ReduceAvg < 0 || prof.ShTypAvg > dur ||
		prof.InputPerMap != 256<<10 || prof.MapSelectivity <= 0 || prof.ReduceSelectivity <= 0 {
		t.Fatalf("profile %+v of a job of %.3f s", prof, dur)
	}
	for _, a := range res.Attempts {
		if !a.OK || a.Finish.Before(a.Start) || a.Reduce && (a.ShuffleEnd.Before(a.Start) || a.MergeEnd.Before(a.ShuffleEnd) || a.Finish.Before(a.MergeEnd)) {
			t.Errorf("attempt %+v", a)
		}
	}
}

// TestSortOnInProcessWorkers: a sort's reduces write the input's records,
// each once, in key order across the reduces.
func TestSortOnInProcessWorkers(t *testing.T) {
	c := workertest.InProcess(t, workertest.Options{Inputs: []worker.Input{{Kind: worker.Sort, Splits: 2, SplitBytes: 128 << 10, Seed: 3}}})
	spec := c.Job("sort", worker.Sort, 3, 1)
	res, err := c.Run(ctx(t), spec)
	if err != nil || !res.Succeeded {
		t.Fatalf("job: %+v %v", res, err)
	}
	if err := c.CheckOutput(spec, res); err != nil {
		t.Fatal(err)
	}
	var got int64
	for _, o := range res.Outputs {
		got += o.Length
	}
	if res.ReduceCounters.ShuffleBytes != got || got != res.MapCounters.RecordsIn*worker.RecordSize {
		t.Errorf("shuffled %d bytes, wrote %d, of %d records", res.ReduceCounters.ShuffleBytes, got, res.MapCounters.RecordsIn)
	}
}

// TestMapsReadRemoteSplits: a job whose splits are all on one worker runs
// maps on the other too, which reads them from the first's data server.
func TestMapsReadRemoteSplits(t *testing.T) {
	c := workertest.InProcess(t, workertest.Options{Slots: 1, Inputs: []worker.Input{{Kind: worker.WordCount, Splits: 6, SplitBytes: 64 << 10, Seed: 1}}})
	spec := c.Job("remote", worker.WordCount, 1, 1)
	spec.Splits = c.Splits(c.Workers[0], worker.WordCount)
	res, err := c.Run(ctx(t), spec)
	if err != nil || !res.Succeeded {
		t.Fatalf("job: %+v %v", res, err)
	}
	remote := 0
	for _, a := range res.Attempts {
		if !a.Reduce && a.VM != c.Workers[0] {
			remote++
		}
	}
	if remote == 0 {
		t.Error("no map ran away from its split")
	}
	if err := c.CheckOutput(spec, res); err != nil {
		t.Error(err)
	}
}

// fakeWorker is a control channel's guest end answering the facade's
// commands with answer's events, for the facade's own behaviour.
func fakeWorker(t *testing.T, f *yarnfacade.Facade, vm string, slots int, answer func(worker.Command) []worker.Event) net.Conn {
	guestEnd, hostEnd := net.Pipe()
	t.Cleanup(func() { guestEnd.Close() })
	f.Attach(vm, hostEnd)
	c := worker.NewConn(guestEnd)
	go func() {
		if c.Send(worker.Event{Type: worker.EvHello, VM: vm, Slots: slots}) != nil {
			return
		}
		for {
			var cmd worker.Command
			if c.Recv(&cmd) != nil {
				return
			}
			for _, ev := range answer(cmd) {
				if c.Send(ev) != nil {
					return
				}
			}
		}
	}()
	return guestEnd
}

func facade(t *testing.T) (*yarnfacade.Facade, *yarn.Monitor) {
	f := yarnfacade.New(yarnfacade.Config{Logf: t.Logf})
	t.Cleanup(f.Close)
	srv := httptest.NewServer(f.Handler())
	t.Cleanup(srv.Close)
	return f, &yarn.Monitor{RM: srv.URL, History: srv.URL, Retries: 1, Backoff: 10 * time.Millisecond}
}

func splits(vm string, n int) []worker.Split {
	return worker.Input{Kind: worker.WordCount, Splits: n, SplitBytes: worker.BlockSize}.SplitsOn(vm)
}

// TestFailedAttemptsRunAgain: an attempt that fails is run again and the
// job succeeds; the REST shapes show both attempts. A task failing
// MaxAttempts times fails its job.
func TestFailedAttemptsRunAgain(t *testing.T) {
	f, m := facade(t)
	tries, order := map[string]int{}, map[string]int{} // order: the jobs as they came, from 1
	fakeWorker(t, f, "w0", 2, func(cmd worker.Command) []worker.Event {
		if cmd.Type != worker.CmdMap && cmd.Type != worker.CmdReduce {
			return nil
		}
		if order[cmd.Job] == 0 {
			order[cmd.Job] = len(order) + 1
		}
		key := fmt.Sprint(cmd.Job, cmd.Type, cmd.Index)
		tries[key]++
		first, doomed := order[cmd.Job] == 1, order[cmd.Job] == 2
		if cmd.Type == worker.CmdMap && cmd.Index == 0 && (first && tries[key] == 1 || doomed) {
			return []worker.Event{{Type: worker.EvDone, Attempt: cmd.Attempt, Error: "disk on fire"}}
		}
		return []worker.Event{{Type: worker.EvDone, Attempt: cmd.Attempt, OK: true, Output: &worker.Extent{}}}
	})
	if err := f.Ready(ctx(t), "w0"); err != nil {
		t.Fatal(err)
	}
	app, err := f.Submit(yarnfacade.JobSpec{Name: "flaky", User: "bob", Kind: worker.WordCount, Splits: splits("w0", 2), Reduces: 1})
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.Wait(ctx(t), app)
	if err != nil || !res.Succeeded {
		t.Fatalf("job: %+v %v", res, err)
	}
	atts, err := m.Attempts(ctx(t), "", yarn.JobID(app), yarn.TaskID(app, yarn.TypeMap, 0))
	if err != nil || len(atts) != 2 || atts[0].State != yarn.StateFailed || atts[0].Diagnostics != "disk on fire" || atts[1].State != yarn.StateSucceed {
		t.Fatalf("map 0's attempts: %+v %v", atts, err)
	}
	// The second job's map 0 always fails: four attempts, then the job.
	app2, err := f.Submit(yarnfacade.JobSpec{Name: "doomed", User: "bob", Kind: worker.WordCount, Splits: splits("w0", 2), Reduces: 1})
	if err != nil {
		t.Fatal(err)
	}
	res, err = f.Wait(ctx(t), app2)
	if err != nil || res.Succeeded || !strings.Contains(res.Diagnostics, "failed 4 times") {
		t.Fatalf("doomed job: %+v %v", res, err)
	}
	p, err := m.JobProgress(ctx(t), "bob", "doomed")
	if err != nil || !p.Done || p.Succeeded {
		t.Fatalf("doomed job's progress: %+v %v", p, err)
	}
}

// TestLostWorkerFailsItsJobs: a worker whose channel ends fails the jobs
// it had a part in, and its node is LOST.
func TestLostWorkerFailsItsJobs(t *testing.T) {
	f, m := facade(t)
	fakeWorker(t, f, "w0", 1, func(worker.Command) []worker.Event { return nil }) // takes tasks, never ends them
	g := fakeWorker(t, f, "w1", 1, func(worker.Command) []worker.Event { return nil })
	if err := f.Ready(ctx(t), "w0", "w1"); err != nil {
		t.Fatal(err)
	}
	app, err := f.Submit(yarnfacade.JobSpec{Name: "j", User: "bob", Kind: worker.WordCount, Splits: splits("w0", 4), Reduces: 1})
	if err != nil {
		t.Fatal(err)
	}
	var snap yarn.Snapshot
	if err := testpoll.Wait(30*time.Second, 20*time.Millisecond, func() error {
		snap, err = m.Snapshot(ctx(t))
		if err != nil || len(snap.Nodes) != 2 || snap.Nodes[0].Running != 1 || snap.Nodes[1].Running != 1 {
			return fmt.Errorf("snapshot %+v %v, want a map running on each worker", snap, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	g.Close()
	res, err := f.Wait(ctx(t), app)
	if err != nil || res.Succeeded || !strings.Contains(res.Diagnostics, "w1 lost") {
		t.Fatalf("job: %+v %v", res, err)
	}
	nodes, err := m.Nodes(ctx(t))
	states := map[string]string{}
	for _, nd := range nodes {
		states[nd.NodeHostName] = nd.State
	}
	if err != nil || len(nodes) != 2 || states["w1"] != "LOST" || states["w0"] != "RUNNING" {
		t.Fatalf("nodes %+v %v", nodes, err)
	}
}

// TestReducesThatCouldHoldEverySlotAreRefused: slow start below 1 with as
// many reduces as slots could wait forever; the job fails at once.
func TestReducesThatCouldHoldEverySlotAreRefused(t *testing.T) {
	f, _ := facade(t)
	fakeWorker(t, f, "w0", 2, func(worker.Command) []worker.Event { return nil })
	if err := f.Ready(ctx(t), "w0"); err != nil {
		t.Fatal(err)
	}
	app, err := f.Submit(yarnfacade.JobSpec{Name: "j", User: "bob", Kind: worker.WordCount, Splits: splits("w0", 4), Reduces: 2, SlowStart: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.Wait(ctx(t), app)
	if err != nil || res.Succeeded || !strings.Contains(res.Diagnostics, "hold all 2 slots") {
		t.Fatalf("job: %+v %v", res, err)
	}
	for _, bad := range []yarnfacade.JobSpec{
		{Name: "j", User: "bob", Kind: "grep", Splits: splits("w0", 1), Reduces: 1},
		{Name: "j", User: "bob", Kind: worker.Sort, Reduces: 1},
		{Name: "j", User: "bob", Kind: worker.Sort, Splits: splits("w0", 1)},
		{Name: "", User: "bob", Kind: worker.Sort, Splits: splits("w0", 1), Reduces: 1},
	} {
		if _, err := f.Submit(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestAWorkerSpeaksForItsOwnAttempts: a worker reporting another worker's
// attempts done changes nothing of them.
func TestAWorkerSpeaksForItsOwnAttempts(t *testing.T) {
	f, m := facade(t)
	fakeWorker(t, f, "w0", 1, func(worker.Command) []worker.Event { return nil })
	forged := make(chan string, 1)
	fakeWorker(t, f, "w1", 1, func(cmd worker.Command) []worker.Event {
		if cmd.Type != worker.CmdMap {
			return nil
		}
		// w0 runs map 0: its first attempt's id is this one's, for map 0.
		// The forged end comes first, then w1's own.
		other := strings.Replace(cmd.Attempt, fmt.Sprintf("_m_%06d_", cmd.Index), "_m_000000_", 1)
		forged <- other
		return []worker.Event{{Type: worker.EvDone, Attempt: other, OK: true}, {Type: worker.EvDone, Attempt: cmd.Attempt, OK: true}}
	})
	if err := f.Ready(ctx(t), "w0", "w1"); err != nil {
		t.Fatal(err)
	}
	splits := append(splits("w0", 1), splits("w1", 1)...)
	app, err := f.Submit(yarnfacade.JobSpec{Name: "j", User: "bob", Kind: worker.WordCount, Splits: splits, Reduces: 1})
	if err != nil {
		t.Fatal(err)
	}
	id := <-forged
	testpoll.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error { // w1's own end has been read, so the forged one was
		p, err := m.JobProgress(ctx(t), "bob", "j")
		if err != nil || p.MapsDone != 1 {
			return fmt.Errorf("progress %+v %v, want w1's map done", p, err)
		}
		return nil
	})
	atts, err := m.Attempts(ctx(t), app, yarn.JobID(app), yarn.TaskID(app, yarn.TypeMap, 0))
	if err != nil || len(atts) != 1 || atts[0].ID != id || atts[0].State != yarn.StateRunning || yarn.NodeOf(atts[0].NodeHTTPAddress) != "w0" {
		t.Fatalf("map 0's attempts after w1 reported %s done: %+v %v", id, atts, err)
	}
}
