// Package yarnfacade is the host side of mrmarket's worker guests: the job
// master that hands a MapReduce job's tasks to the guests' workers
// (hadoopvm/worker) as YARN's ResourceManager and MapReduce AM would, and a
// facade that serves what they report in the REST shapes of the
// ResourceManager, the MapReduce AM (behind the RM's proxy) and the Job
// History Server — so the YARN monitor (hadoopvm/yarn), `mrmarket jobs
// watch --yarn`, and the broker's stage priority, bottleneck elimination and
// deadline control follow real tasks on real VMs unchanged. Hadoop itself
// cannot be installed here (docs/PLATFORM.md); against a real Hadoop the
// same monitor reads the real services.
//
// Decisions:
//   - One model. Where and when tasks start is hadoopvm/mapreduce's (the
//     simulator's and `up`'s): the workers are the model's VMs with the
//     slots their hello states (YARN containers on NodeManagers, shared by
//     every job), jobs take free slots in arrival order (YARN's FIFO
//     scheduler), a map goes where its split is while a slot is free there
//     and elsewhere rather than leave a slot idle (its worker then reads
//     the split from the holder's data server), reduces are scheduled
//     once SlowStart of the maps are done. An application's progress is
//     the model's Jockey indicator; the AM's map and reduce progress the
//     mean of the tasks' reported progress. The shapes are yarn.Server's,
//     encoded with the types the monitor decodes.
//   - The control channel is virtio-serial, not the guests' network: the
//     network is what the agent shapes and the shuffle fills, and progress
//     must arrive on time however slow the VM's network is bought. One
//     channel per guest, JSON lines (worker.Conn); Attach takes any
//     stream, AttachUnix the socket libvirt made for the guest's channel.
//   - Times are the host's: an attempt starts when the facade sends it,
//     its phases and its end when their events arrive, so every time the
//     REST shapes carry is on one clock.
//   - A job waits (its application RUNNING, nothing started) until every
//     VM holding one of its splits has said hello; its tasks run on the
//     VMs up at that moment. A failed attempt is run again, up to
//     MaxAttempts (Hadoop's mapreduce.map.maxattempts); a worker lost
//     (its channel ends) fails every job it had a part in: its map
//     outputs are gone with it.
//   - A worker speaks for its own attempts only: an event about another
//     VM's attempt is dropped, so one guest cannot end or advance another
//     guest's tasks.
//   - A job whose reduces could hold every slot before its maps are done
//     (SlowStart below 1 and as many reduces as slots) is refused: the
//     model has no reduce preemption, so it could wait forever.
package yarnfacade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/mrmarket/mrmarket/hadoopvm/mapreduce"
	"github.com/mrmarket/mrmarket/hadoopvm/worker"
	"github.com/mrmarket/mrmarket/hadoopvm/yarn"
	"github.com/mrmarket/mrmarket/internal/retry"
	"github.com/mrmarket/mrmarket/strategies"
)

// Errors of the facade.
var (
	ErrSpec     = errors.New("yarnfacade: invalid job")
	ErrNoJob    = errors.New("yarnfacade: no such job")
	ErrNotReady = errors.New("yarnfacade: workers not ready")
)

// Config configures a facade.
type Config struct {
	// Now is the facade's clock (time.Now when nil).
	Now func() time.Time
	// MaxAttempts is how many times a task is tried (default 4).
	MaxAttempts int
	// Logf logs (log.Printf when nil).
	Logf func(format string, args ...any)
}

// JobSpec is a job to run on the workers.
type JobSpec struct {
	// Name and User name the application, as the monitor finds it
	// (a workflow's stages are named "workflow:stage").
	Name, User string
	// Kind is what the tasks compute: worker.WordCount or worker.Sort.
	Kind string
	// Splits are the maps' inputs, one map each, on the workers' input
	// disks.
	Splits  []worker.Split
	Reduces int
	// SlowStart is the fraction of maps done before the reduces are
	// scheduled (0 means 1: after the maps).
	SlowStart float64
	// Profile, when set, weighs the stages in the application's progress
	// (Jockey's indicator over its average task times); without one each
	// task weighs the same.
	Profile *strategies.JobProfile
}

