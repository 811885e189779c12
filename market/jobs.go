package market

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/hadoopvm/mapreduce"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// The simulated Hadoop of a market (mrmarket up): the users' clusters that
// run the jobs they submit to the deadline service, on the simulated VMs,
// at the CPU the simulated hosts deliver under the market's shares, and
// that report their progress to the broker as the YARN monitor does.
//
// Learning the jobs. A user submits a job file to the broker; the runner
// plays the user's Hadoop, which is given the same job: it reads every
// admitted job (its file and its id) from the audit stream's broker submit
// events (MRM_EVENTS), the record of every job the broker admitted. The
// broker's job list says when a job may start: a queued job waits for its
// turn (EDF) without starting tasks; once the broker has listed it running
// (or late) it runs to its end, as a YARN application does — the market
// decides only the CPU its VMs get (a job whose turn passed or whose price
// is spent goes on at what is left to it: the floor share, or an idle
// host's CPU). A cancelled job, or one whose plan ended (the broker no
// longer takes its reports), stops. A market restarted runs its unfinished
// jobs again from their start, as YARN reruns an application whose master
// was lost.
//
// Tasks are hadoopvm/mapreduce's, the cluster simulator's model, which
// this runner drives by the CPU the hosts delivered: a running task uses
// at most one CPU, and a VM's running tasks share what the host gives the
// VM equally. A job's map_slots and reduce_slots are its own, split evenly
// over its VMs, a VM's slots fill before the next VM's, and jobs take
// slots in the order they were admitted (mapreduce.JobSlots, Packed,
// Arrival). A task's time is drawn from the profile (mapreduce.ProfileSpec:
// uniformly around its average and never above its maximum, seeded by the
// job's id, so a run is reproducible), and means what the profile says:
// its duration at a full share, i.e. with its VM alone on its host and its
// slot-mates running beside it. So its work is that time × the CPU a slot
// gets on a whole host, min(1, host CPUs / the job's slots on the VM): a
// wave of tasks at a full share takes the profile's time whatever the
// slots, and at share q 1/q of it — ARIA's bounds, the broker's estimate,
// hold. Maps run first in waves over the slots; the reduces start when the
// last map is done (slow start 1, ARIA's model): a reduce of the first wave
// shuffles the profile's first-shuffle time, later ones the typical
// shuffle, then reduces.
//
// CPU. At every step the runner reads each job VM's CPU time from its
// SimEnforcer (Usage) and divides what the VM received since the last step
// among the tasks it was running, each at a constant rate over the step; a
// task that finishes mid-step hands its slot, at the same rate, to the next
// task waiting for that VM. Then it tells each host what its job VMs want
// from now on (SetDemand): as many CPUs as they run tasks. A VM of an
// unfinished job that runs no task (a queued job, or a VM with no task in
// the current wave) wants nothing — a NodeManager without containers is
// idle. A VM no unfinished job uses keeps up's default: it wants its whole
// host (the stand-in for whatever its owner runs on it), so plans on VMs
// without jobs behave as they always did.
//
// Progress goes to mrm.v1.broker.progress exactly as `mrmarket jobs watch`
// sends it (broker.Client.Progress, Jockey's indicator over the profile's
// average task times, maps and reduces done, Done at the end), signed by
// the job's user when the data directory has its key, else by the admin;
// whenever the tasks done change, at least every jobsReportEvery, and once
// with Done when the job is finished.

// jobsReportEvery is how often a running job's progress is reported when
// no task finished.
const jobsReportEvery = 5 * time.Second

// jobsLearnWait bounds how long Tick waits to hear of a job the broker
// lists (its submit event travels over JetStream asynchronously).
const jobsLearnWait = 10 * time.Second

