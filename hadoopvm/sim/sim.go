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
// Model. The jobs' tasks are hadoopvm/mapreduce's, which this simulator
// drives by events: a VM's slots are its own, taken by any job's tasks, a
// job's next task goes to its VM with the most free slots, and the jobs
// with tasks waiting take them in the order they came to have some
// (mapreduce.VMSlots, Widest, Requeue). Task durations are lognormal
// around their mean with a coefficient of variation, with stragglers (a
// factor on a fraction of tasks) and failures (an attempt fails part way
// with a probability and is run again). A task is work in core-seconds; a
// running task uses at most one core, so a VM's demand is its running
// tasks (plus, for a host's background VM, its constant load). Between
// events every task progresses at its VM's allocation divided among its
// running tasks, times the host's speed; a reduce that has caught up with
// the map output waits, holding its slot and using no CPU.
//
// Disk and network. A host may also govern its disk and its network
// bandwidth (HostSpec.Disk, Net, MB/s). A task is then a sequence of
// phases, each on one resource: a map reads its input from disk, works,
// and writes its output to disk; a reduce fetches its shuffle over the
// network (only as far as the map output exists), works, and writes its
// result to disk (JobSpec.MapRead, MapWrite, ShuffleMB, ReduceWrite).
// Each resource is divided among the VMs using it
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
	"github.com/mrmarket/mrmarket/hadoopvm/mapreduce"
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
// background VM wants on it (Sandholm and Lai §6), BackgroundRate that VM's
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
// whatever they pay — a device's own fair queueing, as Sandholm and Lai's testbed
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
type Dist = mapreduce.Dist

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
	// Shuffle, SlowStart and the I/O per task (MB) are as in
	// mapreduce.Spec.
	Shuffle                                   Dist
	SlowStart                                 float64
	MapRead, MapWrite, ShuffleMB, ReduceWrite float64
}

// tasks is the job as the task model runs it.
func (j JobSpec) tasks() mapreduce.Spec {
	return mapreduce.Spec{Maps: j.Maps, Reduces: j.Reduces, Map: j.Map, Reduce: j.Reduce, Shuffle: j.Shuffle, SlowStart: j.SlowStart,
		MapRead: j.MapRead, MapWrite: j.MapWrite, ShuffleMB: j.ShuffleMB, ReduceWrite: j.ReduceWrite}
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
	task *mapreduce.Task
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
	scratch refreshMaps
}

// refreshMaps are the maps refresh fills, kept with the host and emptied
// at each refresh rather than made anew: a host refreshes at every tick
// and every start and end of a task's phase on it.
type refreshMaps struct {
	shares              map[string]float64 // equal shares, before the agent applied any
	equal               map[string]float64 // equal weights, for a fair device
	demand, busy, alloc [nResources]map[string]float64
}

// empty empties the maps, making them the first time.
func (m *refreshMaps) empty() {
	if m.shares == nil {
		m.shares, m.equal = map[string]float64{}, map[string]float64{}
		for r := range nResources {
			m.demand[r], m.busy[r], m.alloc[r] = map[string]float64{}, map[string]float64{}, map[string]float64{}
		}
	}
	clear(m.shares)
	clear(m.equal)
	for r := range nResources {
		clear(m.demand[r])
		clear(m.busy[r])
		// alloc[r] is emptied by AllocateTo
	}
}

type vm struct {
	*mapreduce.VM // its slots and the tasks running in them
	spec          VMSpec
	host          *host
	cpu           float64 // cores allocated now
	used          float64 // core-seconds used so far
	// io is the disk and network bandwidth allocated now (MB/s) and moved
	// is the MB moved so far, by resource.
	io, moved [nResources]float64
}

// The resources a task's phase uses.
const (
	resCPU     = mapreduce.CPU
	resDisk    = mapreduce.Disk
	resNet     = mapreduce.Net
	nResources = mapreduce.NResources
)

// ungoverned is the bandwidth of a resource a host does not govern: I/O
// on it is over at once.
const ungoverned = 1e12