// Attempt is a task attempt as the facade saw it.
type Attempt struct {
	ID     string `json:"id"`
	Task   string `json:"task"`
	VM     string `json:"vm"`
	Reduce bool   `json:"reduce"`
	Index  int    `json:"index"`
	// Start is when it was sent, Finish when its end arrived; a reduce's
	// ShuffleEnd and MergeEnd when those phases' ends did.
	Start, Finish, ShuffleEnd, MergeEnd time.Time
	OK                                  bool            `json:"ok"`
	Error                               string          `json:"error,omitempty"`
	Counters                            worker.Counters `json:"counters"`
	// Output is a reduce's result on its VM's scratch disk.
	Output *worker.Extent `json:"output,omitempty"`
}

// Output is a reduce's result: Length bytes at Offset on VM's scratch disk.
type Output struct {
	VM string `json:"vm"`
	worker.Extent
}

// Result is a finished job.
type Result struct {
	App, Job    string
	Succeeded   bool
	Diagnostics string
	// Submitted is when it was submitted, Started when its first task
	// was sent, Finished when its last ended.
	Submitted, Started, Finished time.Time
	Attempts                     []Attempt
	// Outputs are the reduces' results, by reduce.
	Outputs []Output
	// MapCounters and ReduceCounters sum the successful attempts'.
	MapCounters, ReduceCounters worker.Counters
}

// Facade is the job master and the REST facade of a set of workers.
type Facade struct {
	cfg Config
	srv *yarn.Server

	mu       sync.Mutex
	model    *mapreduce.Cluster
	attached []*node          // every channel attached, for Close
	nodes    map[string]*node // the workers that said hello, by VM
	jobs     map[string]*job  // by application id
	waiting  []*job           // submitted, some split's VM not up yet
	attempts map[string]*attempt
	changed  chan struct{} // closed and replaced when a node or a job changes
	closed   bool
	running  sync.WaitGroup // the nodes' reading and sending goroutines
}

type node struct {
	vm     string
	conn   *worker.Conn
	closer io.Closer
	out    chan worker.Command
	model  *mapreduce.VM
	up     bool
	slots  int
}

type job struct {
	spec    JobSpec
	app     string
	model   *mapreduce.Job
	vms     []string
	outputs []*worker.MapOutput // by map, once done
	res     Result
	done    chan struct{}
	ended   bool
}

type attempt struct {
	Attempt
	job  *job
	task *mapreduce.Task
}

// New is a facade with no workers yet.
func New(cfg Config) *Facade {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 4
	}
	if cfg.Logf == nil {
		cfg.Logf = log.Printf
	}
	return &Facade{cfg: cfg, srv: yarn.NewServer(cfg.Now().UnixMilli()),
		model:    mapreduce.New(mapreduce.Config{Slots: mapreduce.VMSlots, Placement: mapreduce.Widest, Order: mapreduce.Arrival}),
		nodes:    map[string]*node{},
		jobs:     map[string]*job{},
		attempts: map[string]*attempt{},
		changed:  make(chan struct{}),
	}
}

// Handler serves the ResourceManager's, the AMs' (behind /proxy/) and the
// history server's REST paths on one address: give its URL as both
// --yarn and --history.
func (f *Facade) Handler() http.Handler { return f.srv.Handler() }

func (f *Facade) now() int64 { return f.cfg.Now().UnixMilli() }

// notify wakes the waiters; f.mu is held.
func (f *Facade) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Attach takes vm's control channel: the worker's hello makes it a node.
// The facade closes rwc when the channel fails or at Close.
func (f *Facade) Attach(vm string, rwc io.ReadWriteCloser) {
	n := &node{vm: vm, conn: worker.NewConn(rwc), closer: rwc, out: make(chan worker.Command, 4096)}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		rwc.Close()
		return
	}
	f.attached = append(f.attached, n)
	f.running.Go(func() { f.send(n) })
	f.running.Go(func() { f.read(n) })
}

// logf logs, but not once the facade is closing: its channels failing
// then are no news.
func (f *Facade) logf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logLocked(format, args...)
}