// jobRunner runs the admitted jobs on the simulated VMs.
type jobRunner struct {
	m      *Market
	client broker.Client
	cons   jetstream.ConsumeContext

	learnMu sync.Mutex
	learned map[string]*simJob // by job id, as heard, not yet adopted
	heard   []string           // ids in the order heard

	mu      sync.Mutex // one step at a time
	tasks   *mapreduce.Cluster
	jobs    []*simJob // adopted, in the order heard
	known   map[string]bool
	ignored map[string]bool // listed by the broker, never heard of in time
	vms     map[string]*simVM
	vmOrder []*simVM // as the cluster's
	last    time.Time
}

type simVM struct {
	*mapreduce.VM // the tasks running on it
	sim           *agent.SimEnforcer
	cpus          float64       // its host's CPUs: what it wants when no job uses it
	used          time.Duration // its CPU time at the last step
	owned         bool          // the runner sets its demand (an unfinished job uses it)
}

type simJob struct {
	id, user string
	spec     wire.JobSpec
	vms      []*simVM
	tasks    *mapreduce.Job // once adopted
	status   string         // the broker's, at the last step
	started  bool           // the broker has listed it running (or late)
	stopped  bool           // cancelled, or the broker no longer runs it
	reported bool           // Done reported (or the broker no longer knows the job)
	lastSent time.Time
	sent     [2]int // maps and reduces done at the last report
}

// newJobRunner is a runner without jobs or VMs.
func newJobRunner(m *Market) *jobRunner {
	return &jobRunner{m: m, tasks: mapreduce.New(mapreduce.Config{Slots: mapreduce.JobSlots, Placement: mapreduce.Packed, Order: mapreduce.Arrival}),
		learned: map[string]*simJob{}, known: map[string]bool{}, ignored: map[string]bool{}, vms: map[string]*simVM{}}
}

// addVM adds a VM on a host of cpus CPUs (its SimEnforcer sim).
func (r *jobRunner) addVM(id string, sim *agent.SimEnforcer, cpus float64) *simVM {
	v := &simVM{VM: r.tasks.AddVM(id, 0), sim: sim, cpus: cpus}
	r.vms[id] = v
	r.vmOrder = append(r.vmOrder, v)
	return v
}

// startJobs starts the job runner: it follows the broker's submit events
// on nc (as the admin) and reports progress through it.
func (m *Market) startJobs(ctx context.Context) error {
	nc, err := m.NC("mrmarket-jobs")
	if err != nil {
		return err
	}
	r := newJobRunner(m)
	r.client = broker.Client{NC: nc, Keys: userOrAdmin{keys: m.keys, admin: m.admin}, AdminKey: m.AdminKey()}
	for _, h := range m.cfg.Hosts {
		for _, vm := range h.VMs {
			cpus := h.CPUs
			if cpus <= 0 {
				cpus = 1 // as the SimEnforcer takes it
			}
			r.addVM(vm.ID, m.Sims[h.ID], cpus)
		}
	}
	if err := r.follow(ctx, nc); err != nil {
		return err
	}
	m.jobs = r
	m.stops = append(m.stops, r.cons.Stop)
	return nil
}

// follow consumes every broker submit event, from the stream's start.
func (r *jobRunner) follow(ctx context.Context, nc *nats.Conn) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("market: jobs: %w", err)
	}
	st, err := js.Stream(ctx, wire.StreamEvents)
	if err != nil {
		return fmt.Errorf("market: jobs: audit stream %s: %w", wire.StreamEvents, err)
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{wire.EventSubject("broker", "submit")}})
	if err != nil {
		return fmt.Errorf("market: jobs: %w", err)
	}
	r.cons, err = cons.Consume(func(msg jetstream.Msg) { r.hear(msg.Data()) })
	if err != nil {
		return fmt.Errorf("market: jobs: %w", err)
	}
	return nil
}

