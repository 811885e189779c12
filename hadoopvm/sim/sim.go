// Package sim is mrmarket's discrete-event cluster simulator: hosts with
// cores, speed and background load, the users' Hadoop VMs on them, and
// MapReduce jobs whose tasks run in the VMs' slots, on a virtual clock,
// deterministic for a seed.
//
// One code path: each host is run by a real agent (agent.New over a
// SimEnforcer) that holds the bids, computes the shares with the real share
// rule and charges the bids with the real charging loop; the CPU a VM gets
// is agent.Allocate — what SimEnforcer delivers — over the shares the agent
// applied and the VMs' demand. Only the clock, the enforcer and the
// transport are simulated.
//
// Model. A task is work in core-seconds; a running task uses at most one
// core, so a VM's demand is its running tasks (plus, for a host's
// background VM, its constant load). Between events every task progresses
// at its VM's allocation divided among its running tasks, times the host's
// speed. A job's maps run in waves over the job's VMs' free slots (FIFO
// across jobs). Its reduces are scheduled once SlowStart of its maps are
// done and shuffle while the maps still run, but a reduce's shuffle can only
// get as far as the map output that exists (the fraction of maps done):
// a reduce that has caught up waits, holding its slot and using no CPU.
// After its shuffle a reduce does its reduce work. Task durations are lognormal around their mean
// with a coefficient of variation, with stragglers (a factor on a fraction
// of tasks) and failures (an attempt fails part way with a probability and
// is run again).
//
// Disk and network. A host may also govern its disk and its network
// bandwidth (HostSpec.Disk, Net, MB/s). A task is then a sequence of
// steps, each on one resource: a map reads its input from disk, works,
// and writes its output to disk; a reduce fetches its shuffle over the
// network (only as far as the map output exists, like the shuffle work
// above), works, and writes its result to disk (JobSpec.MapRead, MapWrite,
// ShuffleMB, ReduceWrite). Each resource is divided among the VMs using it
// by agent.Allocate over the same shares as the cores — the agent sets
// CPU shares, blkio weights and interface bandwidth from the same rates —
// work-conserving, a stream able to use the whole device [recon: the
// mapper's outgoing bandwidth is not modelled, only the reducer's
// incoming]. A host that governs neither leaves I/O instantaneous, and a
// job without I/O runs exactly as on the CPU-only model.
package sim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Config configures a simulation.
type Config struct {
	Seed  uint64
	Start time.Time
	// Tick is the agents' tick (charging and reconcile); default 10 s.
	Tick time.Duration
}

// HostSpec is a simulated host. Background is the cores a CPU-hungry
// background VM wants on it (seed 003 §6), BackgroundRate that VM's
// spending rate (micro-credits per second; 0: it has only the floor share).
//
// Disk and Net are the host's disk bandwidth and network bandwidth (into
// the host), in MB/s; 0 leaves the resource ungoverned: I/O on it takes no
// time. They are shared among the VMs doing I/O by the same weights as the
// cores (the agent enforces CPU shares, blkio weights and interface
// bandwidth from the same rates), work-conserving like the cores: a VM
// not using its part leaves it to the others [recon].
//
// DiskFair and NetFair leave that resource outside the market: the host
// has the bandwidth but divides it equally among the VMs using it,
// whatever they pay — a device's own fair queueing, as seed 003's testbed
// did with the disk it could not govern (§7.2).
//
// DiskThrottle and NetThrottle are how mrmarket's agents govern such a
// device: it still divides itself equally, but each VM is capped at what
// its agent's throttle planned at the last tick (agent.Throttle, the
// libvirt enforcer's planner: its share of the measured bandwidth,
// re-spread over the VMs by what they moved).
type HostSpec struct {
	ID                string
	Cores             float64
	Speed             float64 // work per core-second; default 1
	Background        float64
	BackgroundRate    float64
	Disk, Net         float64 // MB/s; 0: I/O takes no time
	DiskFair, NetFair bool    // shared equally, not by the shares
	// shared equally under the agent's per-VM caps
	DiskThrottle, NetThrottle bool
}

// VMSpec is a user's Hadoop VM: Slots tasks at once.
type VMSpec struct {
	ID, Owner, Host string
	Slots           int
}