// logLocked is logf with f.mu held.
func (f *Facade) logLocked(format string, args ...any) {
	if !f.closed {
		f.cfg.Logf(format, args...)
	}
}

// controlDial is how AttachUnix tries the guest's channel socket: QEMU
// makes it as the domain starts.
var controlDial = retry.Options{InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, Multiplier: 2, MaxTries: 30}

// AttachUnix connects to the unix socket of vm's control channel (libvirt's
// <channel type='unix'>, QEMU listening) and attaches it.
func (f *Facade) AttachUnix(ctx context.Context, vm, path string) error {
	var c net.Conn
	err := retry.Do(ctx, controlDial, func(error) bool { return true }, func(ctx context.Context) (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, "unix", path)
		return err
	})
	if err != nil {
		return fmt.Errorf("yarnfacade: %s's control channel: %w", vm, err)
	}
	f.Attach(vm, c)
	return nil
}

// send writes a node's commands in order, off the facade's lock (a
// guest's channel may block).
func (f *Facade) send(n *node) {
	for cmd := range n.out {
		if err := n.conn.Send(cmd); err != nil {
			f.logf("yarnfacade: %s: %v", n.vm, err)
			n.closer.Close()
			for range n.out {
			}
			return
		}
	}
}

// queue queues a command for a node; f.mu is held.
func (f *Facade) queue(n *node, cmd worker.Command) {
	select {
	case n.out <- cmd:
	default:
		f.logLocked("yarnfacade: %s: commands backed up, dropping the node", n.vm)
		n.closer.Close()
	}
}

func (f *Facade) read(n *node) {
	defer n.closer.Close()
	var ev worker.Event
	if err := n.conn.Recv(&ev); err != nil || ev.Type != worker.EvHello || ev.VM != n.vm {
		f.logf("yarnfacade: %s: no hello (%+v, %v)", n.vm, ev, err)
		close(n.out)
		return
	}
	f.mu.Lock()
	old := f.nodes[n.vm]
	switch {
	case f.closed:
		f.mu.Unlock()
		close(n.out)
		return
	case old != nil && old.up:
		f.mu.Unlock()
		f.logLocked("yarnfacade: %s attached twice", n.vm)
		close(n.out)
		return
	case old != nil:
		n.model = old.model
		f.srv.SetNodeState(n.vm, "RUNNING")
	default:
		n.model = f.model.AddVM(n.vm, max(ev.Slots, 1))
		f.srv.AddNode(n.vm, max(ev.Slots, 1))
	}
	n.up, n.slots = true, max(ev.Slots, 1)
	f.nodes[n.vm] = n
	f.admit()
	f.schedule()
	f.notify()
	f.mu.Unlock()
	for {
		var ev worker.Event
		if err := n.conn.Recv(&ev); err != nil {
			f.mu.Lock()
			f.lost(n, err)
			f.mu.Unlock()
			close(n.out)
			return
		}
		f.mu.Lock()
		f.handle(n, ev)
		f.mu.Unlock()
	}
}

// Ready waits until every vm has said hello.
func (f *Facade) Ready(ctx context.Context, vms ...string) error {
	for {
		f.mu.Lock()
		var missing []string
		for _, vm := range vms {
			if n := f.nodes[vm]; n == nil || !n.up {
				missing = append(missing, vm)
			}
		}
		ch := f.changed
		f.mu.Unlock()
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %v not up: %v", ErrNotReady, missing, ctx.Err())
		case <-ch:
		}
	}
}

// Submit starts a job and returns its application id.
func (f *Facade) Submit(spec JobSpec) (string, error) {
	if err := check(spec); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	app := f.srv.Submit(spec.User, spec.Name, len(spec.Splits), spec.Reduces, now)
	j := &job{spec: spec, app: app, outputs: make([]*worker.MapOutput, len(spec.Splits)), done: make(chan struct{}),
		res: Result{App: app, Job: yarn.JobID(app), Submitted: time.UnixMilli(now), Outputs: make([]Output, spec.Reduces)}}
	f.jobs[app] = j
	f.waiting = append(f.waiting, j)
	f.admit()
	f.schedule()
	return app, nil
}