// hear learns the job of one submit event: its file from the signed
// request, its id from the broker's answer.
func (r *jobRunner) hear(data []byte) {
	var ev wire.Event
	var req wire.SubmitRequest
	var rep wire.SubmitReply
	if json.Unmarshal(data, &ev) != nil || json.Unmarshal(ev.Request.Body, &req) != nil || json.Unmarshal(ev.Result, &rep) != nil ||
		rep.Job.ID == "" || rep.Job.User == "" || req.Job.Validate() != nil {
		r.m.Metrics.Error("jobs", "bad_submit_event")
		return
	}
	r.learnMu.Lock()
	defer r.learnMu.Unlock()
	if _, ok := r.learned[rep.Job.ID]; ok {
		return // a retried submit of the same id
	}
	r.learned[rep.Job.ID] = &simJob{id: rep.Job.ID, user: rep.Job.User, spec: req.Job}
	r.heard = append(r.heard, rep.Job.ID)
}

// userOrAdmin signs as a user with its key in the data directory, else
// (a user registered elsewhere) as the admin, who may report for anyone.
type userOrAdmin struct {
	keys  signing.CredsDir
	admin *signing.Signer
}

func (k userOrAdmin) Signer(role, name string) (*signing.Signer, error) {
	if s, err := k.keys.Signer(role, name); err == nil {
		return s, nil
	}
	return k.admin, nil
}

// step runs the jobs up to now: tasks advance by the CPU their VMs got,
// finished jobs and new tasks are accounted, the hosts learn the VMs'
// demand, and progress goes to the broker. With wait it first waits until
// it has heard of every job the broker lists as unfinished (Tick: a
// deterministic market).
func (r *jobRunner) step(ctx context.Context, now time.Time, wait bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !wait && r.idle() {
		return nil // nothing heard, nothing running: no need to ask the broker
	}
	list, err := r.client.Jobs(ctx, &wire.JobsRequest{})
	if err != nil {
		r.m.Metrics.Error("jobs", "list")
		return fmt.Errorf("market: jobs: listing the broker's jobs: %w", err)
	}
	status := map[string]wire.Job{}
	for _, j := range list.Jobs {
		status[j.ID] = j
	}
	if wait {
		r.awaitHeard(ctx, list.Jobs)
	}
	r.adopt(status)
	r.advance(ctx, now)
	for _, j := range r.jobs {
		r.govern(j, status)
	}
	r.schedule()
	r.setDemand()
	r.report(ctx, now)
	return nil
}

// idle: no job heard of waits to be adopted and none is still to run or
// to report.
func (r *jobRunner) idle() bool {
	r.learnMu.Lock()
	heard := len(r.heard)
	r.learnMu.Unlock()
	if heard > 0 {
		return false
	}
	for _, j := range r.jobs {
		if j.active() || !j.reported {
			return false
		}
	}
	return true
}

// unfinished is a listed job still to run.
func unfinished(j wire.Job) bool {
	return j.Finished.IsZero() && j.Status != wire.JobDone && j.Status != wire.PlanCancelled
}

