// Package mapreduce is mrmarket's one model of a MapReduce job's tasks:
// how a job's maps and reduces are drawn, laid out over its VMs' slots,
// take free slots and go through their phases, when its reduces start, and
// what it has done. It has no clock and no resources: a driver advances it.
// The cluster simulator (hadoopvm/sim) advances it by events at the CPU,
// disk and network its hosts' agents give each VM; `mrmarket up`'s job
// runner (market) advances it by the CPU time its simulated hosts
// delivered. Both set each running task's Rate, move it on (Task.Advance)
// and hand its phase's end back to the model (Task.End, Cluster.Release,
// Cluster.Done). The facade of the project's worker guests
// (hadoopvm/yarnfacade) uses only its structure: where and when tasks
// start (Schedule, StartOn), which finished (Release, Done) and the job's
// progress, the tasks themselves running for real in the guests; its maps
// go where their input is (Spec.MapVMs).
//
// A job's tasks. A map reads its input from disk, works and writes its
// output; a reduce fetches its shuffle over the network, shuffles and
// reduces (one CPU phase), and writes its result (Spec's MB; a phase with
// nothing to move is left out, so a job without I/O is CPU only). A
// reduce's shuffle can only get as far as the map output that exists (the
// fraction of maps done): one that has caught up waits (Task.Blocked),
// holding its slot. The reduces are scheduled once SlowStart of the maps
// are done. An attempt's work is drawn from a Dist when it joins its
// job's line, and an attempt that fails part way is run again, first in
// that line.
//
// Where the simulator and up's runner model a cluster differently, the
// difference is a named parameter, not a second model:
//
//   - Slots: the VM's slots, taken by any job's maps and reduces alike (the
//     simulator's TaskTrackers), or each job's own map and reduce slots,
//     spread evenly over its VMs (up: a job file states the slots it runs
//     on).
//   - Placement: a job's next task goes to its VM with the most free slots
//     (the simulator: a wave spreads over the VMs), or to the first VM in
//     the cluster's order with one (up: a VM's slots fill before the
//     next's).
//   - Order: jobs take free slots in the order they arrived (up), or in
//     the order they last came to have tasks waiting — a job whose tasks
//     all started rejoins the back when its reduces or a rerun come (the
//     simulator's queue).
//   - Task times: lognormal around a mean (the simulator's workloads) or
//     uniform around a profile's average, never above its maximum (up: a
//     job file's ARIA profile, ProfileSpec), and a first wave of reduces
//     with a shuffle of its own (ARIA's first shuffle).
//
// ARIA is Verma, Cherkasova and Campbell's "ARIA: Automatic Resource
// Inference and Allocation for MapReduce Environments"; Jockey is Ferguson
// et al.'s "Jockey: Guaranteed Job Latency in Data Parallel Clusters".
package mapreduce

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/mrmarket/mrmarket/strategies"
)

// Resource is what a task's phase uses.
type Resource int

// The resources, in a driver's arrays' order.
const (
	CPU        Resource = iota // work in core-seconds (at speed 1)
	Disk                       // MB read or written on the host's disk
	Net                        // MB fetched over the host's network
	NResources                 // how many there are
)

// Dist is a task-time distribution, in core-seconds of work.
type Dist struct {
	Mean float64
	CV   float64 // coefficient of variation (lognormal); 0: constant
	// Max, when set, draws uniformly around Mean within [0, Max] instead
	// of lognormally: a profile's average and maximum (ARIA's).
	Max           float64
	StragglerProb float64 // fraction of tasks that are stragglers
	Straggler     float64 // their work factor
	FailProb      float64 // probability an attempt fails part way
}