// Dist is a task-duration distribution, in core-seconds of work.
type Dist struct {
	Mean          float64
	CV            float64 // coefficient of variation (lognormal); 0: constant
	StragglerProb float64 // fraction of tasks that are stragglers
	Straggler     float64 // their work factor
	FailProb      float64 // probability an attempt fails part way
}

// JobSpec is a MapReduce job. Name is its YARN application name
// ("workflow:stage" for a stage of a workflow); After lists jobs that must
// finish before it is submitted (a workflow's earlier stages).
type JobSpec struct {
	ID, User string
	Name     string
	After    []string
	VMs      []string // the user's VMs it runs on
	Submit   time.Duration
	Maps     int
	Reduces  int
	Map      Dist
	Reduce   Dist
	// Shuffle is a reduce's shuffle work: it can only be done as map
	// output exists (see SlowStart); Reduce is the work after it.
	Shuffle Dist
	// SlowStart is the fraction of maps done before the reduces are
	// scheduled (mapreduce.job.reduce.slowstart.completedmaps; Hadoop's
	// default is 0.05). 0 means 1: reduces start when the maps are done.
	SlowStart float64
	// I/O per task, in MB (0: none). A map reads MapRead from its host's
	// disk before its work and writes MapWrite (its output) after it; a
	// reduce fetches ShuffleMB over its host's network as the map output
	// exists (its Shuffle and Reduce work follow), then writes ReduceWrite
	// to disk. Each step uses one resource at a time [recon].
	MapRead, MapWrite, ShuffleMB, ReduceWrite float64
}

// JobResult is what happened to a job.
type JobResult struct {
	ID, User       string
	Submit, Finish time.Time
	Attempts       int // task attempts run, failures included
}

// Duration is the job's completion time.
func (r JobResult) Duration() time.Duration { return r.Finish.Sub(r.Submit) }

// Errors of the simulator.
var ErrSpec = errors.New("sim: invalid specification")

type event struct {
	at   time.Time
	seq  uint64
	kind int
	host *host
	ver  uint64 // host version the event was computed for
	task *taskRun
	job  *jobRun
}

const (
	evTaskDone = iota
	evJobSubmit
	evTick
)

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type host struct {
	spec    HostSpec
	agent   *agent.Agent
	sim     *agent.SimEnforcer
	vms     []*vm
	ver     uint64
	updated time.Time
	bg      string // background VM id, "" if none
}

type vm struct {
	spec    VMSpec
	host    *host
	running []*taskRun
	cpu     float64 // cores allocated now
	used    float64 // core-seconds used so far
	// io is the disk and network bandwidth allocated now (MB/s) and moved
	// is the MB moved so far, by resource.
	io, moved [nResources]float64
}

// resource is what a task's step uses.
type resource int

const (
	resCPU  resource = iota // work in core-seconds at speed 1
	resDisk                 // MB read or written on the host's disk
	resNet                  // MB fetched over the host's network
	nResources
)

// ungoverned is the bandwidth of a resource a host does not govern: I/O
// on it is over at once.
const ungoverned = 1e12

// step is one part of a task, on one resource.
type step struct {
	res   resource
	left  float64 // what is left of it: core-seconds at speed 1, or MB
	total float64
	// waits marks a reduce's step that needs the map output: with maps
	// left, left cannot fall below total − gated·(maps done)/maps, gated
	// being the part of total that exists only as map output does (the
	// shuffle); the rest waits for every map.
	waits bool
	gated float64
}

type taskRun struct {
	job    *jobRun
	reduce bool
	index  int
	steps  []step  // what is left to do, the current one first
	failAt float64 // CPU work left at which this attempt fails (−1: it does not)
	vm     *vm
	// rate is the current step's progress per second now.
	rate     float64
	attempts int
}

// cur is the task's current step.
func (t *taskRun) cur() *step { return &t.steps[0] }

type jobRun struct {
	spec      JobSpec
	reducesIn bool       // the reduces have been scheduled
	waiting   bool       // submitted, waiting for the jobs it comes after
	pending   []*taskRun // not started
	running   int
	mapsLeft  int
	redsLeft  int
	submitted time.Time
	result    JobResult
}