// awaitHeard waits (at most jobsLearnWait) until every unfinished listed
// job has been heard of; one never heard of is ignored from then on.
func (r *jobRunner) awaitHeard(ctx context.Context, jobs []wire.Job) {
	deadline := time.Now().Add(jobsLearnWait)
	for _, j := range jobs {
		if !unfinished(j) || r.known[j.ID] || r.ignored[j.ID] {
			continue
		}
		for {
			r.learnMu.Lock()
			_, ok := r.learned[j.ID]
			r.learnMu.Unlock()
			if ok {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				r.ignored[j.ID] = true
				r.m.Metrics.Error("jobs", "unheard")
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// adopt takes the jobs heard of that the broker lists: an unfinished one
// joins the run, a finished one is forgotten. One not listed yet waits.
func (r *jobRunner) adopt(status map[string]wire.Job) {
	r.learnMu.Lock()
	defer r.learnMu.Unlock()
	var keep []string
	for _, id := range r.heard {
		j := r.learned[id]
		st, listed := status[id]
		switch {
		case r.known[id]:
		case !listed:
			keep = append(keep, id)
			continue
		case unfinished(st):
			r.jobs = append(r.jobs, r.newJob(j))
			r.known[id] = true
		default:
			r.known[id] = true // done before this market heard of it
		}
		delete(r.learned, id)
	}
	r.heard = keep
	for id := range r.learned { // keep only the ids still heard
		if !contains(keep, id) {
			delete(r.learned, id)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// newJob lays a heard job out on its VMs (those of this market) with its
// tasks' times drawn from its profile.
func (r *jobRunner) newJob(j *simJob) *simJob {
	s := j.spec
	var vms []*mapreduce.VM
	for _, id := range s.VMs {
		if v := r.vms[id]; v != nil {
			j.vms = append(j.vms, v)
			vms = append(vms, v.VM)
		}
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(j.id))
	seed := h.Sum64()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	j.tasks = r.tasks.Add(j.id, mapreduce.ProfileSpec(s.Profile, s.Maps, s.Reduces, s.MapSlots, s.ReduceSlots), vms, rng)
	j.tasks.Held = !j.runnable()
	if len(j.vms) == 0 {
		r.stop(j) // none of its VMs is here: nothing can run it
		r.m.Metrics.Error("jobs", "no_vms")
	}
	return j
}

// advance runs every VM's tasks from the last step to now on the CPU its
// host delivered.
func (r *jobRunner) advance(ctx context.Context, now time.Time) {
	usage := map[string]time.Duration{}
	read := map[*agent.SimEnforcer]bool{}
	for _, v := range r.vmOrder {
		if !v.owned || read[v.sim] {
			continue
		}
		read[v.sim] = true
		u, err := v.sim.Usage(ctx)
		if err != nil {
			r.m.Metrics.Error("jobs", "usage")
			continue
		}
		for id, d := range u {
			usage[id] = d
		}
	}
	dt := now.Sub(r.last).Seconds()
	if r.last.IsZero() {
		dt = 0
	}
	r.last = now
	for _, v := range r.vmOrder {
		if !v.owned {
			continue
		}
		u, ok := usage[v.ID]
		if !ok {
			continue
		}
		got := (u - v.used).Seconds()
		v.used = u
		rate := 0.0
		if dt > 0 && len(v.Running) > 0 {
			rate = got / (float64(len(v.Running)) * dt)
		}
		for _, t := range v.Running {
			t.Rate = rate
		}
	}
	r.run(max(dt, 0))
}

// run is a step's events: tasks progress at their rates; one that finishes
// hands its slot, at its rate, to the next task waiting for its VM.
func (r *jobRunner) run(dt float64) {
	const eps = 1e-9
	t := 0.0
	for {
		next := math.Inf(1)
		for _, v := range r.vmOrder {
			for _, k := range v.Running {
				switch {
				case k.Left() <= eps:
					next = 0
				case k.Rate > 0:
					next = min(next, k.Left()/k.Rate)
				}
			}
		}
		d := min(next, dt-t)
		if d < 0 {
			d = 0
		}
		for _, v := range r.vmOrder {
			for _, k := range v.Running {
				k.Advance(d)
			}
		}
		t += d
		// Every task done at this instant first (the last map opens the
		// reduces), then their slots go to the tasks waiting.
		type slot struct {
			vm   *simVM
			rate float64
		}
		var freed []slot
		for _, v := range r.vmOrder {
			var done []*mapreduce.Task
			for _, k := range v.Running {
				if k.Left() <= eps {
					done = append(done, k)
				}
			}
			for _, k := range done {
				freed = append(freed, slot{v, k.Rate})
				r.tasks.Release(k)
				r.tasks.Done(k)
			}
		}
		for _, f := range freed {
			if k := r.startOn(f.vm); k != nil {
				k.Rate = f.rate
			}
		}
		if len(freed) == 0 && t >= dt-eps {
			return
		}
	}
}

// startOn starts the next task waiting for a free slot of v, if any.
func (r *jobRunner) startOn(v *simVM) *mapreduce.Task {
	k := r.tasks.StartOn(v.VM)
	if k != nil {
		r.started(k)
	}
	return k
}

// started turns a task's time at a full share into CPU work on its VM: the
// CPU a slot gets on a whole host.
func (r *jobRunner) started(k *mapreduce.Task) {
	v := r.vmOrder[k.VM.Index]
	k.Scale(min(1, v.cpus/float64(k.Job.Slots(k.VM, k.Reduce))))
}

func (j *simJob) uses(v *simVM) bool {
	for _, x := range j.vms {
		if x == v {
			return true
		}
	}
	return false
}

// runnable: it is not over and the broker has let it start (EDF chose it,
// or it is late). Once started it runs to its end, as a YARN application
// does: what the market decides is the CPU its VMs get — a job whose turn
// passed, or whose price is spent, goes on at what is left to it.
func (j *simJob) runnable() bool {
	return j.active() && (j.started || j.status == wire.JobRunning || j.status == wire.JobLate)
}

// active: it still holds its VMs (their demand is its tasks').
func (j *simJob) active() bool { return !j.tasks.Done() && !j.stopped }

// govern follows the broker's word on a job: its status, and its end.
func (r *jobRunner) govern(j *simJob, status map[string]wire.Job) {
	st, listed := status[j.id]
	if !listed {
		return // a broker round in between: keep the last status
	}
	j.status = st.Status
	j.started = j.started || st.Status == wire.JobRunning || st.Status == wire.JobLate
	j.tasks.Held = !j.runnable()
	if j.active() && !unfinished(st) {
		r.stop(j) // cancelled, or done by another report
		j.reported = true
	}
}

// stop ends a job's run: its tasks leave their VMs.
func (r *jobRunner) stop(j *simJob) {
	j.stopped = true
	r.tasks.Stop(j.tasks)
}

// schedule starts tasks on every free slot of the jobs that may run.
func (r *jobRunner) schedule() {
	for _, k := range r.tasks.Schedule() {
		r.started(k)
	}
}

// setDemand tells each host what its job VMs want from now on.
func (r *jobRunner) setDemand() {
	for _, v := range r.vmOrder {
		used := false
		for _, j := range r.jobs {
			if j.active() && j.uses(v) {
				used = true
				break
			}
		}
		switch {
		case used:
			v.sim.SetDemand(v.ID, float64(len(v.Running)))
			if !v.owned {
				v.owned = true
				if u, err := v.sim.Usage(context.Background()); err == nil {
					v.used = u[v.ID]
				}
			}
		case v.owned:
			v.sim.SetDemand(v.ID, v.cpus) // back to up's default: the whole host
			v.owned = false
		}
	}
}

// report sends the progress of every job that changed, is due, or is done.
func (r *jobRunner) report(ctx context.Context, now time.Time) {
	for _, j := range r.jobs {
		done := j.tasks.Done()
		if j.reported || j.stopped && !done {
			continue
		}
		counts := [2]int{j.tasks.MapsDone, j.tasks.ReducesDone}
		due := done || counts != j.sent || now.Sub(j.lastSent) >= jobsReportEvery
		if !due || !done && !j.started {
			continue
		}
		_, err := r.client.Progress(ctx, &wire.ProgressRequest{User: j.user, Job: j.spec.Name, Progress: j.tasks.Progress(),
			MapsDone: counts[0], ReducesDone: counts[1], Done: done})
		switch {
		case err == nil:
			j.sent, j.lastSent = counts, now
			j.reported = done
		case errors.Is(err, wire.ErrNotFound):
			// The broker runs no such job any more (its plan ended or was
			// cancelled): nothing more to run or report.
			r.stop(j)
			j.reported = true
		default:
			r.m.Metrics.Error("jobs", "progress") // tried again next step
		}
	}
}
