// Package brokertest runs real broker replicas with no network, so tests
// of the broker read as scripts of what happens in a market: hosts and
// their VMs appear, users spend, VMs go idle, the clock ticks, a replica
// dies, and every bid request, hold and release the brokers make is
// recorded and printed in the order it happened.
//
// A Harness holds one injected clock; hosts whose published states it
// derives from the bids it was sent (each VM's rate, the host's price as
// their sum, idleness as the script sets it), observed by every live
// replica before each tick; recording Agents, which can be told to fail a
// host; a recording Bank with balances, holds, extensions and releases
// (what a hold released is what the harness's bids charged against it);
// and broker replicas sharing one in-memory plan store
// (broker.MemoryPlans) — or, given Config.Plans, one JetStream bucket —
// so a script can kill the replica running a plan and watch a survivor
// take it over. Replicas run Serial, so what they send comes in a
// deterministic order. A replica can be paused at its next balance
// question (a quote or submit asks it after pricing the job, before
// committing it), so a script can make two admissions race.
//
// Run interprets the commands of github.com/cockroachdb/datadriven
// scripts (broker/testdata/*.txt; the commands are listed on Run), each
// printing what it caused. The package stands apart from package broker's
// own tests on purpose: it drives the broker only through what callers
// see — its exported methods and Config — so a script checks behaviour,
// not internals, and survives any reshaping of them; and other packages'
// tests may drive a broker with it too.
package brokertest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// T0 is when every harness's clock starts.
var T0 = time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)

// Harness is a market of simulated hosts, a recording bank and broker
// replicas on one clock. Its methods are for one test goroutine.
type Harness struct {
	t        testing.TB
	cfg      broker.Config // what every replica is made with
	plans    *broker.MemoryPlans
	replicas []*replica
	stop     chan struct{} // closed at cleanup: frees calls a dead replica left hanging
	hung     sync.WaitGroup

	mu      sync.Mutex // guards what follows: replicas call the agents and the bank
	now     time.Time
	hosts   []*host
	settled map[string]money.Micro // hold → what replaced and cancelled bids charged
	bank    bankState
	sent    map[string][]wire.BidRequest // host → every request it was sent
	log     []string
	// The pace audit (audit.go): what each plan's user signs, by
	// "user/plan"; each hold's schedule, by hold id; what replaced and
	// cancelled bids charged, by (hold, VM); the breaches found.
	signs     map[string]signedCaps
	paced     map[string]*pacedHold
	vmSettled map[[2]string]money.Micro
	breaches  []string
}

type host struct {
	name string
	vms  []*vm
	down bool // its agent does not answer (unavailable)
	// refuses: its agent answers every bid request with a refusal
	// (forbidden), as one that will not take the plan's bids does.
	refuses bool
	tick    int64
}

type vm struct {
	name, owner string
	idle        bool
	bid         *bid
}

// bid is a bid an agent holds: Budget over Duration from Start.
type bid struct {
	plan, hold string
	budget     money.Micro
	duration   time.Duration
	start      time.Time
}

func (b *bid) charged(now time.Time) money.Micro {
	c, _ := money.Charge(b.budget, now.Sub(b.start), b.duration)
	return c
}

func (b *bid) running(now time.Time) bool { return now.Before(b.start.Add(b.duration)) }

type replica struct {
	name     string
	b        *broker.Broker
	dead     bool
	dieAtBid bool          // its next bid request never returns: it dies mid-call
	died     chan struct{} // closed when it does
	once     sync.Once

	// pause, when set, makes the replica's next balance question wait:
	// paused is closed when it does, resume lets it go on (Pause, Resume).
	pause          bool
	paused, resume chan struct{}
	pending        chan string // what the call left paused will print
}