// Sim is a simulation.
type Sim struct {
	cfg     Config
	rng     *rand.Rand
	now     time.Time
	queue   eventQueue
	seq     uint64
	hosts   map[string]*host
	order   []*host
	vms     map[string]*vm
	queueW  []*jobRun // jobs with pending tasks, FIFO
	jobs    []*jobRun
	byID    map[string]*jobRun
	after   map[string][]*jobRun // job → the jobs that come after it
	events  int64
	ledger  *Ledger
	obs     []Observer
	brokers []Broker
	// ticking is whether the next tick is queued: a run to completion stops
	// ticking once every job has finished (else it would never end), and
	// the next run starts again.
	ticking bool
}

// Observer is told what happens in the simulated cluster, as a YARN
// ResourceManager would see it (yarntest drives its emulator from it).
type Observer interface {
	JobSubmitted(job JobSpec, at time.Time)
	TaskStarted(job string, reduce bool, index int, vm string, at time.Time)
	TaskFinished(job string, reduce bool, index int, vm string, at time.Time, ok bool)
	JobFinished(job string, at time.Time)
}

// Observe adds an observer.
func (s *Sim) Observe(o Observer) { s.obs = append(s.obs, o) }

// Broker is what the simulator needs of the broker (broker.Broker has it):
// it is fed every host's state and ticked after the agents, on the
// simulator's clock.
type Broker interface {
	Observe(st wire.HostState)
	Tick(ctx context.Context, now time.Time) error
}

// Attach makes b run in the simulation. Build b with Agents: s.Agents(),
// Bank: s.Ledger(), Now: s.Now and Serial: true (the simulation is
// single-threaded and deterministic).
func (s *Sim) Attach(b Broker) {
	s.brokers = append(s.brokers, b)
	for _, h := range s.order {
		b.Observe(h.agent.State())
	}
}

// Agents is the simulated transport from a broker to the hosts' agents.
func (s *Sim) Agents() *Agents { return &Agents{s: s} }

// Agents delivers a broker's bid requests to the simulated hosts' agents
// in-process (broker.Agents).
type Agents struct{ s *Sim }

// Bid applies a bid request on host's agent.
func (a *Agents) Bid(ctx context.Context, host string, req *wire.BidRequest) error {
	h, ok := a.s.hosts[host]
	if !ok {
		return fmt.Errorf("%w: unknown host %s", wire.ErrUnavailable, host)
	}
	a.s.integrate(h)
	_, err := h.agent.SetBids(ctx, req)
	a.s.refresh(h)
	return err
}

