package broker_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/broker/brokertest"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// TestAdmissionRace: two broker replicas sharing one in-memory plan store
// admit deadline jobs on the same two hosts at once (each job on one of
// them or both), many times over (seeded jobs). Whatever the
// interleaving, the jobs admitted fit: on each host, in deadline order at
// the reserved share, each finishes by its deadline (what MRM admits for
// any serial order of them), and every job refused holds nothing at the
// bank.
func TestAdmissionRace(t *testing.T) {
	for seed := range uint64(40) {
		h := brokertest.New(t, broker.Config{})
		raceAdmissions(t, h, seed)
	}
}

// TestAdmissionRaceJetStream is TestAdmissionRace with the replicas
// following one MRM_PLANS bucket on a real JetStream server, each through
// its own watch.
func TestAdmissionRaceJetStream(t *testing.T) {
	ns := natstest.Server(t)
	plans := natstest.Assets(t, natstest.Connect(t, ns)).Plans
	for seed := range uint64(8) {
		h := brokertest.New(t, broker.Config{Plans: plans})
		raceAdmissions(t, h, seed)
	}
}

// raceAdmissions runs one race on two fresh hosts of h (the bucket may be
// shared between races): replicas a and b each submit a batch of seeded
// jobs, all released at once, and checks what was admitted.
func raceAdmissions(t *testing.T, h *brokertest.Harness, seed uint64) {
	t.Helper()
	const (
		perReplica = 6
		share      = 0.8 // the default reserved share
	)
	rng := rand.New(rand.NewPCG(seed, 16))
	hosts := []string{fmt.Sprintf("host-%d-0", seed), fmt.Sprintf("host-%d-1", seed)}
	users := []string{fmt.Sprintf("alice-%d", seed), fmt.Sprintf("bob-%d", seed)}
	replicas := []*broker.Broker{h.AddReplica(fmt.Sprintf("a-%d", seed)), h.AddReplica(fmt.Sprintf("b-%d", seed))}
	vm := func(user, host int) string { return fmt.Sprintf("v%d-%d-%d", seed, user, host) }
	for _, u := range users {
		h.Bank().Grant(u, 1000*money.PerCredit)
	}
	for k, ho := range hosts {
		h.AddHost(ho, vm(0, k)+":"+users[0], vm(1, k)+":"+users[1])
	}
	now := h.Now()

	type submit struct {
		req *wire.SubmitRequest
		rep wire.SubmitReply
		err error
	}
	var subs [2][]*submit
	for r := range replicas {
		for k := range perReplica {
			scale := 0.5 + rng.Float64() // work 67 to 200 s at a full share
			var vms []string
			switch rng.IntN(4) {
			case 0:
				vms = []string{vm(r, 0), vm(r, 1)}
			case 1:
				vms = []string{vm(r, 1)}
			default: // most on host 0: the contended one
				vms = []string{vm(r, 0)}
			}
			job := wire.JobSpec{Name: fmt.Sprintf("job-%d", k), VMs: vms,
				Maps: 16, Reduces: 2, MapSlots: 4, ReduceSlots: 2, Profile: strategies.JobProfile{
					MapAvg: 20 * scale, MapMax: 30 * scale, Sh1Avg: 5, Sh1Max: 8, ShTypAvg: 4, ShTypMax: 6, ReduceAvg: 10, ReduceMax: 15}}
			req := &wire.SubmitRequest{ID: fmt.Sprintf("j%d-%s-%d", seed, users[r], k), User: users[r], Job: job}
			if rng.IntN(3) == 0 {
				req.Budget = money.Micro(5+rng.IntN(10)) * money.PerCredit // the earliest deadline it pays
			} else {
				req.Deadline = now.Add(time.Duration(3+rng.IntN(15)) * time.Minute)
			}
			subs[r] = append(subs[r], &submit{req: req})
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for r, b := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for _, s := range subs[r] {
				s.rep, s.err = b.Submit(context.Background(), s.req)
			}
		}()
	}
	close(start)
	wg.Wait()

	admitted := map[int][]wire.Job{} // by host
	refused, lost := 0, 0
	held := map[string]money.Micro{}
	for _, s := range append(subs[0], subs[1]...) {
		switch {
		case s.err == nil:
			for k := range hosts {
				if slices.ContainsFunc(s.req.Job.VMs, func(v string) bool { return v == vm(0, k) || v == vm(1, k) }) {
					admitted[k] = append(admitted[k], s.rep.Job)
				}
			}
			held[s.req.User] += s.rep.Job.Price
		case errors.Is(s.err, broker.ErrAdmitRace):
			lost++
		case errors.Is(s.err, wire.ErrConflict) || errors.Is(s.err, wire.ErrInsufficient):
			refused++
		default:
			t.Fatalf("seed %d: %s: %v", seed, s.req.ID, s.err)
		}
	}
	// No over-commit: on each host, in deadline order at the reserved
	// share, every job admitted finishes by its deadline (nothing has run:
	// the clock stood).
	for k, jobs := range admitted {
		sort.Slice(jobs, func(i, k int) bool { return jobs[i].Deadline.Before(jobs[k].Deadline) })
		done := 0.0
		for _, j := range jobs {
			done += j.Work / share
			if d := j.Deadline.Sub(now).Seconds(); done > d+0.01 {
				t.Fatalf("seed %d: %s over-committed: %d jobs admitted; %s (deadline in %.1f s) can only finish in %.1f s",
					seed, hosts[k], len(jobs), j.ID, d, done)
			}
		}
	}
	// A refused job holds nothing: the open holds are the admitted jobs'
	// prices, and every user's balance is the rest.
	open := h.Bank().OpenHolds()
	for _, s := range append(subs[0], subs[1]...) {
		if amount, ok := open[s.req.ID]; ok != (s.err == nil) || ok && amount != s.rep.Job.Price {
			t.Fatalf("seed %d: job %s (error %v) holds %s", seed, s.req.ID, s.err, amount)
		}
	}
	for _, u := range users {
		bal, _ := h.Bank().Balance(context.Background(), &wire.BalanceRequest{User: u})
		if bal.Held != held[u] || bal.Balance != 1000*money.PerCredit-held[u] {
			t.Fatalf("seed %d: %s: %+v, admitted jobs' prices %s", seed, u, bal, held[u])
		}
	}
	t.Logf("seed %d: admitted %d on %s, %d on %s; refused %d (%d lost the race to commit)",
		seed, len(admitted[0]), hosts[0], len(admitted[1]), hosts[1], refused+lost, lost)
}
