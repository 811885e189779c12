package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// gatedAgents takes every bid request once the gate is open; meanwhile
// they wait, counted, as on agents slower than a request's time.
type gatedAgents struct {
	gate    chan struct{}
	waiting atomic.Int64
	mu      sync.Mutex
	hosts   map[string]bool // hosts that took a request
}

func (a *gatedAgents) Bid(ctx context.Context, host string, changes []*wire.BidRequest) []error {
	errs := make([]error, len(changes))
	a.waiting.Add(1)
	select {
	case <-a.gate:
	case <-ctx.Done():
		for i := range errs {
			errs[i] = ctx.Err()
		}
		return errs
	}
	a.mu.Lock()
	a.hosts[host] = true
	a.mu.Unlock()
	return errs
}

// TestSpendOverManyHostsOutlivesItsRequest: a spend over more hosts than
// one wave of bid requests goes on placing its bids after its request's
// deadline has passed; a retry by its id is answered unavailable with how
// many hosts have answered (wire.Progress), and, once every host took its
// bids, with the running plan — every host bid once, nothing rolled back.
func TestSpendOverManyHostsOutlivesItsRequest(t *testing.T) {
	bk := &recBank{held: map[string]money.Micro{}, released: map[string]money.Micro{}}
	agents := &gatedAgents{gate: make(chan struct{}), hosts: map[string]bool{}}
	b, err := New(Config{Agents: agents, Bank: bk, Replica: "r1", Tick: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hosts := 2*maxInFlight + 1
	var vms []string
	for h := range hosts {
		st := wire.HostState{Host: fmt.Sprintf("h%d", h), Time: time.Now()}
		for v := range 2 {
			vm := fmt.Sprintf("h%d-vm%d", h, v)
			st.VMs = append(st.VMs, wire.VMState{VM: vm, Owner: "alice"})
			vms = append(vms, vm)
		}
		b.Observe(st)
	}
	req := &wire.SpendRequest{ID: "big", User: "alice", Budget: 10 * money.PerCredit, Duration: wire.Duration(time.Hour), VMs: vms, Strategy: wire.StrategyFair}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	first := make(chan error, 1)
	go func() { _, err := b.Spend(ctx, req); first <- err }()
	for agents.waiting.Load() < maxInFlight {
		time.Sleep(time.Millisecond)
	}
	<-ctx.Done()
	_, err = b.Spend(context.Background(), req)
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeUnavailable || we.Progress == nil || we.Progress.Of != hosts || we.Progress.Done != 0 {
		t.Fatalf("a retry while the bids wait: %v (%+v)", err, we)
	}
	close(agents.gate)
	if err := <-first; err != nil {
		t.Fatalf("the first try, past its request's deadline: %v", err)
	}
	rep, err := b.Spend(context.Background(), req)
	if err != nil || rep.Plan.Status != wire.PlanRunning {
		t.Fatalf("a retry once the bids are placed: %+v %v", rep.Plan, err)
	}
	if len(agents.hosts) != hosts || len(bk.released) != 0 {
		t.Fatalf("%d of %d hosts took bids, released %v", len(agents.hosts), hosts, bk.released)
	}
}

// TestSpendPlacingBidsIsListedAndCancellable: while a spend over many
// hosts waits on its bids, its plan is listed starting and its owner's
// cancel ends it at once, its hold released; the bids the try then
// placed are withdrawn and the plan stays cancelled.
func TestSpendPlacingBidsIsListedAndCancellable(t *testing.T) {
	bk := &recBank{held: map[string]money.Micro{}, released: map[string]money.Micro{}}
	agents := &raceAgents{book: map[string]bool{}}
	gate := make(chan struct{})
	var waiting atomic.Int64
	agents.onSet = func() { waiting.Add(1); <-gate }
	b, err := New(Config{Agents: agents, Bank: bk, Replica: "r1", Tick: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var vms []string
	for h := range 2*maxInFlight + 1 {
		st := wire.HostState{Host: fmt.Sprintf("h%d", h), Time: time.Now()}
		vm := fmt.Sprintf("h%d-vm", h)
		st.VMs = append(st.VMs, wire.VMState{VM: vm, Owner: "alice"})
		vms = append(vms, vm)
		b.Observe(st)
	}
	req := &wire.SpendRequest{ID: "big", User: "alice", Budget: 10 * money.PerCredit, Duration: wire.Duration(time.Hour), VMs: vms, Strategy: wire.StrategyFair}
	first := make(chan error, 1)
	go func() { _, err := b.Spend(context.Background(), req); first <- err }()
	for waiting.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if ps := b.Plans(&wire.PlansRequest{User: "alice"}).Plans; len(ps) != 1 || ps[0].Status != planStarting {
		t.Fatalf("plans while the bids wait: %+v", ps)
	}
	p, err := b.Cancel(context.Background(), &wire.CancelRequest{Plan: "big", User: "alice"})
	if err != nil || p.Status != wire.PlanCancelled || len(bk.released) != 1 {
		t.Fatalf("cancel while the bids wait: %+v %v (released %v)", p, err, bk.released)
	}
	close(gate)
	<-first
	if ps := b.Plans(&wire.PlansRequest{User: "alice"}).Plans; len(ps) != 1 || ps[0].Status != wire.PlanCancelled {
		t.Fatalf("plans once the try ended: %+v", ps)
	}
	agents.mu.Lock()
	defer agents.mu.Unlock()
	if len(agents.book) != 0 {
		t.Fatalf("%d bids left charging a cancelled plan", len(agents.book))
	}
}