func check(s JobSpec) error {
	switch {
	case s.Name == "" || s.User == "":
		return fmt.Errorf("%w: a name and a user are required", ErrSpec)
	case s.Kind != worker.WordCount && s.Kind != worker.Sort:
		return fmt.Errorf("%w: kind %q: want %s or %s", ErrSpec, s.Kind, worker.WordCount, worker.Sort)
	case len(s.Splits) == 0 || s.Reduces < 1:
		return fmt.Errorf("%w: at least one split and one reduce", ErrSpec)
	case s.SlowStart < 0 || s.SlowStart > 1:
		return fmt.Errorf("%w: slow start %v outside [0, 1]", ErrSpec, s.SlowStart)
	}
	for i, sp := range s.Splits {
		if sp.VM == "" || sp.Offset < 0 || sp.Length <= 0 {
			return fmt.Errorf("%w: split %d %+v", ErrSpec, i, sp)
		}
	}
	return nil
}

// admit adds to the model the waiting jobs whose splits' VMs are all up;
// f.mu is held.
func (f *Facade) admit() {
	keep := f.waiting[:0]
	for _, j := range f.waiting {
		if !f.admissible(j) {
			keep = append(keep, j)
		}
	}
	clear(f.waiting[len(keep):])
	f.waiting = keep
}

func (f *Facade) admissible(j *job) bool {
	mapVMs := make([]string, len(j.spec.Splits))
	for i, s := range j.spec.Splits {
		if n := f.nodes[s.VM]; n == nil || !n.up {
			return false
		}
		mapVMs[i] = s.VM
	}
	var vms []*mapreduce.VM
	slots := 0
	for _, vm := range slices.Sorted(maps.Keys(f.nodes)) {
		if n := f.nodes[vm]; n.up {
			vms = append(vms, n.model)
			j.vms = append(j.vms, vm)
			slots += n.slots
		}
	}
	slow := j.spec.SlowStart
	if slow > 0 && slow < 1 && j.spec.Reduces >= slots {
		f.end(j, false, fmt.Sprintf("%d reduces would hold all %d slots before the maps are done (slow start %v)", j.spec.Reduces, slots, slow))
		return true
	}
	mapSecs, reduceSecs := 1.0, 1.0
	if p := j.spec.Profile; p != nil {
		mapSecs, reduceSecs = p.StageSecs()
	}
	spec := mapreduce.Spec{Maps: len(j.spec.Splits), Reduces: j.spec.Reduces, SlowStart: slow, MapVMs: mapVMs,
		Map: mapreduce.Dist{Mean: mapSecs}, Reduce: mapreduce.Dist{Mean: reduceSecs}}
	j.model = f.model.Add(j.app, spec, vms, rand.New(rand.NewPCG(1, 2))) // constant Dists draw nothing
	return true
}

// schedule starts tasks on free slots; f.mu is held.
func (f *Facade) schedule() {
	for _, t := range f.model.Schedule() {
		f.launch(t)
	}
}

func kindOf(reduce bool) string {
	if reduce {
		return yarn.TypeReduce
	}
	return yarn.TypeMap
}

// launch records an attempt of t and sends it to its worker.
func (f *Facade) launch(t *mapreduce.Task) {
	j := f.jobs[t.Job.ID]
	now := f.now()
	taskID := yarn.TaskID(j.app, kindOf(t.Reduce), t.Index)
	id, err := f.srv.StartAttempt(j.app, taskID, t.VM.ID, now)
	if err != nil {
		f.logLocked("yarnfacade: %v", err) // the ids are the facade's own: cannot happen
		return
	}
	a := &attempt{Attempt: Attempt{ID: id, Task: taskID, VM: t.VM.ID, Reduce: t.Reduce, Index: t.Index, Start: time.UnixMilli(now)}, job: j, task: t}
	f.attempts[id] = a
	if j.res.Started.IsZero() {
		j.res.Started = a.Start
	}
	cmd := worker.Command{Job: j.app, Attempt: id, Kind: j.spec.Kind, Index: t.Index, Reduces: j.spec.Reduces}
	if t.Reduce {
		cmd.Type, cmd.Maps = worker.CmdReduce, len(j.spec.Splits)
		for _, o := range j.outputs {
			if o != nil {
				cmd.Outputs = append(cmd.Outputs, *o)
			}
		}
	} else {
		split := j.spec.Splits[t.Index]
		cmd.Type, cmd.Split = worker.CmdMap, &split
	}
	f.queue(f.nodes[t.VM.ID], cmd)
}