// New builds a simulation of hosts and VMs.
func New(cfg Config, hosts []HostSpec, vms []VMSpec) (*Sim, error) {
	if cfg.Tick <= 0 {
		cfg.Tick = 10 * time.Second
	}
	s := &Sim{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), now: cfg.Start,
		hosts: map[string]*host{}, vms: map[string]*vm{}, ledger: NewLedger(), byID: map[string]*jobRun{}, after: map[string][]*jobRun{}}
	byHost := map[string][]agent.VM{}
	for _, v := range vms {
		if v.Slots <= 0 {
			return nil, fmt.Errorf("%w: VM %s has no slots", ErrSpec, v.ID)
		}
		byHost[v.Host] = append(byHost[v.Host], agent.VM{ID: v.ID, Owner: v.Owner})
	}
	clock := func() time.Time { return s.now }
	for _, hs := range hosts {
		if hs.Cores <= 0 {
			return nil, fmt.Errorf("%w: host %s has no cores", ErrSpec, hs.ID)
		}
		if hs.Speed <= 0 {
			hs.Speed = 1
		}
		if !(hs.Disk >= 0 && hs.Net >= 0) || math.IsInf(hs.Disk, 0) || math.IsInf(hs.Net, 0) {
			return nil, fmt.Errorf("%w: host %s: disk %v, net %v MB/s", ErrSpec, hs.ID, hs.Disk, hs.Net)
		}
		h := &host{spec: hs, updated: cfg.Start}
		agentVMs := byHost[hs.ID]
		if hs.Background > 0 {
			h.bg = "bg-" + hs.ID
			agentVMs = append(agentVMs, agent.VM{ID: h.bg, Owner: "background"})
		}
		h.sim = agent.NewSimEnforcer(clock, hs.Cores, agentVMs...)
		h.sim.SetIOCapacity(agent.IOUse{Disk: hs.Disk, Net: hs.Net})
		h.sim.SetThrottled(hs.DiskThrottle, hs.NetThrottle)
		a, err := agent.New(agent.Config{Host: hs.ID, Enforcer: h.sim, Capturer: s.ledger, Now: clock, Capacity: hs.Cores})
		if err != nil {
			return nil, err
		}
		h.agent = a
		s.hosts[hs.ID] = h
		s.order = append(s.order, h)
	}
	for _, v := range vms {
		h, ok := s.hosts[v.Host]
		if !ok {
			return nil, fmt.Errorf("%w: VM %s on unknown host %s", ErrSpec, v.ID, v.Host)
		}
		m := &vm{spec: v, host: h}
		h.vms = append(h.vms, m)
		s.vms[v.ID] = m
	}
	for _, h := range s.order {
		if h.bg != "" && h.spec.BackgroundRate > 0 {
			budget := money.Micro(h.spec.BackgroundRate * 365 * 24 * 3600)
			if _, err := h.agent.SetBids(context.Background(), &wire.BidRequest{Set: []wire.Bid{{VM: h.bg, Owner: "background", Plan: "background",
				Hold: "background-" + h.spec.ID, Budget: min(budget, money.Max), Duration: wire.Duration(365 * 24 * time.Hour)}}}); err != nil {
				return nil, err
			}
		}
		s.refresh(h)
	}
	s.push(&event{at: cfg.Start.Add(cfg.Tick), kind: evTick})
	s.ticking = true
	return s, nil
}

func (s *Sim) push(e *event) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.queue, e)
}

// Now is the simulation's clock.
func (s *Sim) Now() time.Time { return s.now }

// Events is how many events ran.
func (s *Sim) Events() int64 { return s.events }

// Ledger is where the agents' captures go.
func (s *Sim) Ledger() *Ledger { return s.ledger }

// Bid places (or replaces) a spending rate on a VM through its host's
// agent: budget over duration, from now.
func (s *Sim) Bid(vmID, plan string, budget money.Micro, d time.Duration) error {
	m, ok := s.vms[vmID]
	if !ok {
		return fmt.Errorf("%w: unknown VM %s", ErrSpec, vmID)
	}
	s.integrate(m.host)
	_, err := m.host.agent.SetBids(context.Background(), &wire.BidRequest{Set: []wire.Bid{{VM: vmID, Owner: m.spec.Owner, Plan: plan,
		Hold: "hold-" + plan, Budget: budget, Duration: wire.Duration(d)}}})
	if err != nil {
		return err
	}
	s.refresh(m.host)
	return nil
}

// SetBackground changes a host's background load (cores) from now.
func (s *Sim) SetBackground(hostID string, cores float64) error {
	h, ok := s.hosts[hostID]
	if !ok || h.bg == "" {
		return fmt.Errorf("%w: host %s has no background VM", ErrSpec, hostID)
	}
	s.integrate(h)
	h.spec.Background = cores
	s.refresh(h)
	return nil
}

// Submit adds a job.
func (s *Sim) Submit(j JobSpec) error {
	if j.Maps < 1 || j.Reduces < 0 || len(j.VMs) == 0 || j.Map.Mean <= 0 || j.Reduces > 0 && j.Reduce.Mean <= 0 {
		return fmt.Errorf("%w: job %s", ErrSpec, j.ID)
	}
	for _, mb := range []float64{j.MapRead, j.MapWrite, j.ShuffleMB, j.ReduceWrite} {
		if !(mb >= 0) || math.IsInf(mb, 0) {
			return fmt.Errorf("%w: job %s: I/O of %v MB", ErrSpec, j.ID, mb)
		}
	}
	for _, v := range j.VMs {
		if _, ok := s.vms[v]; !ok {
			return fmt.Errorf("%w: job %s on unknown VM %s", ErrSpec, j.ID, v)
		}
	}
	if _, dup := s.byID[j.ID]; dup {
		return fmt.Errorf("%w: job %s submitted twice", ErrSpec, j.ID)
	}
	for _, dep := range j.After {
		if _, ok := s.byID[dep]; !ok {
			return fmt.Errorf("%w: job %s comes after unknown job %s (submit it first)", ErrSpec, j.ID, dep)
		}
	}
	if j.Name == "" {
		j.Name = j.ID
	}
	jr := &jobRun{spec: j, mapsLeft: j.Maps, redsLeft: j.Reduces, result: JobResult{ID: j.ID, User: j.User}}
	s.jobs = append(s.jobs, jr)
	s.byID[j.ID] = jr
	for _, dep := range j.After {
		s.after[dep] = append(s.after[dep], jr)
	}
	s.push(&event{at: s.cfg.Start.Add(j.Submit), kind: evJobSubmit, job: jr})
	return nil
}

