package experiments

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/hadoopvm/sim"
	"github.com/mrmarket/mrmarket/hadoopvm/sim/workload"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// User is one user of a two-user experiment: the workflow it runs on its
// VMs, and how it spends (nil: it does not spend — a dedicated run).
type User struct {
	Jobs  func(user string, vms []string) []sim.JobSpec
	Spend func(user string, vms []string, jobs []sim.JobSpec) *wire.SpendRequest
}

// TwoUsers is Sandholm and Lai §6's setting in the simulator: Hosts 2-core hosts,
// each with a CPU-hungry background VM (0.5 core, or 1.5 on a random half
// when Heterogeneous: §7.4's extra load) spending like a fair-share user,
// and two users with a 2-slot VM on
// every host, each running a workflow and spending on its VMs through the
// real broker, strategies and agents.
//
// IO is how the hosts treat I/O (workload.IOPaper: the network governed,
// the disk shared equally; empty: the CPU-only model); the users'
// workflows must be built for the same IO.
type TwoUsers struct {
	Hosts         int
	Heterogeneous bool
	IO            workload.IO
	Users         [2]User
}

// Outcome is what a run gives each user: its workflow's completion time
// and what its plan had paid when the workflow finished; and each job's
// time, submission to finish, its result and what its user's plan had paid
// when it finished, by id.
type Outcome struct {
	T       [2]time.Duration
	Paid    [2]money.Micro
	Jobs    map[string]time.Duration
	Results map[string]sim.JobResult
	PaidAt  map[string]money.Micro
	// DiskAt is, when each job finished, what each user's VMs had moved
	// to and from their disks (MB), and the others: the background's.
	DiskAt map[string][2]float64
}

var start = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// Run runs the experiment once; the same seed gives the same outcome.
func (w TwoUsers) Run(seed uint64) (Outcome, error) {
	return w.run(seed, false)
}

// Dedicated is the first user's workflow alone on the hosts, without
// background load or the other user: the uncontended time min(T) of
// Eqs. 4–5.
func (w TwoUsers) Dedicated(seed uint64) (time.Duration, error) {
	o, err := w.run(seed, true)
	return o.T[0], err
}

func (w TwoUsers) run(seed uint64, alone bool) (Outcome, error) {
	var out Outcome
	users := [2]string{"u1", "u2"}
	if alone {
		users = [2]string{"u1", ""}
	}
	hosts, vms, mine := w.layout(rand.New(rand.NewPCG(seed, 2)), users, alone)
	s, err := sim.New(sim.Config{Seed: seed, Start: start, Tick: 10 * time.Second}, hosts, vms)
	if err != nil {
		return out, err
	}
	b, err := broker.New(broker.Config{Agents: s.Agents(), Bank: s.Ledger(), Now: s.Now, Tick: 10 * time.Second, Settle: 20 * time.Second, Serial: true})
	if err != nil {
		return out, err
	}
	s.Attach(b)
	s.Observe(sim.StageFeed(b))
	fin := &finishes{s: s, last: map[string]int{}, user: map[string]int{}, at: map[string]money.Micro{}, mine: mine, disk: map[string][2]float64{}}
	s.Observe(fin)
	first, last, err := w.submit(s, b, fin, users, mine, alone)
	if err != nil {
		return out, err
	}
	res, err := s.Run(48 * time.Hour)
	if err != nil {
		return out, err
	}
	at := map[string]sim.JobResult{}
	out.Jobs = make(map[string]time.Duration, len(res))
	for _, j := range res {
		at[j.ID] = j
		out.Jobs[j.ID] = j.Duration()
	}
	out.Results, out.PaidAt, out.DiskAt = at, fin.at, fin.disk
	for i, u := range users {
		if u != "" {
			out.T[i] = at[last[i]].Finish.Sub(at[first[i]].Submit)
		}
	}
	out.Paid = fin.paid
	return out, nil
}

// layout is the hosts, each with its background VM (heavier on a random
// half, drawn from rng, when Heterogeneous; none when alone), and every
// user's VM on each, with each user's VM ids.
func (w TwoUsers) layout(rng *rand.Rand, users [2]string, alone bool) ([]sim.HostSpec, []sim.VMSpec, map[string][]string) {
	var hosts []sim.HostSpec
	var vms []sim.VMSpec
	mine := map[string][]string{}
	// The background VM is a third, fair-share user [recon]: it spends on
	// each host what a fair-share user's plan spends on one of its VMs.
	bgRate := float64(planBudget) / planDuration.Seconds() / float64(max(w.Hosts, 1))
	io := w.IO
	if io == "" {
		io = workload.IONone
	}
	for h := range w.Hosts {
		bg := 0.5
		if w.Heterogeneous && rng.IntN(2) == 0 {
			bg = 1.5
		}
		spec := io.Host(fmt.Sprint("h", h))
		spec.Background, spec.BackgroundRate = bg, bgRate
		if alone {
			spec.Background, spec.BackgroundRate = 0, 0
		}
		hosts = append(hosts, spec)
		for _, u := range users {
			if u == "" {
				continue
			}
			id := fmt.Sprintf("%s-h%d", u, h)
			vms = append(vms, sim.VMSpec{ID: id, Owner: u, Host: spec.ID, Slots: 2})
			mine[u] = append(mine[u], id)
		}
	}
	return hosts, vms, mine
}

// submit gives each user its workflow on its VMs: its plan first (unless
// alone or it does not spend), then its jobs. It returns each user's first
// and last job, between which its completion time is measured.
func (w TwoUsers) submit(s *sim.Sim, b *broker.Broker, fin *finishes, users [2]string, mine map[string][]string, alone bool) (first, last [2]string, err error) {
	for i, u := range users {
		if u == "" {
			continue
		}
		jobs := w.Users[i].Jobs(u, mine[u])
		first[i], last[i] = jobs[0].ID, jobs[len(jobs)-1].ID
		fin.last[last[i]] = i
		for _, j := range jobs {
			fin.user[j.ID] = i
		}
		if w.Users[i].Spend != nil && !alone {
			rep, err := b.Spend(context.Background(), w.Users[i].Spend(u, mine[u], jobs))
			if err != nil {
				return first, last, err
			}
			fin.holds[i] = rep.Plan.Hold
		}
		for _, j := range jobs {
			if err := s.Submit(j); err != nil {
				return first, last, err
			}
		}
	}
	return first, last, nil
}

// finishes records what each user's plan had paid when its workflow's
// last job finished, and when each of its jobs did.
type finishes struct {
	s     *sim.Sim
	last  map[string]int
	user  map[string]int // each job's user
	holds [2]string
	paid  [2]money.Micro
	at    map[string]money.Micro
	mine  map[string][]string // each user's VMs
	disk  map[string][2]float64
}

func (f *finishes) JobSubmitted(sim.JobSpec, time.Time)                     {}
func (f *finishes) TaskStarted(string, bool, int, string, time.Time)        {}
func (f *finishes) TaskFinished(string, bool, int, string, time.Time, bool) {}
func (f *finishes) JobFinished(job string, _ time.Time) {
	if i, ok := f.user[job]; ok && f.holds[i] != "" {
		f.at[job] = f.s.Ledger().Paid(f.holds[i])
	}
	disk, _ := f.s.Moved()
	var d [2]float64
	for i, u := range [2]string{"u1", "u2"} {
		for _, vm := range f.mine[u] {
			d[i] += disk[vm]
		}
	}
	f.disk[job] = d
	if i, ok := f.last[job]; ok && f.holds[i] != "" {
		f.paid[i] = f.s.Ledger().Paid(f.holds[i])
	}
}