// Draw draws one attempt's work from d, and the work left at which it
// fails (−1: it does not). It takes from rng only what d needs.
func (d Dist) Draw(rng *rand.Rand) (work, failAt float64) {
	work = d.Mean
	switch {
	case d.Max > 0:
		if spread := math.Min(d.Max-d.Mean, d.Mean); spread > 0 {
			work = d.Mean + spread*(2*rng.Float64()-1)
		}
	case d.CV > 0:
		sigma := math.Sqrt(math.Log(1 + d.CV*d.CV))
		work = d.Mean * math.Exp(rng.NormFloat64()*sigma-sigma*sigma/2)
	}
	if d.StragglerProb > 0 && rng.Float64() < d.StragglerProb {
		work *= max(d.Straggler, 1)
	}
	failAt = -1
	if d.FailProb > 0 && rng.Float64() < d.FailProb {
		failAt = work * rng.Float64() // fails with this much work left
	}
	return work, failAt
}

// Spec is a job as the model runs it.
type Spec struct {
	Maps, Reduces int
	Map, Reduce   Dist
	// Shuffle is a reduce's shuffle work: it can only be done as map
	// output exists; Reduce is the work after it. A shuffle neither
	// straggles nor fails.
	Shuffle Dist
	// The first FirstWave reduces shuffle FirstShuffle instead (ARIA's
	// first shuffle: the part left once the maps are done). Their typical
	// shuffle is drawn all the same, so that the later tasks' draws do not
	// depend on the wave's size.
	FirstShuffle Dist
	FirstWave    int
	// SlowStart is the fraction of maps done before the reduces are
	// scheduled (mapreduce.job.reduce.slowstart.completedmaps; Hadoop's
	// default is 0.05). 0 means 1: reduces start when the maps are done.
	SlowStart float64
	// I/O per task, in MB (0: none). A map reads MapRead from its host's
	// disk before its work and writes MapWrite (its output) after it; a
	// reduce fetches ShuffleMB over its host's network as the map output
	// exists (its Shuffle and Reduce work follow), then writes ReduceWrite
	// to disk. Each phase uses one resource at a time [recon].
	MapRead, MapWrite, ShuffleMB, ReduceWrite float64
	// MapSlots and ReduceSlots are the job's own slots, with JobSlots.
	MapSlots, ReduceSlots int
	// MapVMs, when set, is where each map's input is: map i's on the VM
	// whose ID is MapVMs[i] ("": anywhere). A job's next map then goes
	// where its input is while a slot is free there (node-local, as
	// YARN's MapReduce AM asks for containers), and to the VM Placement
	// picks only when no VM holding a waiting map's input has one: a
	// free slot is not left idle for locality (no delay scheduling).
	MapVMs []string
}

// ProfileSpec is a job whose task times are drawn from its ARIA profile
// (seconds at a full share): each uniformly around the phase's average,
// never above its maximum; a reduce of the first wave (the first
// reduceSlots) shuffles the first shuffle, later ones the typical one. Its
// reduces start when its maps are done (slow start 1, ARIA's model), and
// it has no I/O phases.
func ProfileSpec(p strategies.JobProfile, maps, reduces, mapSlots, reduceSlots int) Spec {
	return Spec{Maps: maps, Reduces: reduces, MapSlots: mapSlots, ReduceSlots: reduceSlots, SlowStart: 1,
		Map: Dist{Mean: p.MapAvg, Max: p.MapMax}, Reduce: Dist{Mean: p.ReduceAvg, Max: p.ReduceMax},
		Shuffle: Dist{Mean: p.ShTypAvg, Max: p.ShTypMax}, FirstShuffle: Dist{Mean: p.Sh1Avg, Max: p.Sh1Max}, FirstWave: reduceSlots}
}

// Progress is Jockey's progress indicator (totalworkWithQ, Jockey §4.1)
// with mapsDone of the job's maps and reducesDone of its reduces done: two
// stages weighted by their work (Maps·Map.Mean and Reduces·(Shuffle.Mean +
// Reduce.Mean)), queue times 0. It is 0 before anything is done and
// exactly 1 when everything is.
func (s Spec) Progress(mapsDone, reducesDone int) float64 {
	return strategies.MapReduceProgress(mapsDone, s.Maps, s.Map.Mean, reducesDone, s.Reduces, s.Shuffle.Mean+s.Reduce.Mean)
}

