package broker_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

var t0 = time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)

type fixture struct {
	b      *broker.Broker
	bank   *bank.Bank
	agents map[string]*agent.Agent
	clock  *time.Time
}

// newFixture runs a broker against the real bank and agents over an
// embedded NATS server. Hosts in served answer bids; the others are known
// to the broker (it saw their state) but their agent is down.
func newFixture(t *testing.T, served []string, down []string) *fixture {
	t.Helper()
	clock := t0
	now := func() time.Time { return clock }
	_, nc := natstest.Start(t)
	bk, err := bank.Open(filepath.Join(t.TempDir(), "bank.db"), bank.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bk.Close() })
	f := &fixture{bank: bk, agents: map[string]*agent.Agent{}, clock: &clock}
	f.b, err = broker.New(broker.Config{NC: nc, Bank: bk, Now: now, Settle: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range append(append([]string(nil), served...), down...) {
		sim := agent.NewSimEnforcer(now, 1, agent.VM{ID: "a-" + h, Owner: "alice"}, agent.VM{ID: "b-" + h, Owner: "bob"})
		a, err := agent.New(agent.Config{Host: h, Enforcer: sim, Capturer: bk, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if i < len(served) {
			stop, err := agent.Serve(nc, a)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(stop)
		}
		f.agents[h] = a
		f.b.Observe(a.State())
	}
	if _, err := bk.Grant(context.Background(), &wire.GrantRequest{ID: "g", User: "alice", Amount: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) spend(id string, budget int64, vms ...string) (wire.SpendReply, error) {
	return f.b.Spend(context.Background(), &wire.SpendRequest{ID: id, User: "alice", Budget: money.Micro(budget),
		Duration: wire.Duration(time.Hour), VMs: vms, Strategy: wire.StrategyFair})
}

func (f *fixture) balance(t *testing.T) wire.BalanceReply {
	t.Helper()
	bal, err := f.bank.Balance(context.Background(), &wire.BalanceRequest{User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	return bal
}

// TestSpendRollsBackWhenAHostIsDown: a plan runs whole or not at all.
// TestSpendAcrossADownHostRuns: a host that does not answer decides
// nothing, so the spend runs with its hold and the bids the live host took
// (the rounds send the down host its bids once it answers:
// testdata/rollback.txt); the user may cancel it, which returns the money
// and withdraws the bids.
func TestSpendAcrossADownHostRuns(t *testing.T) {
	f := newFixture(t, []string{"host-1"}, []string{"host-2"})
	rep, err := f.spend("p1", 1000, "a-host-1", "a-host-2")
	if err != nil || rep.Plan.Status != wire.PlanRunning {
		t.Fatalf("spend across a down host: %+v %v", rep.Plan, err)
	}
	if bal := f.balance(t); bal.Held != 1000 {
		t.Fatalf("the plan's hold: %+v", bal)
	}
	bids := 0
	for _, v := range f.agents["host-1"].State().VMs {
		bids += len(v.Bids)
	}
	if bids != 1 {
		t.Fatalf("bids on the live host: %d", bids)
	}
	if _, err := f.b.Cancel(context.Background(), &wire.CancelRequest{Plan: "p1", User: "alice"}); err != nil {
		t.Fatal(err)
	}
	if bal := f.balance(t); bal.Balance != 1_000_000 || bal.Held != 0 {
		t.Fatalf("money not returned by the cancel: %+v", bal)
	}
	for _, v := range f.agents["host-1"].State().VMs {
		if len(v.Bids) != 0 || v.Rate != 0 {
			t.Fatalf("bid left on host-1: %+v", v)
		}
	}
}

func TestSpendIsIdempotentByID(t *testing.T) {
	f := newFixture(t, []string{"host-1"}, nil)
	r1, err := f.spend("p1", 1000, "a-host-1")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := f.spend("p1", 1000, "a-host-1")
	if err != nil || r2.Plan.ID != r1.Plan.ID || r2.Plan.Start != r1.Plan.Start {
		t.Fatalf("repeated spend: %+v %v", r2, err)
	}
	if _, err := f.spend("p1", 2000, "a-host-1"); !errors.Is(err, wire.ErrConflict) {
		t.Fatalf("plan id reused with another budget: %v", err)
	}
	if bal := f.balance(t); bal.Held != 1000 {
		t.Fatalf("held %s after one plan spent twice", bal.Held)
	}
}

func TestCancelAndEnd(t *testing.T) {
	f := newFixture(t, []string{"host-1"}, nil)
	ctx := context.Background()
	if _, err := f.spend("p1", 3600, "a-host-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.spend("p2", 3600, "a-host-1"); err != nil { // replaces p1's bid on the VM
		t.Fatal(err)
	}
	if _, err := f.b.Cancel(ctx, &wire.CancelRequest{Plan: "p1", User: "bob"}); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("bob cancelling alice's plan: %v", err)
	}
	if _, err := f.b.Cancel(ctx, &wire.CancelRequest{Plan: "nope", User: "alice"}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("cancel unknown plan: %v", err)
	}
	*f.clock = t0.Add(10 * time.Minute)
	p, err := f.b.Cancel(ctx, &wire.CancelRequest{Plan: "p2", User: "alice"})
	if err != nil || p.Status != wire.PlanCancelled || p.Released != 3600-600 {
		t.Fatalf("cancel p2 after 10 of 60 minutes: %+v %v", p, err)
	}
	if again, err := f.b.Cancel(ctx, &wire.CancelRequest{Plan: "p2", User: "alice"}); err != nil || again.Released != p.Released {
		t.Fatalf("second cancel: %+v %v", again, err)
	}
	// p1 lost its VM to p2 at t0 and spent nothing; it ends Settle after its end.
	*f.clock = t0.Add(time.Hour + 29*time.Second)
	if err := f.b.Tick(ctx, *f.clock); err != nil {
		t.Fatal(err)
	}
	if p := f.b.Plans(&wire.PlansRequest{User: "alice"}).Plans[0]; p.Status != wire.PlanRunning {
		t.Fatalf("p1 ended before Settle: %+v", p)
	}
	*f.clock = t0.Add(time.Hour + 30*time.Second)
	if err := f.b.Tick(ctx, *f.clock); err != nil {
		t.Fatal(err)
	}
	if p := f.b.Plans(&wire.PlansRequest{User: "alice"}).Plans[0]; p.Status != wire.PlanDone || p.Released != 3600 {
		t.Fatalf("p1 after its end: %+v", p)
	}
	if bal := f.balance(t); bal.Held != 0 || bal.Spent != 600 || bal.Balance != 1_000_000-600 {
		t.Fatalf("alice at the end: %+v", bal)
	}
}

func TestObserveKeepsTheNewestState(t *testing.T) {
	f := newFixture(t, []string{"host-1"}, nil)
	st := f.agents["host-1"].State()
	newer := st
	newer.Time, newer.Price = st.Time.Add(time.Second), 42
	f.b.Observe(newer)
	f.b.Observe(st) // late delivery of an older state
	p, err := f.b.Price(&wire.PriceRequest{Host: "host-1"})
	if err != nil || p.Hosts[0].Price != 42 {
		t.Fatalf("price after an old state arrived late: %+v %v", p, err)
	}
	if _, err := f.b.Price(&wire.PriceRequest{Host: "host-9"}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("unknown host: %v", err)
	}
	if vms := f.b.VMs(&wire.VMsRequest{Owner: "bob"}).VMs; len(vms) != 1 || vms[0].VM != "b-host-1" {
		t.Fatalf("bob's VMs: %+v", vms)
	}
}

// TestUserVMsShowOthersOnlyTogether: a user's view has its own VMs as the
// admin's does and, per host, the others' count, rates and shares summed.
func TestUserVMsShowOthersOnlyTogether(t *testing.T) {
	f := newFixture(t, []string{"host-1", "host-2"}, nil)
	for _, h := range []string{"host-1", "host-2"} {
		st := f.agents[h].State()
		for i := range st.VMs {
			st.VMs[i].Rate, st.VMs[i].Share = float64(10*(i+1)), 0.25*float64(i+1)
		}
		st.Time = st.Time.Add(time.Second)
		f.b.Observe(st)
	}
	rep := f.b.UserVMs("alice", "")
	if len(rep.VMs) != 2 || rep.VMs[0].VM != "a-host-1" || rep.VMs[1].VM != "a-host-2" {
		t.Fatalf("alice's own VMs: %+v", rep.VMs)
	}
	if want := f.b.VMs(&wire.VMsRequest{Owner: "alice"}); !reflect.DeepEqual(rep.VMs, want.VMs) {
		t.Errorf("alice's own VMs differ from the admin's view of them:\n%+v\n%+v", rep.VMs, want.VMs)
	}
	var others []wire.OtherVMs
	for _, v := range f.b.VMs(&wire.VMsRequest{}).VMs {
		if v.Owner != "alice" {
			others = append(others, wire.OtherVMs{Host: v.Host, VMs: 1, Rate: v.Rate, Share: v.Share, Updated: v.Updated, Stale: v.Stale})
		}
	}
	if !reflect.DeepEqual(rep.Others, others) { // one other VM per host here
		t.Errorf("the others of alice: %+v, want %+v", rep.Others, others)
	}
	if one := f.b.UserVMs("alice", "host-2"); len(one.VMs) != 1 || len(one.Others) != 1 || one.Others[0].Host != "host-2" {
		t.Errorf("alice's view of host-2: %+v", one)
	}
	if admin := f.b.VMs(&wire.VMsRequest{}); len(admin.Others) != 0 {
		t.Errorf("the admin's view has aggregates: %+v", admin.Others)
	}
}

// TestPlanIDsAreEachUsersOwn: a plan id alice took first blocks nothing:
// bob's spend of that id runs as his own plan, his retry replays it, the
// id with other content is his conflict, and each cancels only his own.
func TestPlanIDsAreEachUsersOwn(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, []string{"h1"}, nil)
	if _, err := f.bank.Grant(ctx, &wire.GrantRequest{ID: "g-bob", User: "bob", Amount: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	alices, err := f.spend("p", 1000, "a-h1")
	if err != nil {
		t.Fatal(err)
	}
	req := &wire.SpendRequest{ID: "p", User: "bob", Budget: 2000, Duration: wire.Duration(time.Hour), VMs: []string{"b-h1"}, Strategy: wire.StrategyFair}
	bobs, err := f.b.Spend(ctx, req)
	if err != nil || bobs.Plan.User != "bob" || bobs.Plan.Status != wire.PlanRunning || bobs.Plan.Hold == alices.Plan.Hold {
		t.Fatalf("bob's spend of alice's plan id: %+v %v", bobs.Plan, err)
	}
	if again, err := f.b.Spend(ctx, req); err != nil || again.Plan.Hold != bobs.Plan.Hold || again.Plan.Start != bobs.Plan.Start {
		t.Fatalf("bob's retry: %+v %v", again.Plan, err)
	}
	other := *req
	other.Budget = 3000
	if _, err := f.b.Spend(ctx, &other); !errors.Is(err, broker.ErrPlanReused) {
		t.Fatalf("bob's id with another budget: %v", err)
	}
	if ps := f.b.Plans(&wire.PlansRequest{}).Plans; len(ps) != 2 || ps[0].ID != "p" || ps[1].ID != "p" || ps[0].User == ps[1].User {
		t.Fatalf("plans: %+v", ps)
	}
	if _, err := f.spend("q", 1000, "a-h1"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.b.Cancel(ctx, &wire.CancelRequest{Plan: "q", User: "bob"}); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("bob cancels alice's q: %v", err)
	}
	p, err := f.b.Cancel(ctx, &wire.CancelRequest{Plan: "p", User: "bob"})
	if err != nil || p.User != "bob" || p.Status != wire.PlanCancelled {
		t.Fatalf("bob cancels his p: %+v %v", p, err)
	}
	for _, p := range f.b.Plans(&wire.PlansRequest{User: "alice"}).Plans {
		if p.Status != wire.PlanRunning {
			t.Fatalf("alice's plan %s after bob cancelled his p: %s", p.ID, p.Status)
		}
	}
}

// A host whose agent stopped is shown stale once it has missed several of
// its ticks (its tick read from its states), in the VMs and the price
// list, and the broker logs it going silent and being heard again.
func TestSilentHostShownStale(t *testing.T) {
	clock := t0
	now := func() time.Time { return clock }
	var log bytes.Buffer
	_, nc := natstest.Start(t)
	bk, err := bank.Open(filepath.Join(t.TempDir(), "bank.db"), bank.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bk.Close() })
	b, err := broker.New(broker.Config{NC: nc, Bank: bk, Now: now, Tick: time.Second, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	st := wire.HostState{Host: "host-1", Time: t0, Tick: 1, VMs: []wire.VMState{{VM: "a-1", Owner: "alice", Rate: 2, Share: 1}}}
	b.Observe(st)
	st.Time, st.Tick = t0.Add(10*time.Second), 2 // the agent ticks every 10 s
	b.Observe(st)
	staleness := func() (vm, price bool) {
		vms := b.VMs(&wire.VMsRequest{}).VMs
		p, err := b.Price(&wire.PriceRequest{Host: "host-1"})
		if err != nil || len(vms) != 1 || !vms[0].Updated.Equal(st.Time) {
			t.Fatalf("vms %+v, price %+v, %v", vms, p, err)
		}
		return vms[0].Stale, p.Hosts[0].Stale
	}
	clock = st.Time.Add(25 * time.Second) // two ticks missed: late, not silent
	if vm, price := staleness(); vm || price {
		t.Fatalf("stale after two missed ticks: vm %v, price %v", vm, price)
	}
	clock = st.Time.Add(35 * time.Second)
	if vm, price := staleness(); !vm || !price {
		t.Fatalf("not stale after three missed ticks: vm %v, price %v", vm, price)
	}
	if others := b.UserVMs("bob", "").Others; len(others) != 1 || !others[0].Stale {
		t.Fatalf("another user's view of the host: %+v", others)
	}
	ctx := context.Background()
	if err := b.Tick(ctx, clock); err != nil {
		t.Fatal(err)
	}
	if err := b.Tick(ctx, clock.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(log.String(), "host stale"); n != 1 || !strings.Contains(log.String(), "host=host-1") {
		t.Fatalf("want one line of the host going stale: %s", log.String())
	}
	st.Time, st.Tick = clock, 6
	b.Observe(st)
	if vm, price := staleness(); vm || price {
		t.Fatalf("stale after a new state: vm %v, price %v", vm, price)
	}
	if err := b.Tick(ctx, clock.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "host heard again") {
		t.Fatalf("no line of the host heard again: %s", log.String())
	}
}

// TestJobShareIsItsVMs: a job's share is what its VMs get from their hosts,
// whichever plans fund them: alice's fair plan on the job's VMs counts, for
// the job running, for a job of hers queued behind it on the same VMs
// (no bids of its own), and for a cancelled one.
func TestJobShareIsItsVMs(t *testing.T) {
	f := newFixture(t, []string{"host-1", "host-2"}, nil)
	ctx := context.Background()
	vms := []string{"a-host-1", "a-host-2"}
	if _, err := f.spend("web", 3600, vms...); err != nil {
		t.Fatal(err)
	}
	if _, err := f.bank.Grant(ctx, &wire.GrantRequest{ID: "g-bob", User: "bob", Amount: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.b.Spend(ctx, &wire.SpendRequest{ID: "batch", User: "bob", Budget: 7200, Duration: wire.Duration(time.Hour),
		VMs: []string{"b-host-1", "b-host-2"}, Strategy: wire.StrategyFair}); err != nil {
		t.Fatal(err)
	}
	job := func(name string) wire.JobSpec {
		return wire.JobSpec{Name: name, VMs: vms, Maps: 16, Reduces: 2, MapSlots: 4, ReduceSlots: 2,
			Profile: strategies.JobProfile{MapAvg: 20, MapMax: 30, ReduceAvg: 10, ReduceMax: 15}}
	}
	for _, id := range []string{"first", "second"} {
		if _, err := f.b.Submit(ctx, &wire.SubmitRequest{ID: id, User: "alice", Job: job(id), Deadline: t0.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	// funded observes the hosts' states (as of at) and gives the mean over
	// the job's hosts of the share of each that alice's VM's bids buy.
	funded := func(at time.Time) float64 {
		share := 0.0
		for _, h := range []string{"host-1", "host-2"} {
			st := f.agents[h].State()
			st.Time = at // newer than the states observed before
			f.b.Observe(st)
			for _, v := range st.VMs {
				if v.VM == "a-"+h {
					share += v.Rate / st.Price / 2
				}
			}
		}
		return share
	}
	vmShare := funded(t0.Add(time.Second))
	shares := func() map[string]wire.Job {
		out := map[string]wire.Job{}
		for _, j := range f.b.Jobs(&wire.JobsRequest{User: "alice"}).Jobs {
			out[j.ID] = j
		}
		return out
	}
	got := shares()
	if vmShare <= 0 || vmShare >= 1 {
		t.Fatalf("alice's VMs get %.3f of their hosts: both users' plans should fund theirs", vmShare)
	}
	if j := got["first"]; j.Status != wire.JobRunning || math.Abs(j.Share-vmShare) > 1e-9 {
		t.Errorf("running job: %s at share %.6f, its VMs get %.6f", j.Status, j.Share, vmShare)
	}
	if j := got["second"]; j.Status != wire.JobQueued || math.Abs(j.Share-vmShare) > 1e-9 {
		t.Errorf("queued job on the fair plan's VMs: %s at share %.6f, its VMs get %.6f", j.Status, j.Share, vmShare)
	}
	if _, err := f.b.Cancel(ctx, &wire.CancelRequest{Plan: "first", User: "alice"}); err != nil {
		t.Fatal(err)
	}
	vmShare = funded(t0.Add(2 * time.Second))
	if j := shares()["first"]; j.Status != wire.PlanCancelled || vmShare <= 0 || math.Abs(j.Share-vmShare) > 1e-9 {
		t.Errorf("cancelled job on the fair plan's VMs: %s at share %.6f, its VMs get %.6f", j.Status, j.Share, vmShare)
	}
}