// work draws one task's work from d.
func (s *Sim) work(d Dist) (work, failAt float64) {
	work = d.Mean
	if d.CV > 0 {
		sigma := math.Sqrt(math.Log(1 + d.CV*d.CV))
		work = d.Mean * math.Exp(s.rng.NormFloat64()*sigma-sigma*sigma/2)
	}
	if d.StragglerProb > 0 && s.rng.Float64() < d.StragglerProb {
		work *= max(d.Straggler, 1)
	}
	failAt = -1
	if d.FailProb > 0 && s.rng.Float64() < d.FailProb {
		failAt = work * s.rng.Float64() // fails with this much work left
	}
	return work, failAt
}

// Run runs until every job finished (or until deadline of simulated time)
// and returns the jobs' results in submission order.
func (s *Sim) Run(deadline time.Duration) ([]JobResult, error) {
	if err := s.run(s.cfg.Start.Add(deadline), true); err != nil {
		return nil, err
	}
	out := make([]JobResult, len(s.jobs))
	for i, j := range s.jobs {
		out[i] = j.result
	}
	return out, nil
}

// RunUntil runs the events up to at and stops there, the clock at at. The
// agents and brokers are ticked all along, whether jobs run or not.
func (s *Sim) RunUntil(at time.Time) error {
	if err := s.run(at, false); err != nil {
		return err
	}
	if at.After(s.now) {
		s.now = at
	}
	return nil
}

func (s *Sim) run(end time.Time, toCompletion bool) error {
	if !s.ticking {
		// The next tick on the grid from Start: the agents and the broker
		// run whenever the clock does, idle or not, as they do for real.
		n := s.now.Sub(s.cfg.Start)/s.cfg.Tick + 1
		s.push(&event{at: s.cfg.Start.Add(n * s.cfg.Tick), kind: evTick})
		s.ticking = true
	}
	for s.queue.Len() > 0 {
		if !toCompletion && s.queue[0].at.After(end) {
			return nil
		}
		e := heap.Pop(&s.queue).(*event)
		if e.kind == evTaskDone && e.ver != e.host.ver {
			// Computed for a host state that has changed: a task starved
			// for a while leaves one far in the future, which is no reason
			// to stop.
			continue
		}
		if e.at.After(end) {
			return fmt.Errorf("sim: jobs still running after %s of simulated time", end.Sub(s.cfg.Start))
		}
		s.now = e.at
		s.events++
		switch e.kind {
		case evJobSubmit:
			s.submit(e.job)
		case evTaskDone:
			s.taskDone(e.task)
		case evTick:
			if toCompletion && s.done() {
				s.ticking = false
				continue
			}
			for _, h := range s.order {
				s.integrate(h)
				st, err := h.agent.Tick(context.Background(), s.now)
				if err != nil {
					return err
				}
				s.refresh(h)
				for _, b := range s.brokers {
					b.Observe(st)
				}
			}
			for _, b := range s.brokers {
				if err := b.Tick(context.Background(), s.now); err != nil {
					return err
				}
			}
			s.push(&event{at: s.now.Add(s.cfg.Tick), kind: evTick})
		}
	}
	return nil
}

func (s *Sim) done() bool {
	for _, j := range s.jobs {
		if j.result.Finish.IsZero() {
			return false
		}
	}
	return true
}