// SlotScope is whose slots a VM's are.
type SlotScope int

const (
	// VMSlots: a VM has VM.Slots, taken by any job's maps and reduces.
	VMSlots SlotScope = iota
	// JobSlots: a job has Spec.MapSlots for its maps and ReduceSlots for
	// its reduces, spread evenly over its VMs (the first ones take the
	// rest); a VM runs any number of jobs' tasks.
	JobSlots
)

// Placement is which of a job's VMs with a free slot takes its next task.
type Placement int

const (
	// Widest: the one with the most free slots (ties: the job's order).
	Widest Placement = iota
	// Packed: the first in the cluster's order.
	Packed
)

// Order is the order jobs take free slots in.
type Order int

const (
	// Requeue: the jobs with tasks waiting, a job whose tasks had all
	// started joining the back when it has some again.
	Requeue Order = iota
	// Arrival: the order the jobs were added in.
	Arrival
)

// Config is how a cluster lays out and schedules its jobs' tasks.
type Config struct {
	Slots     SlotScope
	Placement Placement
	Order     Order
}

// VM is a machine whose slots run tasks.
type VM struct {
	ID      string
	Slots   int     // with VMSlots
	Index   int     // its place in the cluster's order
	Running []*Task // in the order they started
}

// Job is a job's tasks: waiting, running and done.
type Job struct {
	ID      string
	Spec    Spec
	Pending []*Task // not started, in the order they take slots
	// MapsDone and ReducesDone count the tasks finished; Running those on
	// a slot now; Attempts those started, failed attempts included.
	MapsDone, ReducesDone, Running, Attempts int
	// Held keeps the job from starting tasks (its driver has not let it
	// run yet).
	Held bool

	vms       []*VM
	slots     map[*VM][2]int // its own map and reduce slots on each VM, with JobSlots
	rng       *rand.Rand
	arrival   int
	queued    bool // in the cluster's queue
	reducesIn bool // the reduces have been scheduled
}

// Done reports every map and reduce finished.
func (j *Job) Done() bool { return j.MapsDone == j.Spec.Maps && j.ReducesDone == j.Spec.Reduces }

// Progress is Jockey's indicator of the job (Spec.Progress); a finished
// job is 1.
func (j *Job) Progress() float64 {
	if j.Done() {
		return 1
	}
	return j.Spec.Progress(j.MapsDone, j.ReducesDone)
}

// Slots is the job's own map (or reduce) slots on v, with JobSlots.
func (j *Job) Slots(v *VM, reduce bool) int {
	if reduce {
		return j.slots[v][1]
	}
	return j.slots[v][0]
}

// Phase is one part of a task, on one resource.
type Phase struct {
	Res         Resource
	Left, Total float64 // what is left of it and all of it: core-seconds at speed 1, or MB
	// Waits marks a reduce's phase that needs the map output: with maps
	// left, Left cannot fall below Total − Gated·(maps not done)/maps,
	// Gated being the part of Total that exists only as map output does
	// (the shuffle); the rest waits for every map.
	Waits bool
	Gated float64
}

// Task is an attempt of one of a job's maps or reduces.
type Task struct {
	Job      *Job
	Reduce   bool
	Index    int
	Phases   []Phase // what is left to do, the current one first
	FailAt   float64 // CPU work left at which this attempt fails (−1: it does not)
	Attempts int     // of this task so far, this one included once started
	VM       *VM     // where it runs, once started
	// Rate is its current phase's progress per second, as its driver set it.
	Rate float64
}

// Cur is the task's current phase.
func (t *Task) Cur() *Phase { return &t.Phases[0] }

// Left is what is left of its current phase.
func (t *Task) Left() float64 { return t.Phases[0].Left }