type jobRun struct {
	spec    JobSpec
	waiting bool           // submitted, waiting for the jobs it comes after
	tasks   *mapreduce.Job // once submitted
	result  JobResult
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
	vmAt    []*vm // by mapreduce.VM.Index
	tasks   *mapreduce.Cluster
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

// Bid applies a batch of bid changes on host's agent.
func (a *Agents) Bid(ctx context.Context, host string, changes []*wire.BidRequest) []error {
	h, ok := a.s.hosts[host]
	if !ok {
		errs := make([]error, len(changes))
		for i := range errs {
			errs[i] = fmt.Errorf("%w: unknown host %s", wire.ErrUnavailable, host)
		}
		return errs
	}
	a.s.integrate(h)
	_, errs := h.agent.SetBatch(ctx, changes)
	a.s.refresh(h)
	return errs
}

// New builds a simulation of hosts and VMs.
func New(cfg Config, hosts []HostSpec, vms []VMSpec) (*Sim, error) {
	if cfg.Tick <= 0 {
		cfg.Tick = 10 * time.Second
	}
	s := &Sim{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), now: cfg.Start,
		hosts: map[string]*host{}, vms: map[string]*vm{}, ledger: NewLedger(), byID: map[string]*jobRun{}, after: map[string][]*jobRun{},
		tasks: mapreduce.New(mapreduce.Config{Slots: mapreduce.VMSlots, Placement: mapreduce.Widest, Order: mapreduce.Requeue})}
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
		m := &vm{VM: s.tasks.AddVM(v.ID, v.Slots), spec: v, host: h}
		h.vms = append(h.vms, m)
		s.vms[v.ID] = m
		s.vmAt = append(s.vmAt, m)
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
	jr := &jobRun{spec: j, result: JobResult{ID: j.ID, User: j.User}}
	s.jobs = append(s.jobs, jr)
	s.byID[j.ID] = jr
	for _, dep := range j.After {
		s.after[dep] = append(s.after[dep], jr)
	}
	s.push(&event{at: s.cfg.Start.Add(j.Submit), kind: evJobSubmit, job: jr})
	return nil
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
		if j.tasks != nil {
			out[i].Attempts = j.tasks.Attempts
		}
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
	j.result.Submit = s.now
	for _, o := range s.obs {
		o.JobSubmitted(j.spec, s.now)
	}
	vms := make([]*mapreduce.VM, len(j.spec.VMs))
	for i, id := range j.spec.VMs {
		vms[i] = s.vms[id].VM
	}
	j.tasks = s.tasks.Add(j.spec.ID, j.spec.tasks(), vms, s.rng)
	s.schedule()
}

// schedule starts waiting tasks on free slots and recomputes their hosts'
// rates. A task starts at rate 0, so its host can be integrated to now
// after it started.
func (s *Sim) schedule() {
	touched := map[*host]bool{}
	for _, t := range s.tasks.Schedule() {
		m := s.vmAt[t.VM.Index]
		if !touched[m.host] {
			s.integrate(m.host)
			touched[m.host] = true
		}
		for _, o := range s.obs {
			o.TaskStarted(t.Job.ID, t.Reduce, t.Index, m.spec.ID, s.now)
		}
	}
	hosts := make([]*host, 0, len(touched))
	for h := range touched {
		hosts = append(hosts, h)
	}
	sort.Slice(hosts, func(a, b int) bool { return hosts[a].spec.ID < hosts[b].spec.ID })
	for _, h := range hosts {
		s.refresh(h)
	}
}

func (s *Sim) taskDone(t *mapreduce.Task) {
	m := s.vmAt[t.VM.Index]
	s.integrate(m.host)
	switch t.End() {
	case mapreduce.Waiting, mapreduce.NextPhase: // caught up with the maps, or on to its next phase
		s.refresh(m.host)
		return
	}
	s.tasks.Release(t)
	j := s.byID[t.Job.ID]
	for _, o := range s.obs {
		o.TaskFinished(j.spec.ID, t.Reduce, t.Index, m.spec.ID, s.now, !t.Failed())
	}
	s.tasks.Done(t) // a failed attempt runs again
	if !t.Failed() && !t.Reduce {
		// More map output: the job's shuffling reduces may go on.
		for _, id := range j.spec.VMs {
			v := s.vms[id]
			for _, r := range v.Running {
				if r.Job == t.Job && r.Reduce {
					s.integrate(v.host)
					s.refresh(v.host)
					break
				}
			}
		}
	}
	s.refresh(m.host)
	if j.tasks.Done() {
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
		for _, t := range m.Running {
			t.Advance(dt)
		}
	}
}

// refresh recomputes the host's allocation from the shares its agent
// applied and the VMs' demand, and schedules its tasks' completions.
func (s *Sim) refresh(h *host) {
	h.ver++
	h.scratch.empty()
	shares := h.sim.InForce()
	if len(shares) == 0 {
		shares = h.scratch.shares
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
	demand, busy := h.scratch.demand, h.scratch.busy
	for r := range nResources {
		if capacity[r] <= 0 {
			capacity[r] = ungoverned
		}
	}
	for _, m := range h.vms {
		for _, t := range m.Running {
			if !t.Blocked() {
				busy[t.Cur().Res][m.spec.ID]++
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
	equal := h.scratch.equal
	for vm := range demand[resCPU] {
		equal[vm] = 1
	}
	alloc := h.scratch.alloc
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
			alloc[r] = agent.AllocateTo(alloc[r], capacity[r], equal, demand[r])
			continue
		}
		alloc[r] = agent.AllocateTo(alloc[r], capacity[r], shares, demand[r])
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
		for _, t := range m.Running {
			res := t.Cur().Res
			n := busy[res][m.spec.ID]
			if t.Blocked() || n == 0 {
				t.Rate = 0
				continue // waits for map output
			}
			per := alloc[res][m.spec.ID] / n
			if res == resCPU {
				per *= h.spec.Speed
			}
			t.Rate = per
			if per <= 0 {
				continue // starved: it will be rescheduled when shares change
			}
			at := s.now.Add(time.Duration(math.Ceil(t.ToGo() / per * 1e9)))
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