func (s *Sim) submit(j *jobRun) {
	for _, dep := range j.spec.After {
		if s.byID[dep].result.Finish.IsZero() {
			j.waiting = true // released when its last dependency finishes
			return
		}
	}
	j.waiting = false
	j.submitted, j.result.Submit = s.now, s.now
	for _, o := range s.obs {
		o.JobSubmitted(j.spec, s.now)
	}
	for i := range j.spec.Maps {
		j.pending = append(j.pending, s.newMap(j, i))
	}
	s.queueW = append(s.queueW, j)
	s.schedule()
}

// schedule starts pending tasks on free slots, FIFO over jobs.
func (s *Sim) schedule() {
	touched := map[*host]bool{}
	var keep []*jobRun
	for _, j := range s.queueW {
		for len(j.pending) > 0 {
			m := s.freeVM(j)
			if m == nil {
				break
			}
			if !touched[m.host] {
				s.integrate(m.host)
				touched[m.host] = true
			}
			t := j.pending[0]
			j.pending = j.pending[1:]
			t.vm, t.attempts = m, t.attempts+1
			j.result.Attempts++
			m.running = append(m.running, t)
			j.running++
			for _, o := range s.obs {
				o.TaskStarted(j.spec.ID, t.reduce, t.index, m.spec.ID, s.now)
			}
		}
		if len(j.pending) > 0 {
			keep = append(keep, j)
		}
	}
	s.queueW = keep
	hosts := make([]*host, 0, len(touched))
	for h := range touched {
		hosts = append(hosts, h)
	}
	sort.Slice(hosts, func(a, b int) bool { return hosts[a].spec.ID < hosts[b].spec.ID })
	for _, h := range hosts {
		s.refresh(h)
	}
}

// freeVM is the job's VM with the most free slots (ties: the job's order).
func (s *Sim) freeVM(j *jobRun) *vm {
	var best *vm
	for _, id := range j.spec.VMs {
		m := s.vms[id]
		if free := m.spec.Slots - len(m.running); free > 0 && (best == nil || free > best.spec.Slots-len(best.running)) {
			best = m
		}
	}
	return best
}

func (s *Sim) taskDone(t *taskRun) {
	m := t.vm
	s.integrate(m.host)
	p := t.cur()
	failed := p.res == resCPU && t.failAt >= 0 && p.left <= t.failAt*(1+1e-12)+1e-9
	if !failed && t.blocked() {
		s.refresh(m.host) // caught up with the maps: it waits for more output
		return
	}
	if !failed && p.res == resCPU {
		t.failAt = -1
	}
	if !failed && len(t.steps) > 1 { // on to its next step
		t.steps = t.steps[1:]
		s.refresh(m.host)
		return
	}
	for i, r := range m.running {
		if r == t {
			m.running = append(m.running[:i], m.running[i+1:]...)
			break
		}
	}
	j := t.job
	j.running--
	for _, o := range s.obs {
		o.TaskFinished(j.spec.ID, t.reduce, t.index, m.spec.ID, s.now, t.failAt < 0)
	}
	if t.failAt >= 0 { // the attempt failed: run the task again
		var again *taskRun
		if t.reduce {
			again = s.newReduce(j, t.index)
		} else {
			again = s.newMap(j, t.index)
		}
		again.attempts = t.attempts
		j.pending = append([]*taskRun{again}, j.pending...)
		if !contains(s.queueW, j) {
			s.queueW = append(s.queueW, j)
		}
	} else if !t.reduce {
		j.mapsLeft--
		s.startReduces(j)
		// More map output: the job's shuffling reduces may go on.
		for _, id := range j.spec.VMs {
			v := s.vms[id]
			for _, r := range v.running {
				if r.job == j && r.reduce {
					s.integrate(v.host)
					s.refresh(v.host)
					break
				}
			}
		}
	} else {
		j.redsLeft--
	}
	s.refresh(m.host)
	if j.mapsLeft == 0 && j.redsLeft == 0 && j.running == 0 && len(j.pending) == 0 {
		j.result.Finish = s.now
		for _, o := range s.obs {
			o.JobFinished(j.spec.ID, s.now)
		}
		for _, w := range s.after[j.spec.ID] { // release the jobs that waited for it
			if w.waiting {
				s.submit(w)
			}
		}
	}
	s.schedule()
}

