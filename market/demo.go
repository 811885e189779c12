package market

import (
	"context"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// DemoStart is the virtual time at which the demo scenario begins.
var DemoStart = time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)

// Demo scenario constants: two users whose VMs share two hosts, alice
// spending twice bob's rate, and a CPU-hungry background VM of a third user
// (Sandholm and Lai, Regulated Dynamic Prioritization, §7 run a background
// VM on every node) on host-1.
const (
	demoTick     = 10 * time.Second
	demoDuration = time.Hour
)

// DemoReport is what mrmarket demo prints.
type DemoReport struct {
	// Snapshot is the market halfway through the plans.
	SnapshotAt wire.Duration `json:"snapshot_at"`
	Hosts      []DemoHost    `json:"hosts"`
	VMs        []DemoVM      `json:"vms"`
	// After the plans ended and settled.
	EndAt   wire.Duration       `json:"end_at"`
	Plans   []wire.Plan         `json:"plans"`
	Users   []DemoUser          `json:"users"`
	Ledger  wire.LedgerReply    `json:"ledger"`
	Ratio   float64             `json:"alice_to_bob_share_ratio"`
	Spends  map[string]DemoSpec `json:"spends"`
	Ticks   int                 `json:"ticks"`
	Elapsed wire.Duration       `json:"wall_time"` // to the millisecond
}

// DemoSpec is what a user asked to spend.
type DemoSpec struct {
	Budget   money.Micro   `json:"budget_micro"`
	Duration wire.Duration `json:"duration"`
	VMs      []string      `json:"vms"`
}

// DemoHost is one host in the snapshot.
type DemoHost struct {
	Host  string  `json:"host"`
	Price float64 `json:"price_micro_per_s"`
}

// DemoVM is one VM in the snapshot: its rate and share, and the CPU it
// actually received from the simulated host over the first half.
type DemoVM struct {
	wire.HostVM
	CPU float64 `json:"cpu"` // fraction of its host's CPU used so far
}

// DemoUser is one user's money at the end.
type DemoUser struct {
	User    string      `json:"user"`
	Granted money.Micro `json:"granted_micro"`
	Spent   money.Micro `json:"spent_micro"`
	Balance money.Micro `json:"balance_micro"`
	Held    money.Micro `json:"held_micro"`
}

