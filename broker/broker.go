package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// Sentinel errors of the broker, each wrapping its reply code.
var (
	ErrUnknownVM   = fmt.Errorf("%w: unknown VM", wire.ErrNotFound)
	ErrUnknownHost = fmt.Errorf("%w: unknown host", wire.ErrNotFound)
	ErrUnknownPlan = fmt.Errorf("%w: unknown plan", wire.ErrNotFound)
	ErrNotOwner    = fmt.Errorf("%w: not yours", wire.ErrForbidden)
	ErrPlanReused  = fmt.Errorf("%w: plan id already used for a different spend", wire.ErrConflict)
)

// Bank is what the broker needs of the bank (bank.Client has it).
type Bank interface {
	Hold(ctx context.Context, req *wire.HoldRequest) (wire.HoldReply, error)
	Release(ctx context.Context, req *wire.ReleaseRequest) (wire.ReleaseReply, error)
}

// Config configures a broker.
type Config struct {
	// NC reaches the agents. Required.
	NC *nats.Conn
	// Bank holds and releases plans' money. Required.
	Bank Bank
	// Now is the clock; nil means the wall clock.
	Now func() time.Time
	// Settle is how long after a plan's end its remainder is released,
	// leaving the agents time for their last captures; default 30s.
	Settle time.Duration
	// HoldGrace is how much longer than End+Settle a plan's hold lives, so
	// the bank frees the money if the broker is gone; default 10m.
	HoldGrace time.Duration
	// Metrics, when set, counts requests and running plans.
	Metrics *obs.Metrics
	// Signer signs the broker's bid requests to agents.
	Signer *wire.Signer
	// Identities, when set, makes Serve require spend and cancel requests
	// signed by the user they act for (or an admin); bank.Client has it.
	Identities Identities
}

// Identities resolves a signing key to its principal.
type Identities interface {
	Whois(ctx context.Context, key string) (wire.Principal, error)
}

// plan is a plan and the fingerprint of the spend that made it.
type plan struct {
	wire.Plan
	request string
}

// Broker is the host registry, price feed and plan runner. Its methods are
// safe for concurrent use.
type Broker struct {
	cfg Config

	mu    sync.Mutex
	hosts map[string]wire.HostState
	vmAt  map[string]string // VM → host
	plans map[string]*plan
	order []string // plan ids, oldest first

	nonces wire.NonceCache
	whois  map[string]whoisEntry
}

type whoisEntry struct {
	p  wire.Principal
	at time.Time
}

// New makes a broker.
func New(cfg Config) (*Broker, error) {
	if cfg.NC == nil || cfg.Bank == nil {
		return nil, errors.New("broker: a NATS connection and a Bank are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 30 * time.Second
	}
	if cfg.HoldGrace <= 0 {
		cfg.HoldGrace = 10 * time.Minute
	}
	return &Broker{cfg: cfg, hosts: map[string]wire.HostState{}, vmAt: map[string]string{}, plans: map[string]*plan{},
		whois: map[string]whoisEntry{}}, nil
}

// Observe takes in a host's state; an older state than the one known is ignored.
func (b *Broker) Observe(st wire.HostState) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.hosts[st.Host]; ok {
		if st.Time.Before(old.Time) || st.Time.Equal(old.Time) && st.Tick < old.Tick {
			return
		}
		for _, v := range old.VMs {
			if b.vmAt[v.VM] == st.Host {
				delete(b.vmAt, v.VM)
			}
		}
	}
	b.hosts[st.Host] = st
	for _, v := range st.VMs {
		b.vmAt[v.VM] = st.Host
	}
}

// owner finds a VM's host and owner.
func (b *Broker) owner(vm string) (host, owner string, ok bool) {
	host, ok = b.vmAt[vm]
	if !ok {
		return "", "", false
	}
	for _, v := range b.hosts[host].VMs {
		if v.VM == vm {
			return host, v.Owner, true
		}
	}
	return "", "", false
}

func spendFingerprint(r *wire.SpendRequest) string {
	return fmt.Sprint(r.User, int64(r.Budget), r.Duration.D(), r.VMs, r.Strategy)
}

func newPlanID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on Linux
	return "plan-" + hex.EncodeToString(b[:])
}