// Work is its CPU work, all of it.
func (t *Task) Work() float64 {
	var w float64
	for _, p := range t.Phases {
		if p.Res == CPU {
			w += p.Total
		}
	}
	return w
}

// Scale multiplies what the task has to do by f: a driver's unit for its
// drawn times (up: a profile's time at a full share is CPU work at what
// a slot gets).
func (t *Task) Scale(f float64) {
	for i := range t.Phases {
		p := &t.Phases[i]
		p.Left, p.Total, p.Gated = p.Left*f, p.Total*f, p.Gated*f
	}
}

// Advance moves the task on for dt seconds at its rate.
func (t *Task) Advance(dt float64) {
	p := t.Cur()
	p.Left = max(p.Left-t.Rate*dt, 0)
}

// Floor is what the task's current phase cannot get below now: for a
// reduce's shuffle while maps remain, the rest of the phase plus the
// shuffle of the map output that does not exist yet.
func (t *Task) Floor() float64 {
	j, p := t.Job, t.Cur()
	left := j.Spec.Maps - j.MapsDone
	if !p.Waits || left == 0 {
		return 0
	}
	return p.Total - p.Gated + p.Gated*float64(left)/float64(j.Spec.Maps)
}

// Blocked reports a reduce that has shuffled all the map output there is.
func (t *Task) Blocked() bool {
	f := t.Floor()
	return f > 0 && t.Left() <= f*(1+1e-12)+1e-9
}

// ToGo is how far its current phase can go before the task needs its
// driver again: it waits for map output, fails or ends the phase.
func (t *Task) ToGo() float64 {
	p := t.Cur()
	floor := t.Floor()
	if p.Res == CPU {
		floor = max(floor, t.FailAt)
	}
	return p.Left - floor
}

// Failed reports an attempt that failed (once it has ended).
func (t *Task) Failed() bool { return t.FailAt >= 0 }

// Outcome is what a task does when its current phase has gone as far as
// it can (ToGo).
type Outcome int

const (
	Waiting   Outcome = iota // a reduce caught up with the map output: it holds its slot
	NextPhase                // on to its next phase, in the same slot
	Finished                 // the attempt is over (Release, then Done)
	Failed                   // the attempt failed part way (Release, then Done runs it again)
)

// End moves the task past its current phase once it has gone as far as it
// can.
func (t *Task) End() Outcome {
	p := t.Cur()
	failed := p.Res == CPU && t.FailAt >= 0 && p.Left <= t.FailAt*(1+1e-12)+1e-9
	switch {
	case failed:
		return Failed
	case t.Blocked():
		return Waiting
	}
	if p.Res == CPU {
		t.FailAt = -1
	}
	if len(t.Phases) > 1 {
		t.Phases = t.Phases[1:]
		return NextPhase
	}
	return Finished
}

// Cluster is the VMs and the jobs whose tasks they run.
type Cluster struct {
	cfg   Config
	vms   []*VM
	queue []*Job // jobs that may have tasks waiting, in the Order
	added int
}

// New is an empty cluster.
func New(cfg Config) *Cluster { return &Cluster{cfg: cfg} }

// AddVM adds a VM, last in the cluster's order.
func (c *Cluster) AddVM(id string, slots int) *VM {
	v := &VM{ID: id, Slots: slots, Index: len(c.vms)}
	c.vms = append(c.vms, v)
	return v
}

// Add adds a job on vms (in its order) whose tasks' work is drawn from rng,
// and schedules its maps; it takes slots from the next Schedule.
func (c *Cluster) Add(id string, spec Spec, vms []*VM, rng *rand.Rand) *Job {
	j := &Job{ID: id, Spec: spec, vms: vms, rng: rng, arrival: c.added}
	c.added++
	if c.cfg.Slots == JobSlots {
		j.slots = make(map[*VM][2]int, len(vms))
		for i, v := range vms {
			j.slots[v] = [2]int{spread(spec.MapSlots, i, len(vms)), spread(spec.ReduceSlots, i, len(vms))}
		}
	}
	for i := range spec.Maps {
		j.Pending = append(j.Pending, j.newMap(i))
	}
	c.enqueue(j)
	return j
}