// floor is what the task's current step cannot get below now: for a
// reduce's shuffle while maps remain, the rest of the step plus the
// shuffle of the map output that does not exist yet.
func (t *taskRun) floor() float64 {
	j, p := t.job, t.cur()
	if !p.waits || j.mapsLeft == 0 {
		return 0
	}
	return p.total - p.gated + p.gated*float64(j.mapsLeft)/float64(j.spec.Maps)
}

// blocked reports a reduce that has shuffled all the map output there is.
func (t *taskRun) blocked() bool {
	f := t.floor()
	return f > 0 && t.cur().left <= f*(1+1e-12)+1e-9
}

// startReduces schedules a job's reduces once enough maps are done.
func (s *Sim) startReduces(j *jobRun) {
	if j.reducesIn || j.spec.Reduces == 0 {
		return
	}
	slow := j.spec.SlowStart
	if slow <= 0 || slow > 1 {
		slow = 1
	}
	if float64(j.spec.Maps-j.mapsLeft) < slow*float64(j.spec.Maps) {
		return
	}
	j.reducesIn = true
	for i := range j.spec.Reduces {
		j.pending = append(j.pending, s.newReduce(j, i))
	}
	if !contains(s.queueW, j) {
		s.queueW = append(s.queueW, j)
	}
}

// newMap is an attempt of map i: read its input, work, write its output.
func (s *Sim) newMap(j *jobRun, i int) *taskRun {
	w, failAt := s.work(j.spec.Map)
	return &taskRun{job: j, index: i, failAt: failAt, steps: steps(
		step{res: resDisk, total: j.spec.MapRead},
		step{res: resCPU, total: w},
		step{res: resDisk, total: j.spec.MapWrite})}
}

// newReduce is an attempt of reduce i: fetch the map output over the
// network, shuffle and reduce, write the result. Without network I/O the
// shuffle work itself waits for the map output, as before there was any.
func (s *Sim) newReduce(j *jobRun, i int) *taskRun {
	var sh float64
	if j.spec.Shuffle.Mean > 0 {
		sh, _ = s.work(Dist{Mean: j.spec.Shuffle.Mean, CV: j.spec.Shuffle.CV})
	}
	post, failAt := s.work(j.spec.Reduce)
	work := step{res: resCPU, total: sh + post, gated: sh, waits: true}
	if j.spec.ShuffleMB > 0 {
		work.gated = 0 // it follows the fetch, which waits for every map
	}
	return &taskRun{job: j, reduce: true, index: i, failAt: failAt, steps: steps(
		step{res: resNet, total: j.spec.ShuffleMB, gated: j.spec.ShuffleMB, waits: true},
		work,
		step{res: resDisk, total: j.spec.ReduceWrite})}
}

// steps are a task's steps with something to do, each with all of it
// left; a task has at least its work step.
func steps(all ...step) []step {
	var out []step
	for _, st := range all {
		if st.total > 0 || st.res == resCPU {
			st.left = st.total
			out = append(out, st)
		}
	}
	return out
}

func contains(js []*jobRun, j *jobRun) bool {
	for _, x := range js {
		if x == j {
			return true
		}
	}
	return false
}

// integrate advances the host's running tasks to now at their current rates.
func (s *Sim) integrate(h *host) {
	dt := s.now.Sub(h.updated).Seconds()
	h.updated = s.now
	if dt <= 0 {
		return
	}
	for _, m := range h.vms {
		m.used += m.cpu * dt
		for r := resDisk; r < nResources; r++ {
			m.moved[r] += m.io[r] * dt
		}
		for _, t := range m.running {
			p := t.cur()
			p.left = max(p.left-t.rate*dt, 0)
		}
	}
}