// handle takes a worker's event; f.mu is held.
func (f *Facade) handle(n *node, ev worker.Event) {
	a := f.attempts[ev.Attempt]
	if a == nil || a.VM != n.vm || !a.Finish.IsZero() || a.job.ended {
		return // an attempt of a job that ended, a second end, or another worker's (a guest speaks for its own only)
	}
	now := f.now()
	switch ev.Type {
	case worker.EvProgress:
		_ = f.srv.SetProgress(a.job.app, a.ID, 100*ev.Progress)
	case worker.EvPhase:
		_ = f.srv.SetProgress(a.job.app, a.ID, 100*ev.Progress)
		switch ev.Phase {
		case worker.PhaseShuffle:
			a.ShuffleEnd = time.UnixMilli(now)
		case worker.PhaseMerge:
			a.MergeEnd = time.UnixMilli(now)
		}
	case worker.EvDone:
		a.OK, a.Error, a.Counters, a.Output = ev.OK, ev.Error, ev.Counters, ev.Output
		f.finish(a, now)
		f.schedule()
	}
}

// finish ends an attempt at now and hands it back to the model.
func (f *Facade) finish(a *attempt, now int64) {
	j, t := a.job, a.task
	a.Finish = time.UnixMilli(now)
	var phases *yarn.ReducePhases
	if a.Reduce && a.OK {
		// A phase whose end was not reported ended with the next.
		if a.MergeEnd.IsZero() {
			a.MergeEnd = a.Finish
		}
		if a.ShuffleEnd.IsZero() {
			a.ShuffleEnd = a.MergeEnd
		}
		phases = &yarn.ReducePhases{ShuffleFinish: a.ShuffleEnd.UnixMilli(), MergeFinish: a.MergeEnd.UnixMilli()}
	}
	if err := f.srv.FinishAttempt(j.app, a.ID, now, a.OK, phases, a.Error); err != nil {
		f.logLocked("yarnfacade: %v", err)
	}
	j.res.Attempts = append(j.res.Attempts, a.Attempt)
	f.model.Release(t)
	if !a.OK {
		t.FailAt = 0 // the model's mark of a failed attempt: it runs the task again
		f.model.Done(t)
		if t.Attempts >= f.cfg.MaxAttempts {
			f.end(j, false, fmt.Sprintf("task %s failed %d times, last: %s", a.Task, t.Attempts, a.Error))
		}
		return
	}
	f.model.Done(t)
	if a.Reduce {
		j.res.ReduceCounters.Add(a.Counters)
		if a.Output != nil {
			j.res.Outputs[a.Index] = Output{VM: a.VM, Extent: *a.Output}
		}
	} else {
		j.res.MapCounters.Add(a.Counters)
		o := &worker.MapOutput{Map: a.Index, VM: a.VM, Attempt: a.ID}
		j.outputs[a.Index] = o
		for _, vm := range j.vms {
			if n := f.nodes[vm]; n != nil && n.up {
				f.queue(n, worker.Command{Type: worker.CmdOutput, Job: j.app, Outputs: []worker.MapOutput{*o}})
			}
		}
	}
	_ = f.srv.SetCounters(j.app, counterGroups(j.res.MapCounters, j.res.ReduceCounters))
	_ = f.srv.SetAppProgress(j.app, 100*j.model.Progress())
	if j.model.Done() {
		f.end(j, true, "")
	}
}