// spread is the i-th of n VMs' part of slots: an even split, the first
// ones taking the rest.
func spread(slots, i, n int) int {
	s := slots / n
	if i < slots%n {
		s++
	}
	return s
}

// enqueue puts a job that has tasks waiting in the queue, if it is not.
func (c *Cluster) enqueue(j *Job) {
	if j.queued {
		return
	}
	j.queued = true
	if c.cfg.Order == Arrival {
		i, _ := slices.BinarySearchFunc(c.queue, j.arrival, func(x *Job, a int) int { return x.arrival - a })
		c.queue = slices.Insert(c.queue, i, j)
		return
	}
	c.queue = append(c.queue, j)
}

// Schedule starts waiting tasks on every free slot, the jobs in the
// cluster's Order, each job's tasks in its line, and returns them in the
// order they started.
func (c *Cluster) Schedule() []*Task {
	var started []*Task
	keep := c.queue[:0]
	for _, j := range c.queue {
		for !j.Held && len(j.Pending) > 0 {
			v := c.place(j)
			if v == nil {
				break
			}
			started = append(started, c.start(j, v))
		}
		if len(j.Pending) > 0 {
			keep = append(keep, j)
		} else {
			j.queued = false
		}
	}
	clear(c.queue[len(keep):])
	c.queue = keep
	return started
}

// StartOn starts a task on one free slot of v: the first job, in the
// cluster's Order, with a task waiting and a free slot for it there.
func (c *Cluster) StartOn(v *VM) *Task {
	for _, j := range c.queue {
		if !j.Held && len(j.Pending) > 0 && slices.Contains(j.vms, v) && c.free(j, v, j.Pending[c.nextOn(j, v)].Reduce) > 0 {
			return c.start(j, v)
		}
	}
	return nil
}

// nextOn is which of the job's waiting tasks a slot on v takes: its first
// map whose input is on v (Spec.MapVMs) while v has a map slot free, else
// the first in its line.
func (c *Cluster) nextOn(j *Job, v *VM) int {
	if j.Spec.MapVMs != nil && c.free(j, v, false) > 0 {
		for k, t := range j.Pending {
			if !t.Reduce && j.Spec.MapVMs[t.Index] == v.ID {
				return k
			}
		}
	}
	return 0
}

// place is the VM that takes the job's next task, nil when none has a free
// slot for it: where a waiting map's input is, else by the Placement.
func (c *Cluster) place(j *Job) *VM {
	if j.Spec.MapVMs != nil {
		for _, t := range j.Pending {
			if t.Reduce {
				continue
			}
			for _, v := range j.vms {
				if v.ID == j.Spec.MapVMs[t.Index] && c.free(j, v, false) > 0 {
					return v
				}
			}
		}
	}
	var best *VM
	bestFree := 0
	for _, v := range j.vms {
		free := c.free(j, v, j.Pending[0].Reduce)
		if free <= 0 {
			continue
		}
		switch {
		case best == nil,
			c.cfg.Placement == Widest && free > bestFree,
			c.cfg.Placement == Packed && v.Index < best.Index:
			best, bestFree = v, free
		}
	}
	return best
}

// free is how many more of the job's maps (or reduces) v can run.
func (c *Cluster) free(j *Job, v *VM, reduce bool) int {
	if c.cfg.Slots == VMSlots {
		return v.Slots - len(v.Running)
	}
	n := j.Slots(v, reduce)
	for _, t := range v.Running {
		if t.Job == j && t.Reduce == reduce {
			n--
		}
	}
	return n
}

func (c *Cluster) start(j *Job, v *VM) *Task {
	k := c.nextOn(j, v)
	t := j.Pending[k]
	if k == 0 {
		j.Pending = j.Pending[1:]
	} else {
		j.Pending = slices.Delete(j.Pending, k, k+1)
	}
	t.VM = v
	t.Attempts++
	j.Attempts++
	j.Running++
	v.Running = append(v.Running, t)
	return t
}