// New makes an empty harness whose replicas will use cfg's Tick, Settle,
// MaxBoost and deadline settings (Tick defaults to 10 s, Settle to 20 s)
// and, when set, its Plans bucket (each replica following it on its own);
// the clock, agents and bank are the harness's, and so is the plan store
// without a bucket.
func New(t testing.TB, cfg broker.Config) *Harness {
	if cfg.Tick <= 0 {
		cfg.Tick = 10 * time.Second
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 20 * time.Second
	}
	h := &Harness{t: t, cfg: cfg, plans: broker.NewMemoryPlans(), stop: make(chan struct{}), now: T0,
		settled: map[string]money.Micro{}, sent: map[string][]wire.BidRequest{}, bank: bankState{users: map[string]*account{}, holds: map[string]*holdRec{}},
		signs: map[string]signedCaps{}, paced: map[string]*pacedHold{}, vmSettled: map[[2]string]money.Micro{}}
	t.Cleanup(func() {
		close(h.stop)
		h.hung.Wait()
		for _, r := range h.replicas {
			r.b.Close()
		}
	})
	return h
}

// Now is the harness's clock.
func (h *Harness) Now() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
}

// AddReplica starts a broker replica called name on the shared plan store.
func (h *Harness) AddReplica(name string) *broker.Broker {
	r := &replica{name: name, died: make(chan struct{})}
	cfg := h.cfg
	cfg.Replica, cfg.Serial, cfg.Now = name, true, h.Now
	if cfg.Plans == nil {
		cfg.Memory = h.plans
	}
	cfg.Agents, cfg.Bank = agents{h, r}, Bank{h, r}
	b, err := broker.New(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	r.b = b
	h.replicas = append(h.replicas, r)
	for _, st := range h.states() {
		b.Observe(st)
	}
	return b
}

// Broker is the live replica called name, or with name "" the first live
// one (started as "broker" if there is none yet).
func (h *Harness) Broker(name string) *broker.Broker { return h.live(name).b }

func (h *Harness) live(name string) *replica {
	if name == "" && len(h.replicas) == 0 {
		h.AddReplica("broker")
	}
	for _, r := range h.replicas {
		if !r.dead && (name == "" || r.name == name) {
			return r
		}
	}
	h.t.Fatalf("no live replica %q", name)
	return nil
}

func (h *Harness) replica(name string) *replica {
	for _, r := range h.replicas {
		if r.name == name {
			return r
		}
	}
	h.t.Fatalf("no replica %q", name)
	return nil
}

// Kill stops ticking replica name: it is dead from now on. With atBid it
// dies only at its next bid request, which then never returns, leaving
// what it was doing half done.
func (h *Harness) Kill(name string, atBid bool) {
	r := h.replica(name)
	if atBid {
		h.mu.Lock()
		r.dieAtBid = true
		h.mu.Unlock()
		return
	}
	r.dead = true
}

// Pause makes replica name's next balance question (a quote's or a
// submit's, once it priced the job) wait until Resume.
func (h *Harness) Pause(name string) {
	r := h.replica(name)
	h.mu.Lock()
	defer h.mu.Unlock()
	r.pause, r.paused, r.resume = true, make(chan struct{}), make(chan struct{})
}

// Resume lets replica name go on from where Pause stopped it.
func (h *Harness) Resume(name string) {
	r := h.replica(name)
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.resume == nil {
		h.t.Fatalf("replica %q is not paused", name)
	}
	r.pause = false
	close(r.resume)
	r.resume, r.paused = nil, nil
}

// AddHost adds a host with VMs given as "vm:owner", and shows it to the
// live replicas.
func (h *Harness) AddHost(name string, vms ...string) {
	h.mu.Lock()
	ho := &host{name: name}
	for _, v := range vms {
		id, owner, ok := strings.Cut(v, ":")
		if !ok {
			h.mu.Unlock()
			h.t.Fatalf("VM %q is not vm:owner", v)
		}
		ho.vms = append(ho.vms, &vm{name: id, owner: owner})
	}
	h.hosts = append(h.hosts, ho)
	slices.SortFunc(h.hosts, func(a, b *host) int { return strings.Compare(a.name, b.name) })
	h.mu.Unlock()
	h.publish()
}

// SetIdle marks VMs idle (or busy) in their hosts' next states, and shows
// the states to the live replicas.
func (h *Harness) SetIdle(idle bool, vms ...string) {
	h.mu.Lock()
	for _, name := range vms {
		v, _ := h.vm(name)
		if v == nil {
			h.mu.Unlock()
			h.t.Fatalf("unknown VM %q", name)
		}
		v.idle = idle
	}
	h.mu.Unlock()
	h.publish()
}

// SetDown makes host's agent not answer (or answer again) bid requests;
// with refuse, it answers each with a refusal instead.
func (h *Harness) SetDown(name string, down, refuse bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ho := range h.hosts {
		if ho.name == name {
			ho.down, ho.refuses = down && !refuse, down && refuse
			return
		}
	}
	h.t.Fatalf("unknown host %q", name)
}

// vm finds a VM and its host; h.mu must be held.
func (h *Harness) vm(name string) (*vm, *host) {
	for _, ho := range h.hosts {
		for _, v := range ho.vms {
			if v.name == name {
				return v, ho
			}
		}
	}
	return nil, nil
}

// Tick moves the clock on by d, shows every host's state to the live
// replicas, and ticks them in the order they were added; their errors are
// logged.
func (h *Harness) Tick(d time.Duration) {
	h.mu.Lock()
	h.now = h.now.Add(d)
	now := h.now
	h.audit() // the agents capture what their bids charged by now
	h.mu.Unlock()
	h.publish()
	for _, r := range h.replicas {
		if r.dead {
			continue
		}
		if err := r.b.Tick(context.Background(), now); err != nil {
			h.logf("%s tick: %v", r.name, err)
		}
	}
}

// publish shows every host's state to the live replicas.
func (h *Harness) publish() {
	states := h.states()
	for _, r := range h.replicas {
		if r.dead {
			continue
		}
		for _, st := range states {
			r.b.Observe(st)
		}
	}
}

// states are the hosts' states now: each VM's running bid and its rate,
// the price their sum.
func (h *Harness) states() []wire.HostState {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]wire.HostState, 0, len(h.hosts))
	for _, ho := range h.hosts {
		ho.tick++
		st := wire.HostState{Host: ho.name, Time: h.now, Tick: ho.tick, VMs: make([]wire.VMState, 0, len(ho.vms))}
		for _, v := range ho.vms {
			vs := wire.VMState{VM: v.name, Owner: v.owner, Idle: v.idle}
			if b := v.bid; b != nil && b.running(h.now) {
				vs.Rate = money.Rate(b.budget, b.duration)
				vs.Bids = []wire.VMBid{{Plan: b.plan, Hold: b.hold, Rate: vs.Rate, Budget: b.budget, Charged: b.charged(h.now), Ends: b.start.Add(b.duration)}}
				st.Price += vs.Rate
			}
			st.VMs = append(st.VMs, vs)
		}
		for i := range st.VMs {
			if st.Price > 0 {
				st.VMs[i].Share = st.VMs[i].Rate / st.Price
			}
		}
		out = append(out, st)
	}
	return out
}

// charged is what the harness's bids charged against hold by now; h.mu
// must be held.
func (h *Harness) charged(hold string) money.Micro {
	c := h.settled[hold]
	for _, ho := range h.hosts {
		for _, v := range ho.vms {
			if v.bid != nil && v.bid.hold == hold {
				c += v.bid.charged(h.now)
			}
		}
	}
	return c
}

func (h *Harness) logf(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.log = append(h.log, fmt.Sprintf(format, args...))
}

// Sent is every bid request host was sent, taken or refused, in order.
func (h *Harness) Sent(host string) []wire.BidRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.sent[host])
}

// Bank is the harness's bank.
func (h *Harness) Bank() Bank { return Bank{h: h} }

// Log returns what happened since it was last called, one line each.
func (h *Harness) Log() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.log
	h.log = nil
	return out
}

// holdName is a hold's id without the random suffix the broker gives it.
func holdName(id string) string {
	if i := strings.LastIndexByte(id, '-'); i > 0 {
		return id[:i]
	}
	return id
}