// RunDemo runs the scripted scenario in simulated time in a temporary data
// directory and reports what happened. Every number comes from the real
// bank, broker and agents talking over a real embedded NATS server.
func RunDemo(ctx context.Context) (rep *DemoReport, err error) {
	wallStart := time.Now()
	dir, err := os.MkdirTemp("", "mrmarket-demo-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	clock := DemoStart
	now := func() time.Time { return clock }
	m, err := Start(ctx, Config{
		Dir: dir, NATSPort: -1, Now: now, TickPeriod: demoTick,
		Hosts: []HostSpec{
			{ID: "host-1", CPUs: 1, VMs: []agent.VM{{ID: "alice-1", Owner: "alice"}, {ID: "bob-1", Owner: "bob"}, {ID: "batch-1", Owner: "batch"}}},
			{ID: "host-2", CPUs: 1, VMs: []agent.VM{{ID: "alice-2", Owner: "alice"}, {ID: "bob-2", Owner: "bob"}}},
		},
	})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	nc, err := m.NC("mrmarket-demo")
	if err != nil {
		return nil, err
	}
	bankc, brokerc := bank.Client{NC: nc, Keys: m.Keys()}, broker.Client{NC: nc, Keys: m.Keys()}

	spends, err := demoFund(ctx, bankc, brokerc)
	if err != nil {
		return nil, err
	}

	rep = &DemoReport{Spends: spends}
	usage0 := m.usage(ctx)
	end := DemoStart.Add(demoDuration + 3*demoTick + demoTick) // past End+Settle
	for clock.Before(end) {
		clock = clock.Add(demoTick)
		if err := m.Tick(ctx, clock); err != nil {
			return nil, err
		}
		rep.Ticks++
		if clock.Sub(DemoStart) == demoDuration/2 {
			if err := m.snapshot(ctx, rep, usage0, clock.Sub(DemoStart)); err != nil {
				return nil, err
			}
		}
	}
	rep.EndAt = wire.Duration(clock.Sub(DemoStart))
	if err := demoAccounts(ctx, bankc, brokerc, rep); err != nil {
		return nil, err
	}
	rep.Elapsed = wire.Duration(time.Since(wallStart).Round(time.Millisecond))
	return rep, nil
}

// usage is each VM's cumulative CPU time on its simulated host.
func (m *Market) usage(ctx context.Context) map[string]time.Duration {
	all := map[string]time.Duration{}
	for _, sim := range m.Sims {
		u, err := sim.Usage(ctx)
		if err != nil {
			continue
		}
		for vm, d := range u {
			all[vm] = d
		}
	}
	return all
}

func (m *Market) snapshot(ctx context.Context, rep *DemoReport, usage0 map[string]time.Duration, at time.Duration) error {
	rep.SnapshotAt = wire.Duration(at)
	prices, err := m.Broker.Price(&wire.PriceRequest{})
	if err != nil {
		return err
	}
	for _, h := range prices.Hosts {
		rep.Hosts = append(rep.Hosts, DemoHost{Host: h.Host, Price: h.Price})
	}
	usage := m.usage(ctx)
	vms := m.Broker.VMs(&wire.VMsRequest{})
	for _, v := range vms.VMs {
		cpu := (usage[v.VM] - usage0[v.VM]).Seconds() / at.Seconds()
		rep.VMs = append(rep.VMs, DemoVM{HostVM: v, CPU: cpu})
	}
	sort.Slice(rep.VMs, func(i, j int) bool {
		if rep.VMs[i].Host != rep.VMs[j].Host {
			return rep.VMs[i].Host < rep.VMs[j].Host
		}
		return rep.VMs[i].VM < rep.VMs[j].VM
	})
	share := map[string]float64{}
	for _, v := range rep.VMs {
		share[v.VM] = v.Share
	}
	if share["bob-2"] > 0 {
		rep.Ratio = share["alice-2"] / share["bob-2"]
	}
	return nil
}

// demoFund grants the demo's users their budgets and starts their plans.
func demoFund(ctx context.Context, bankc bank.Client, brokerc broker.Client) (map[string]DemoSpec, error) {
	credits := func(s string) money.Micro { v, _ := money.Parse(s); return v }
	grants := map[string]money.Micro{"alice": credits("100"), "bob": credits("100"), "batch": credits("50")}
	for _, u := range []string{"alice", "bob", "batch"} {
		if _, err := bankc.Grant(ctx, &wire.GrantRequest{ID: "demo-grant-" + u, User: u, Amount: grants[u]}); err != nil {
			return nil, fmt.Errorf("grant %s: %w", u, err)
		}
	}
	spends := map[string]DemoSpec{
		"alice": {Budget: credits("24"), Duration: wire.Duration(demoDuration), VMs: []string{"alice-1", "alice-2"}},
		"bob":   {Budget: credits("12"), Duration: wire.Duration(demoDuration), VMs: []string{"bob-1", "bob-2"}},
		"batch": {Budget: credits("6"), Duration: wire.Duration(demoDuration), VMs: []string{"batch-1"}},
	}
	for _, u := range []string{"alice", "bob", "batch"} {
		s := spends[u]
		_, err := brokerc.Spend(ctx, &wire.SpendRequest{
			ID: "demo-" + u, User: u, Budget: s.Budget, Duration: s.Duration,
			VMs: s.VMs, Strategy: wire.StrategyFair,
		})
		if err != nil {
			return nil, fmt.Errorf("spend %s: %w", u, err)
		}
	}
	return spends, nil
}

// demoAccounts adds the plans, the users' accounts and the ledger to rep.
func demoAccounts(ctx context.Context, bankc bank.Client, brokerc broker.Client, rep *DemoReport) error {
	plans, err := brokerc.Plans(ctx, &wire.PlansRequest{})
	if err != nil {
		return err
	}
	rep.Plans = plans.Plans
	for _, u := range []string{"alice", "bob", "batch"} {
		b, err := bankc.Balance(ctx, &wire.BalanceRequest{User: u})
		if err != nil {
			return err
		}
		rep.Users = append(rep.Users, DemoUser{User: u, Granted: b.Granted, Spent: b.Spent, Balance: b.Balance, Held: b.Held})
	}
	rep.Ledger, err = bankc.Ledger(ctx)
	return err
}