// Release takes an attempt that is over off its slot.
func (c *Cluster) Release(t *Task) {
	v := t.VM
	if i := slices.Index(v.Running, t); i >= 0 {
		v.Running = slices.Delete(v.Running, i, i+1)
	}
	t.Job.Running--
}

// Done accounts an attempt that is over and released: a failed one is run
// again (first in its job's line), a finished map may schedule the
// reduces.
func (c *Cluster) Done(t *Task) {
	j := t.Job
	switch {
	case t.Failed():
		var again *Task
		if t.Reduce {
			again = j.newReduce(t.Index)
		} else {
			again = j.newMap(t.Index)
		}
		again.Attempts = t.Attempts
		j.Pending = append([]*Task{again}, j.Pending...)
		c.enqueue(j)
	case t.Reduce:
		j.ReducesDone++
	default:
		j.MapsDone++
		c.startReduces(j)
	}
}

// Stop ends a job's run: its tasks leave their slots and none starts.
func (c *Cluster) Stop(j *Job) {
	j.Held, j.Pending = true, nil
	for _, v := range j.vms {
		v.Running = slices.DeleteFunc(v.Running, func(t *Task) bool { return t.Job == j })
	}
	j.Running = 0
}

// startReduces schedules a job's reduces once enough maps are done.
func (c *Cluster) startReduces(j *Job) {
	if j.reducesIn || j.Spec.Reduces == 0 {
		return
	}
	slow := j.Spec.SlowStart
	if slow <= 0 || slow > 1 {
		slow = 1
	}
	if float64(j.MapsDone) < slow*float64(j.Spec.Maps) {
		return
	}
	j.reducesIn = true
	for i := range j.Spec.Reduces {
		j.Pending = append(j.Pending, j.newReduce(i))
	}
	c.enqueue(j)
}

// newMap is an attempt of map i: read its input, work, write its output.
func (j *Job) newMap(i int) *Task {
	s := j.Spec
	w, failAt := s.Map.Draw(j.rng)
	return &Task{Job: j, Index: i, FailAt: failAt, Phases: phases(
		Phase{Res: Disk, Total: s.MapRead},
		Phase{Res: CPU, Total: w},
		Phase{Res: Disk, Total: s.MapWrite})}
}

// newReduce is an attempt of reduce i: fetch the map output over the
// network, shuffle and reduce, write the result. Without network I/O the
// shuffle work itself waits for the map output.
func (j *Job) newReduce(i int) *Task {
	s := j.Spec
	shuffle := func(d Dist) float64 {
		if d.Mean <= 0 {
			return 0
		}
		w, _ := Dist{Mean: d.Mean, CV: d.CV, Max: d.Max}.Draw(j.rng)
		return w
	}
	sh := shuffle(s.Shuffle)
	if i < s.FirstWave {
		sh = shuffle(s.FirstShuffle)
	}
	post, failAt := s.Reduce.Draw(j.rng)
	work := Phase{Res: CPU, Total: sh + post, Gated: sh, Waits: true}
	if s.ShuffleMB > 0 {
		work.Gated = 0 // it follows the fetch, which waits for every map
	}
	return &Task{Job: j, Reduce: true, Index: i, FailAt: failAt, Phases: phases(
		Phase{Res: Net, Total: s.ShuffleMB, Gated: s.ShuffleMB, Waits: true},
		work,
		Phase{Res: Disk, Total: s.ReduceWrite})}
}

// phases are a task's phases with something to do, each with all of it
// left; a task has at least its CPU phase.
func phases(all ...Phase) []Phase {
	var out []Phase
	for _, p := range all {
		if p.Total > 0 || p.Res == CPU {
			p.Left = p.Total
			out = append(out, p)
		}
	}
	return out
}
