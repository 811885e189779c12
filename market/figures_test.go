package market_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// openHolds is user's open holds at the bank, by id.
func openHolds(t *testing.T, bc bank.Client, user string) (map[string]wire.HoldInfo, wire.BalanceReply) {
	t.Helper()
	bal, err := bc.Balance(context.Background(), &wire.BalanceRequest{User: user})
	if err != nil {
		t.Fatal(err)
	}
	holds := map[string]wire.HoldInfo{}
	for _, h := range bal.Holds {
		holds[h.ID] = h
	}
	return holds, bal
}

// TestTwoPlansOnOneVMBothSpend: alice starts two plans whose VMs overlap
// (the README's strategy examples do this). Both hold and both spend
// while they run — the VM's bids add up, one per plan — and when they end
// the bank has captured each budget in full: nothing released, nothing
// held, alice spent the sum. (Issue 15, point 1: with one bid per VM the
// second plan shadowed the first, which then held money and bought
// nothing.)
func TestTwoPlansOnOneVMBothSpend(t *testing.T) {
	ctx := context.Background()
	const tick = 5 * time.Second
	m, clock, bc, brc := upMarket(t, tick)
	start := *clock
	grant(t, bc, "alice", "100")
	const d = 10 * time.Minute
	spend := func(id, budget string, vms ...string) wire.Plan {
		rep, err := brc.Spend(ctx, &wire.SpendRequest{ID: id, User: "alice", Budget: credits(t, budget), Duration: wire.Duration(d),
			VMs: vms, Strategy: wire.StrategyFair})
		if err != nil {
			t.Fatalf("spend %s: %v", id, err)
		}
		return rep.Plan
	}
	p1 := spend("p-one", "6", "h1-vm1")
	p2 := spend("p-two", "4", "h1-vm1", "h2-vm1")
	if p1.Hold == p2.Hold {
		t.Fatalf("two plans share hold %s", p1.Hold)
	}
	budget := map[string]money.Micro{p1.Hold: credits(t, "6"), p2.Hold: credits(t, "4")}

	for clock.Before(start.Add(d / 2)) {
		*clock = clock.Add(tick)
		if err := m.Tick(ctx, *clock); err != nil {
			t.Fatal(err)
		}
	}
	// Halfway: h1-vm1 carries both bids, its rate their sum, and each hold
	// has captured about half its budget (captures lag a tick).
	var vm wire.VMState
	for _, a := range m.Agents {
		for _, v := range a.State().VMs {
			if v.VM == "h1-vm1" {
				vm = v
			}
		}
	}
	b1, ok1 := vm.Bid(p1.ID)
	b2, ok2 := vm.Bid(p2.ID)
	if !ok1 || !ok2 || len(vm.Bids) != 2 {
		t.Fatalf("h1-vm1's bids: %+v, want one of each plan", vm.Bids)
	}
	if diff := vm.Rate - (b1.Rate + b2.Rate); diff > 1e-9 || diff < -1e-9 || b1.Rate <= 0 || b2.Rate <= 0 {
		t.Fatalf("h1-vm1's rate %v is not the sum of its bids %v + %v", vm.Rate, b1.Rate, b2.Rate)
	}
	holds, _ := openHolds(t, bc, "alice")
	elapsed := clock.Sub(start)
	for id, b := range budget {
		h, ok := holds[id]
		if !ok {
			t.Fatalf("hold %s is not open halfway", id)
		}
		lo := money.Micro(float64(b) * (elapsed - 2*tick).Seconds() / d.Seconds())
		hi := money.Micro(float64(b) * elapsed.Seconds() / d.Seconds())
		if h.Captured < lo || h.Captured > hi {
			t.Fatalf("halfway, hold %s (budget %s) captured %s, want %s to %s", id, b, h.Captured, lo, hi)
		}
	}

	end := start.Add(d + 5*tick)
	for clock.Before(end) {
		*clock = clock.Add(tick)
		if err := m.Tick(ctx, *clock); err != nil {
			t.Fatal(err)
		}
	}
	holds, bal := openHolds(t, bc, "alice")
	if len(holds) != 0 || bal.Held != 0 || bal.Spent != credits(t, "10") || bal.Balance != credits(t, "90") {
		t.Fatalf("after both plans: spent %s, held %s, balance %s, open holds %v; want 10, 0, 90", bal.Spent, bal.Held, bal.Balance, holds)
	}
	st, err := bc.Statement(ctx, &wire.StatementRequest{User: "alice", Limit: wire.MaxStatement})
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]money.Micro{}
	for _, e := range st.Entries {
		switch {
		case e.Kind == "grant":
		case e.Amount < 0: // a hold: money out of alice's account
			held[e.Transfer] -= e.Amount
		default:
			t.Fatalf("money came back to alice: %+v (a plan did not spend its budget)", e)
		}
	}
	for id, b := range budget {
		if held["hold:"+id] != b {
			t.Fatalf("statement: hold %s took %s, want %s (%+v)", id, held["hold:"+id], b, st.Entries)
		}
	}
	plans, err := brc.Plans(ctx, &wire.PlansRequest{User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plans.Plans {
		if p.Status != wire.PlanDone || p.Spent != budget[p.Hold] || p.Released != 0 {
			t.Fatalf("plan %s: %s, spent %s, released %s; want done, %s, 0", p.ID, p.Status, p.Spent, p.Released, budget[p.Hold])
		}
	}
	checkLedger(t, bc)
}

// bankHolds follows the bank's holds of plans: an open hold as the bank
// lists it; a closed one (the bank lists only open holds) with its final
// capture worked out from its user's total spent (Σ captured over all its
// holds) when it closes — so each check needs at most one of a user's holds
// to have closed since the last.
type bankHolds struct {
	t      *testing.T
	bc     bank.Client
	user   map[string]string // hold → user
	last   map[string]wire.HoldInfo
	closed map[string]bool
}

// read is every followed hold as the bank has it now.
func (b *bankHolds) read() map[string]wire.HoldInfo {
	b.t.Helper()
	out := map[string]wire.HoldInfo{}
	users := map[string]bool{}
	for _, u := range b.user {
		users[u] = true
	}
	for u := range users {
		open, bal := openHolds(b.t, b.bc, u)
		rest := bal.Spent
		var gone []string
		for id, hu := range b.user {
			if hu != u {
				continue
			}
			h, isOpen := open[id]
			switch {
			case isOpen:
				b.last[id] = h
			case !b.closed[id]:
				gone = append(gone, id)
				continue
			}
			rest -= b.last[id].Captured
		}
		if len(gone) > 1 {
			b.t.Fatalf("holds %v of %s closed at once: their captures cannot be told apart", gone, u)
		}
		for _, id := range gone {
			h, ok := b.last[id]
			if !ok {
				b.t.Fatalf("hold %s of %s was never seen open", id, u)
			}
			h.Captured, h.Released, h.Status = rest, h.Amount-rest, wire.HoldClosed
			b.last[id], b.closed[id] = h, true
		}
		for id, hu := range b.user {
			if hu == u {
				out[id] = b.last[id]
			}
		}
	}
	return out
}

// TestPlansAreTheBanks: what the broker says of a plan's money (spent,
// released, held) and of a job's (spent) is what the bank has for its
// hold, to the micro-credit, after every tick (of irregular length),
// after spend --less (which releases at once), after a cancel and after
// the end; spent + released never exceeds the budget. (Issue 15, point 2:
// plans showed the broker's estimate, spent 12 + released 3.44 on a budget
// of 12.)
func TestPlansAreTheBanks(t *testing.T) {
	ctx := context.Background()
	const tick = 5 * time.Second
	m, clock, bc, brc := upMarket(t, tick)
	start := *clock
	grant(t, bc, "alice", "100")
	grant(t, bc, "bob", "100")
	pa, err := brc.Spend(ctx, &wire.SpendRequest{ID: "p-alice", User: "alice", Budget: credits(t, "12"), Duration: wire.Duration(10 * time.Minute),
		VMs: []string{"h1-vm1", "h2-vm1"}, Strategy: wire.StrategyFair})
	if err != nil {
		t.Fatal(err)
	}
	pb, err := brc.Spend(ctx, &wire.SpendRequest{ID: "p-bob", User: "bob", Budget: credits(t, "5"), Duration: wire.Duration(10 * time.Minute),
		VMs: []string{"h1-vm2", "h2-vm2", "h3-vm2"}, Strategy: wire.StrategyBottleneck, Boost: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	spec := exampleJob(t, "sort.json")
	q, err := brc.Quote(ctx, &wire.QuoteRequest{User: "alice", Job: spec})
	if err != nil {
		t.Fatal(err)
	}
	point := q.Curve[len(q.Curve)/2]
	job, err := brc.Submit(ctx, &wire.SubmitRequest{ID: "job-sort", User: "alice", Job: spec, Deadline: point.Deadline, MaxPrice: point.Price})
	if err != nil {
		t.Fatal(err)
	}
	budget := map[string]money.Micro{pa.Plan.ID: credits(t, "12"), pb.Plan.ID: credits(t, "5"), job.Job.ID: job.Job.Price}
	hold := map[string]string{pa.Plan.ID: pa.Plan.Hold, pb.Plan.ID: pb.Plan.Hold, job.Job.ID: job.Plan.Hold}
	bank := &bankHolds{t: t, bc: bc, user: map[string]string{pa.Plan.Hold: "alice", pb.Plan.Hold: "bob", job.Plan.Hold: "alice"},
		last: map[string]wire.HoldInfo{}, closed: map[string]bool{}}

	check := func(when string, p wire.Plan, holds map[string]wire.HoldInfo) {
		t.Helper()
		h, ok := holds[hold[p.ID]]
		if !ok {
			t.Fatalf("%s: plan %s (hold %s) is not followed", when, p.ID, p.Hold)
		}
		if p.Spent != h.Captured || p.Released != h.Released || p.Held != h.Remaining() {
			t.Fatalf("%s: plan %s says spent %s, released %s, held %s; the bank's hold %s: captured %s, released %s, remaining %s",
				when, p.ID, p.Spent, p.Released, p.Held, h.ID, h.Captured, h.Released, h.Remaining())
		}
		if p.Spent+p.Released > budget[p.ID] || p.Spent+p.Released+p.Held != h.Amount {
			t.Fatalf("%s: plan %s: spent %s + released %s + held %s against a budget of %s (hold of %s)", when, p.ID, p.Spent, p.Released, p.Held, budget[p.ID], h.Amount)
		}
	}
	compare := func(when string) {
		t.Helper()
		holds := bank.read()
		plans, err := brc.Plans(ctx, &wire.PlansRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(plans.Plans) != 3 {
			t.Fatalf("%s: %d plans listed, want 3", when, len(plans.Plans))
		}
		for _, p := range plans.Plans {
			check(when, p, holds)
		}
		jobs, err := brc.Jobs(ctx, &wire.JobsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs.Jobs {
			if h := holds[hold[j.ID]]; j.Spent != h.Captured {
				t.Fatalf("%s: job %s says spent %s; the bank captured %s", when, j.ID, j.Spent, h.Captured)
			}
		}
	}

	compare("at the start")
	rng := rand.New(rand.NewPCG(15, 2))
	step := func() {
		*clock = clock.Add(time.Duration(1+rng.IntN(9)) * time.Second)
		if err := m.Tick(ctx, *clock); err != nil {
			t.Fatal(err)
		}
		compare("at " + clock.Sub(start).String())
	}
	for clock.Before(start.Add(3 * time.Minute)) {
		step()
	}

	// spend --less: the amount comes back at once.
	less := credits(t, "2")
	before := bank.read()[pa.Plan.Hold]
	adj, err := brc.Adjust(ctx, &wire.AdjustRequest{Plan: pa.Plan.ID, User: "alice", ID: "less-1", Less: less})
	if err != nil {
		t.Fatal(err)
	}
	holds := bank.read()
	if got := holds[pa.Plan.Hold].Released - before.Released; got != less {
		t.Fatalf("spend --less 2: the bank released %s", got)
	}
	check("the adjust's answer", adj, holds)
	compare("after --less")

	// Bob cancels: his hold closes with the rest released.
	for range 5 {
		step()
	}
	c, err := brc.Cancel(ctx, &wire.CancelRequest{Plan: pb.Plan.ID, User: "bob", ID: "cancel-bob"})
	if err != nil {
		t.Fatal(err)
	}
	holds = bank.read()
	check("the cancel's answer", c, holds)
	if c.Held != 0 || c.Spent+c.Released != budget[pb.Plan.ID] {
		t.Fatalf("cancelled: spent %s + released %s, held %s, of %s", c.Spent, c.Released, c.Held, budget[pb.Plan.ID])
	}

	// To the end of every plan and job, and past it.
	for clock.Before(start.Add(11 * time.Minute)) {
		step()
	}
	holds = bank.read()
	for id, h := range holds {
		if h.Status != wire.HoldClosed {
			t.Fatalf("hold %s is %s after every plan ended", id, h.Status)
		}
	}
	plans, err := brc.Plans(ctx, &wire.PlansRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plans.Plans {
		if p.Held != 0 || p.Spent+p.Released != budget[p.ID] {
			t.Fatalf("plan %s after its end: spent %s + released %s, held %s, of %s", p.ID, p.Spent, p.Released, p.Held, budget[p.ID])
		}
	}
	checkLedger(t, bc)
}