// Spend starts a plan: check ownership, plan with the strategy, hold the
// budget, bid on every host. All of it or nothing.
func (b *Broker) Spend(ctx context.Context, req *wire.SpendRequest) (wire.SpendReply, error) {
	if err := req.Validate(); err != nil {
		return wire.SpendReply{}, err
	}
	strategy, err := strategies.ByName(req.Strategy)
	if err != nil {
		return wire.SpendReply{}, fmt.Errorf("%w: %v", wire.ErrBadRequest, err)
	}
	id := req.ID
	if id == "" {
		id = newPlanID()
	}
	fp := spendFingerprint(req)

	b.mu.Lock()
	if p, ok := b.plans[id]; ok {
		b.mu.Unlock()
		if p.request != fp {
			return wire.SpendReply{}, fmt.Errorf("%w: %q", ErrPlanReused, id)
		}
		return wire.SpendReply{Plan: clonePlan(p.Plan)}, nil
	}
	targets := make([]strategies.Target, len(req.VMs))
	for i, vm := range req.VMs {
		host, owner, ok := b.owner(vm)
		switch {
		case !ok:
			b.mu.Unlock()
			return wire.SpendReply{}, fmt.Errorf("%w %q (see `mrmarket vms`)", ErrUnknownVM, vm)
		case owner != req.User:
			b.mu.Unlock()
			return wire.SpendReply{}, fmt.Errorf("%w: VM %q belongs to another user", ErrNotOwner, vm)
		}
		targets[i] = strategies.Target{VM: vm, Host: host}
	}
	// Reserve the id so a concurrent spend with it waits for this one's outcome.
	p := &plan{request: fp, Plan: wire.Plan{ID: id, User: req.User, Strategy: req.Strategy, Budget: req.Budget,
		Duration: req.Duration, Hold: "hold-" + id, Status: wire.PlanFailed}}
	b.plans[id] = p
	b.mu.Unlock()

	// The plan is built on a private copy: the reserved one is visible to
	// Tick, Cancel and Plans, and changes only under the lock.
	work := *p
	if err := b.start(ctx, &work, strategy, targets); err != nil {
		b.mu.Lock()
		delete(b.plans, id)
		b.mu.Unlock()
		return wire.SpendReply{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	*p = work
	b.order = append(b.order, id)
	b.countRunning()
	return wire.SpendReply{Plan: clonePlan(p.Plan)}, nil
}

// start holds the money and places the bids, undoing both on failure.
func (b *Broker) start(ctx context.Context, p *plan, strategy strategies.Strategy, targets []strategies.Target) error {
	allocs, err := strategy.Plan(strategies.Input{Budget: p.Budget, Duration: p.Duration.D(), Targets: targets})
	if err != nil {
		return fmt.Errorf("%w: %v", wire.ErrBadRequest, err)
	}
	now := b.cfg.Now()
	end := now.Add(p.Duration.D())
	if _, err := b.cfg.Bank.Hold(ctx, &wire.HoldRequest{ID: p.Hold, User: p.User, Amount: p.Budget,
		Expires: end.Add(b.cfg.Settle + b.cfg.HoldGrace), Memo: "plan " + p.ID}); err != nil {
		return err
	}
	byHost := map[string][]wire.Bid{}
	var hosts []string
	for _, a := range allocs {
		if _, ok := byHost[a.Host]; !ok {
			hosts = append(hosts, a.Host)
		}
		byHost[a.Host] = append(byHost[a.Host], wire.Bid{VM: a.VM, Owner: p.User, Plan: p.ID, Hold: p.Hold,
			Budget: a.Budget, Duration: p.Duration})
		p.VMs = append(p.VMs, wire.PlanVM{VM: a.VM, Host: a.Host, Budget: a.Budget, Rate: money.Rate(a.Budget, p.Duration.D())})
	}
	var placed []string
	for _, h := range hosts {
		req := &wire.BidRequest{Versioned: wire.Versioned{V: wire.Version}, Set: byHost[h]}
		if err := wire.CallAs(ctx, b.cfg.NC, b.cfg.Signer, wire.AgentBidSubject(h), req, nil); err != nil {
			b.cancelBids(ctx, p.ID, placed, byHost)
			if _, rerr := b.cfg.Bank.Release(ctx, &wire.ReleaseRequest{Hold: p.Hold, User: p.User}); rerr != nil {
				b.cfg.Metrics.Error("broker", "release")
				err = fmt.Errorf("%w (and releasing its hold failed: %v; the bank frees it at expiry)", err, rerr)
			}
			return fmt.Errorf("placing bids on %s: %w", h, err)
		}
		placed = append(placed, h)
	}
	p.Start, p.End, p.Status = now, end, wire.PlanRunning
	return nil
}

// cancelBids removes plan's bids from hosts.
func (b *Broker) cancelBids(ctx context.Context, planID string, hosts []string, byHost map[string][]wire.Bid) error {
	var errs []error
	for _, h := range hosts {
		req := &wire.BidRequest{Versioned: wire.Versioned{V: wire.Version}, Plan: planID}
		for _, bid := range byHost[h] {
			req.Cancel = append(req.Cancel, bid.VM)
		}
		if err := wire.CallAs(ctx, b.cfg.NC, b.cfg.Signer, wire.AgentBidSubject(h), req, nil); err != nil {
			b.cfg.Metrics.Error("broker", "cancel_bids")
			errs = append(errs, fmt.Errorf("cancelling bids on %s: %w", h, err))
		}
	}
	return errors.Join(errs...)
}

// Cancel ends a running plan now and releases what it did not spend.
// Cancelling a finished plan changes nothing and returns it.
func (b *Broker) Cancel(ctx context.Context, req *wire.CancelRequest) (wire.Plan, error) {
	if err := req.Validate(); err != nil {
		return wire.Plan{}, err
	}
	b.mu.Lock()
	p, ok := b.plans[req.Plan]
	switch {
	case !ok || p.Status == wire.PlanFailed:
		b.mu.Unlock()
		return wire.Plan{}, fmt.Errorf("%w %q", ErrUnknownPlan, req.Plan)
	case p.User != req.User:
		b.mu.Unlock()
		return wire.Plan{}, fmt.Errorf("%w: plan %q belongs to another user", ErrNotOwner, req.Plan)
	case p.Status != wire.PlanRunning:
		b.mu.Unlock()
		return clonePlan(p.Plan), nil
	}
	byHost := map[string][]wire.Bid{}
	var hosts []string
	for _, v := range p.VMs {
		if _, ok := byHost[v.Host]; !ok {
			hosts = append(hosts, v.Host)
		}
		byHost[v.Host] = append(byHost[v.Host], wire.Bid{VM: v.VM})
	}
	b.mu.Unlock()

	// A host that does not answer keeps charging until the hold is
	// released; releasing anyway bounds that to nothing more.
	bidErr := b.cancelBids(ctx, p.ID, hosts, byHost)
	rel, err := b.cfg.Bank.Release(ctx, &wire.ReleaseRequest{Hold: p.Hold, User: p.User})
	if err != nil {
		return wire.Plan{}, errors.Join(err, bidErr)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.Status == wire.PlanRunning {
		p.Status, p.Released, p.End = wire.PlanCancelled, rel.Released, b.cfg.Now()
	}
	b.countRunning()
	return clonePlan(p.Plan), nil
}

// Tick ends the plans whose end passed Settle ago: their remainder goes back
// to the user. A release the bank refuses now is retried next tick.
func (b *Broker) Tick(ctx context.Context, now time.Time) error {
	b.mu.Lock()
	var due []*plan
	for _, id := range b.order {
		p := b.plans[id]
		if p.Status == wire.PlanRunning && !now.Before(p.End.Add(b.cfg.Settle)) {
			due = append(due, p)
		}
	}
	b.mu.Unlock()
	var errs []error
	for _, p := range due {
		rel, err := b.cfg.Bank.Release(ctx, &wire.ReleaseRequest{Hold: p.Hold, User: p.User})
		if err != nil {
			b.cfg.Metrics.Error("broker", "release")
			errs = append(errs, fmt.Errorf("releasing plan %s: %w", p.ID, err))
			continue
		}
		b.mu.Lock()
		if p.Status == wire.PlanRunning {
			p.Status, p.Released = wire.PlanDone, rel.Released
		}
		b.mu.Unlock()
	}
	b.mu.Lock()
	b.countRunning()
	b.mu.Unlock()
	return errors.Join(errs...)
}

func (b *Broker) countRunning() {
	if b.cfg.Metrics == nil {
		return
	}
	n := 0
	for _, p := range b.plans {
		if p.Status == wire.PlanRunning {
			n++
		}
	}
	b.cfg.Metrics.PlansRunning.Set(float64(n))
}

func clonePlan(p wire.Plan) wire.Plan {
	p.VMs = slices.Clone(p.VMs)
	return p
}

// Plans lists plans, oldest first, of req.User when set.
func (b *Broker) Plans(req *wire.PlansRequest) wire.PlansReply {
	b.mu.Lock()
	defer b.mu.Unlock()
	rep := wire.PlansReply{Plans: []wire.Plan{}}
	for _, id := range b.order {
		if p := b.plans[id]; req.User == "" || p.User == req.User {
			rep.Plans = append(rep.Plans, clonePlan(p.Plan))
		}
	}
	return rep
}

// Price reports every host's price (or req.Host's), sorted by host.
func (b *Broker) Price(req *wire.PriceRequest) (wire.PriceReply, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rep := wire.PriceReply{Hosts: []wire.HostPrice{}}
	for _, st := range b.hosts {
		if req.Host != "" && st.Host != req.Host {
			continue
		}
		hp := wire.HostPrice{Host: st.Host, Price: st.Price, VMs: len(st.VMs), Updated: st.Time}
		for _, v := range st.VMs {
			if v.Rate > 0 {
				hp.Funded++
			}
		}
		rep.Hosts = append(rep.Hosts, hp)
	}
	if req.Host != "" && len(rep.Hosts) == 0 {
		return rep, fmt.Errorf("%w %q", ErrUnknownHost, req.Host)
	}
	sort.Slice(rep.Hosts, func(i, j int) bool { return rep.Hosts[i].Host < rep.Hosts[j].Host })
	return rep, nil
}

// VMs lists the VMs of every host, filtered by owner and host, sorted by
// host then VM.
func (b *Broker) VMs(req *wire.VMsRequest) wire.VMsReply {
	b.mu.Lock()
	defer b.mu.Unlock()
	rep := wire.VMsReply{VMs: []wire.HostVM{}}
	for _, st := range b.hosts {
		if req.Host != "" && st.Host != req.Host {
			continue
		}
		for _, v := range st.VMs {
			if req.Owner == "" || v.Owner == req.Owner {
				rep.VMs = append(rep.VMs, wire.HostVM{Host: st.Host, VMState: v})
			}
		}
	}
	sort.Slice(rep.VMs, func(i, j int) bool {
		if rep.VMs[i].Host != rep.VMs[j].Host {
			return rep.VMs[i].Host < rep.VMs[j].Host
		}
		return rep.VMs[i].VM < rep.VMs[j].VM
	})
	return rep
}

// Healthy reports whether the broker can reach NATS.
func (b *Broker) Healthy() error {
	if !b.cfg.NC.IsConnected() {
		return fmt.Errorf("broker NATS connection is %s", b.cfg.NC.Status())
	}
	return nil
}

// whoisTTL is how long the broker trusts a cached identity.
const whoisTTL = time.Minute

// authorize checks that a spend or cancel for user was signed by that user
// (or an admin) and is not a replay. Without Identities it allows anything.
func (b *Broker) authorize(ctx context.Context, c wire.Caller, user string) error {
	if b.cfg.Identities == nil {
		return nil
	}
	if !c.Signed() {
		return wire.ErrUnsigned
	}
	b.mu.Lock()
	e, ok := b.whois[c.Key]
	b.mu.Unlock()
	if !ok || time.Since(e.at) > whoisTTL {
		p, err := b.cfg.Identities.Whois(ctx, c.Key)
		if err != nil {
			return err
		}
		e = whoisEntry{p, time.Now()}
		b.mu.Lock()
		b.whois[c.Key] = e
		b.mu.Unlock()
	}
	if !(e.p.Role == wire.RoleAdmin || e.p.Role == wire.RoleUser && e.p.Name == user) {
		return fmt.Errorf("%w: %s (%s) may not spend for %s", wire.ErrRole, e.p.Name, e.p.Role, user)
	}
	return b.nonces.Use(c, time.Now())
}