// refresh recomputes the host's allocation from the shares its agent
// applied and the VMs' demand, and schedules its tasks' completions.
func (s *Sim) refresh(h *host) {
	h.ver++
	shares, _ := h.sim.Applied(context.Background())
	if len(shares) == 0 {
		shares = map[string]float64{}
		for _, m := range h.vms {
			shares[m.spec.ID] = 1
		}
		if h.bg != "" {
			shares[h.bg] = 1
		}
	}
	// Each resource is shared by the same weights, work-conserving: a
	// task uses at most a core, a disk or network stream all of the
	// host's bandwidth.
	capacity := [nResources]float64{resCPU: h.spec.Cores, resDisk: h.spec.Disk, resNet: h.spec.Net}
	var demand, busy [nResources]map[string]float64
	for r := range nResources {
		if capacity[r] <= 0 {
			capacity[r] = ungoverned
		}
		demand[r], busy[r] = make(map[string]float64, len(h.vms)+1), make(map[string]float64, len(h.vms))
	}
	for _, m := range h.vms {
		for _, t := range m.running {
			if !t.blocked() {
				busy[t.cur().res][m.spec.ID]++
			}
		}
		demand[resCPU][m.spec.ID] = busy[resCPU][m.spec.ID]
		for r := resDisk; r < nResources; r++ {
			demand[r][m.spec.ID] = busy[r][m.spec.ID] * capacity[r]
		}
	}
	if h.bg != "" {
		demand[resCPU][h.bg] = h.spec.Background
	}
	for vm, d := range demand[resCPU] { // the agent measures utilisation (idleness) from this
		h.sim.SetDemand(vm, d)
	}
	fair := [nResources]bool{resDisk: h.spec.DiskFair || h.spec.DiskThrottle, resNet: h.spec.NetFair || h.spec.NetThrottle}
	throttled := [nResources]bool{resDisk: h.spec.DiskThrottle, resNet: h.spec.NetThrottle}
	equal := make(map[string]float64, len(shares))
	for vm := range demand[resCPU] {
		equal[vm] = 1
	}
	var alloc [nResources]map[string]float64
	for r := range nResources {
		if throttled[r] {
			for vm, d := range demand[r] {
				caps := h.sim.Caps(vm)
				if c := [nResources]float64{resDisk: caps.Disk, resNet: caps.Net}[r]; c > 0 {
					demand[r][vm] = min(d, c)
				}
			}
		}
		if fair[r] {
			alloc[r] = agent.Allocate(capacity[r], equal, demand[r])
			continue
		}
		alloc[r] = agent.Allocate(capacity[r], shares, demand[r])
	}
	for _, m := range h.vms {
		m.cpu = alloc[resCPU][m.spec.ID]
		for r := resDisk; r < nResources; r++ {
			m.io[r] = 0
			if capacity[r] < ungoverned {
				m.io[r] = alloc[r][m.spec.ID]
			}
		}
		// The agent sees the I/O as it would read a domain's block and
		// interface counters: a VM waiting on its disk is busy.
		h.sim.SetIO(m.spec.ID, agent.IOUse{Disk: m.io[resDisk], Net: m.io[resNet]})
		for _, t := range m.running {
			p := t.cur()
			n := busy[p.res][m.spec.ID]
			if t.blocked() || n == 0 {
				t.rate = 0
				continue // waits for map output
			}
			per := alloc[p.res][m.spec.ID] / n
			if p.res == resCPU {
				per *= h.spec.Speed
			}
			t.rate = per
			floor := t.floor()
			if p.res == resCPU {
				floor = max(floor, t.failAt)
			}
			stop := p.left - floor
			if per <= 0 {
				continue // starved: it will be rescheduled when shares change
			}
			at := s.now.Add(time.Duration(math.Ceil(stop / per * 1e9)))
			s.push(&event{at: at, kind: evTaskDone, host: h, ver: h.ver, task: t})
		}
	}
}

// Moved is each VM's disk and network I/O so far, in MB.
func (s *Sim) Moved() (disk, net map[string]float64) {
	disk, net = make(map[string]float64, len(s.vms)), make(map[string]float64, len(s.vms))
	for _, h := range s.order {
		s.integrate(h)
	}
	for id, m := range s.vms {
		disk[id], net[id] = m.moved[resDisk], m.moved[resNet]
	}
	return disk, net
}

// CPU is each VM's CPU time so far (core-seconds).
func (s *Sim) CPU() map[string]float64 {
	out := make(map[string]float64, len(s.vms))
	for _, h := range s.order {
		s.integrate(h)
	}
	for id, m := range s.vms {
		out[id] = m.used
	}
	return out
}