// counterGroups are the attempts' counts as Hadoop names them.
func counterGroups(m, r worker.Counters) []yarn.CounterGroup {
	c := func(name string, mv, rv int64) yarn.Counter {
		return yarn.Counter{Name: name, TotalCounterValue: mv + rv, MapCounterValue: mv, ReduceCounterValue: rv}
	}
	return []yarn.CounterGroup{
		{CounterGroupName: yarn.FileSystemCounters, Counter: []yarn.Counter{
			c("HDFS_BYTES_READ", m.BytesRead, 0), c("HDFS_BYTES_WRITTEN", 0, r.BytesWritten)}},
		{CounterGroupName: yarn.TaskCounters, Counter: []yarn.Counter{
			c("MAP_INPUT_RECORDS", m.RecordsIn, 0), c("MAP_OUTPUT_RECORDS", m.RecordsOut, 0), c("MAP_OUTPUT_BYTES", m.MapOutputBytes, 0),
			c("REDUCE_SHUFFLE_BYTES", 0, r.ShuffleBytes), c("REDUCE_INPUT_RECORDS", 0, r.RecordsIn), c("REDUCE_OUTPUT_RECORDS", 0, r.RecordsOut)}},
	}
}

// end ends a job: its application finishes, its workers forget it, and
// its waiters wake; f.mu is held.
func (f *Facade) end(j *job, ok bool, why string) {
	if j.ended {
		return
	}
	j.ended = true
	now := f.now()
	if j.model != nil && !ok {
		f.model.Stop(j.model)
	}
	for id, a := range f.attempts {
		if a.job != j {
			continue
		}
		if a.Finish.IsZero() {
			a.Finish, a.Error = time.UnixMilli(now), "job ended: "+why
			_ = f.srv.FinishAttempt(j.app, id, now, false, nil, a.Error)
			j.res.Attempts = append(j.res.Attempts, a.Attempt)
		}
		delete(f.attempts, id)
	}
	if err := f.srv.EndApp(j.app, now, ok); err != nil {
		f.logLocked("yarnfacade: %v", err)
	}
	j.res.Succeeded, j.res.Diagnostics, j.res.Finished = ok, why, time.UnixMilli(now)
	slices.SortFunc(j.res.Attempts, func(x, y Attempt) int { return x.Start.Compare(y.Start) })
	for _, vm := range j.vms {
		n := f.nodes[vm]
		if n == nil || !n.up {
			continue
		}
		cmd := worker.Command{Type: worker.CmdEnd, Job: j.app}
		for _, o := range j.outputs {
			if o != nil && o.VM == vm {
				cmd.Outputs = append(cmd.Outputs, *o)
			}
		}
		f.queue(n, cmd)
	}
	close(j.done)
	f.notify()
}

// lost takes a node whose channel ended; f.mu is held.
func (f *Facade) lost(n *node, err error) {
	if f.nodes[n.vm] != n || !n.up {
		return
	}
	n.up = false
	f.srv.SetNodeState(n.vm, "LOST")
	f.logLocked("yarnfacade: lost %s: %v", n.vm, err)
	for _, app := range slices.Sorted(maps.Keys(f.jobs)) {
		j := f.jobs[app]
		if !j.ended && slices.Contains(j.vms, n.vm) {
			f.end(j, false, fmt.Sprintf("worker %s lost: %v", n.vm, err))
		}
	}
	f.schedule()
	f.notify()
}

// Wait waits for a job to end and returns its result.
func (f *Facade) Wait(ctx context.Context, app string) (Result, error) {
	f.mu.Lock()
	j := f.jobs[app]
	f.mu.Unlock()
	if j == nil {
		return Result{}, fmt.Errorf("%w: %s", ErrNoJob, app)
	}
	select {
	case <-ctx.Done():
		return Result{}, ctx.Err()
	case <-j.done:
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	res := j.res
	res.Attempts = slices.Clone(j.res.Attempts)
	res.Outputs = slices.Clone(j.res.Outputs)
	return res, nil
}

// Close detaches every worker (running jobs fail) and returns once the
// facade's goroutines are done.
func (f *Facade) Close() {
	f.mu.Lock()
	f.closed = true
	nodes := slices.Clone(f.attached)
	f.mu.Unlock()
	for _, n := range nodes {
		n.closer.Close()
	}
	f.running.Wait()
}
