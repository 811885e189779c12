package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// Sentinel errors of the broker, each wrapping its reply code (the last
// two are the plan store's own, never replied).
var (
	ErrUnknownVM   = fmt.Errorf("%w: unknown VM", wire.ErrNotFound)
	ErrUnknownHost = fmt.Errorf("%w: unknown host", wire.ErrNotFound)
	ErrUnknownPlan = fmt.Errorf("%w: unknown plan", wire.ErrNotFound)
	ErrNotOwner    = fmt.Errorf("%w: not yours", wire.ErrForbidden)
	ErrPlanReused  = fmt.Errorf("%w: plan id already used for a different spend", wire.ErrConflict)
	ErrNotRunning  = fmt.Errorf("%w: plan is not running", wire.ErrConflict)
	ErrLess        = fmt.Errorf("%w: cannot give back more than the plan has not spent", wire.ErrInsufficient)

	// Of the deadline service.
	ErrDeadline     = fmt.Errorf("%w: the deadline cannot be met", wire.ErrConflict)
	ErrUnaffordable = fmt.Errorf("%w: the job's price is above what the user can pay", wire.ErrInsufficient)
	ErrJobRunning   = fmt.Errorf("%w: a job of that name is already admitted", wire.ErrConflict)
	ErrUnknownJob   = fmt.Errorf("%w: unknown job", wire.ErrNotFound)

	errExists = errors.New("broker: plan exists")
	errStale  = errors.New("broker: plan changed meanwhile")
)

// Bank is what the broker needs of the bank (bank.Client has it).
type Bank interface {
	Hold(ctx context.Context, req *wire.HoldRequest) (wire.HoldReply, error)
	Extend(ctx context.Context, req *wire.ExtendRequest) (wire.HoldReply, error)
	Release(ctx context.Context, req *wire.ReleaseRequest) (wire.ReleaseReply, error)
}

// Identities resolves a signing key to its principal.
type Identities = service.Identities

// Agents is how the broker reaches the hosts' agents: over NATS (the
// default, signed by Config.Signer), or in-process in the simulator.
type Agents interface {
	// Bid sends host's agent the changes (each a plan's, at most one of a
	// plan) as one batch and gives each change's error, nil where it was
	// taken.
	Bid(ctx context.Context, host string, changes []*wire.BidRequest) []error
}

// natsAgents sends bid requests on the agents' NATS subjects.
type natsAgents struct {
	nc     *nats.Conn
	signer *signing.Signer
	// adminKey, when set, makes a bid's answer count only signed by the
	// host's own agent (signing.TrustPrincipal): a forged "done" or refusal
	// is ignored.
	adminKey  string
	onRefused func(error)
}

// bidAttempt bounds a try of a bid request: an agent's answer may wait on
// one bank attempt for the mandate signer's identity and one for the
// capture of what the change settled (agent.SetBids), each bounded by
// rpc.DaemonAttempt.
const bidAttempt = 2 * rpc.DaemonAttempt

// Bid sends the changes to host's agent in one signed batch (wire.BidBatch).
// A batch of one plan's change stays in order with that plan's other bid
// requests only (wire.HeaderOrder: a cancel does not wait at the agent
// behind the bids of every other plan this broker is placing); a round's
// batch of several plans is in order with the broker's other rounds. A try
// that gets no answer within bidAttempt — lost with a dead NATS node — is
// sent again, signed afresh (rpc.Retried): a change sets the plan's bids
// on the host, so applying it twice is applying it once. No agent there is
// answered at once: the host is down, its bids come with a later round.
func (a natsAgents) Bid(ctx context.Context, host string, changes []*wire.BidRequest) []error {
	batch := &wire.BidBatch{Changes: make([]wire.BidRequest, len(changes))}
	order := ""
	for i, c := range changes {
		batch.Changes[i] = *c
		batch.Changes[i].V = wire.Version
	}
	if len(changes) == 1 {
		order = changes[0].Plan
	}
	opts := []rpc.Option{rpc.SignedBy(a.signer), rpc.Header(wire.HeaderOrder, order), rpc.Retried(bidAttempt, rpc.TimedOut)}
	if a.adminKey != "" {
		opts = append(opts, rpc.Trusted(signing.TrustPrincipal(a.adminKey, wire.RoleAgent, host), a.onRefused))
	}
	res, err := rpc.Request[wire.BidResults](ctx, a.nc, wire.AgentBidSubject(host), batch, opts...)
	errs := make([]error, len(changes))
	for i := range errs {
		if err != nil {
			errs[i] = err
		} else if len(res.Errors) != len(changes) {
			errs[i] = wire.Errorf(wire.ErrInternal, "%s answered %d results to %d bid changes", host, len(res.Errors), len(changes))
		} else {
			errs[i] = res.Err(i)
		}
	}
	return errs
}

// Config configures a broker.
type Config struct {
	// NC is the broker's NATS connection: it reaches the agents, unless
	// Agents is set, and Serve answers on it.
	NC *nats.Conn
	// Agents, when set, reaches the agents instead of NATS.
	Agents Agents
	// Serial runs a round's plans and its bid requests one at a time in a
	// fixed order: what a deterministic simulation needs.
	Serial bool
	// Bank holds and releases plans' money. Required.
	Bank Bank
	// Now is the clock; nil means the wall clock.
	Now func() time.Time
	// SigningClock is what signing times and cached identities are checked
	// against; nil means the wall clock (a signature's time is the signer's
	// wall clock, whatever virtual clock the market runs on).
	SigningClock func() time.Time
	// Tick is how often Tick runs; a replica silent for 2 ticks loses its
	// plans to the others. Default 1s.
	Tick time.Duration
	// Settle is how long after a plan's end its remainder is released,
	// leaving the agents time for their last captures; default 30s.
	Settle time.Duration
	// HoldGrace is how much longer than End+Settle a plan's hold lives, so
	// the bank frees the money if no broker is left; default 10m.
	HoldGrace time.Duration
	// MaxBoost caps the sum of the boosts of all bottleneck-elimination
	// plans (Sandholm and Lai §7.4: 0.9).
	MaxBoost float64
	// Plans is the MRM_PLANS bucket shared by the replicas; nil keeps plans
	// in this process's memory (Memory's, or the replica's own).
	Plans jetstream.KeyValue
	// RecreatePlans, when set, has the plans bucket made again once it is
	// found deleted, by whoever administers JetStream (the market holds
	// the admin's key; the broker may not create streams). Without it the
	// broker opens the bucket again once the admin has made it (mrmarket
	// nats assets); either way it then writes its plans back.
	RecreatePlans func(ctx context.Context) error
	// Memory, when set and Plans is not, is an in-memory plan store this
	// replica shares with others in the same process (brokertest's
	// failover scripts).
	Memory *MemoryPlans
	// Replica names this replica (default: random).
	Replica string
	// Metrics, when set, counts requests and running plans.
	Metrics *obs.Metrics
	// Logger hears what an operator should know of: plans started, ended,
	// cancelled or failed, records refused or recovered, requests refused,
	// failed ticks. nil: a discard logger.
	Logger *slog.Logger
	// Signer signs the broker's bid requests to agents.
	Signer *signing.Signer
	// DeadlineShare is the share of its hosts an admitted job holds while
	// it runs (EDF); default 0.8, at most 0.95.
	DeadlineShare float64
	// DeadlineKappa scales MRM's deadline premium (Eq. 13's κ, relative to
	// the run's cost); default 1.
	DeadlineKappa float64
	// MinHistory is how many finished jobs the processing-time regression
	// needs before it replaces the jobs' ARIA profiles; default 5.
	MinHistory int
	// JobOrder is the overlap policy (Lin et al.) best-effort jobs share
	// the reserved share by: maxsrpt (default), splitsrpt, klps or fifo.
	JobOrder string
	// Identities, when set, makes Serve require the requests that change
	// plans and jobs (see Endpoints) signed, once each, by the user they act
	// for (or an admin).
	Identities Identities
	// Nonces, when set, is where Serve records signed requests' nonces;
	// nil: the MRM_NONCES bucket when the broker has a plan bucket (shared
	// by the replicas and kept across restarts), else this process's memory.
	Nonces service.Nonces
	// AdminKey is the trust anchor (creds/admin.pub): when set with
	// Identities, identities count only with the admin's records
	// (service.Certified) and host states only sealed by their host's agent
	// (states.go).
	AdminKey string
}

// Broker is the host registry, price feed and plan runner. Its methods are
// safe for concurrent use.
type Broker struct {
	cfg   Config
	store planStore
	admit sync.Mutex // one admission at a time: quotes and submits see a stable queue
	// mandates caches the mandates read (mandate.go).
	mandates mandate.Cache
	// recovered: the plans the store lost were recovered from the bank (recover.go).
	recovered recovery
	// inStart counts the tries of start running here, by plan (plans.go).
	startMu sync.Mutex
	inStart map[planRef]int
	// placings are the tries of start placing bids here, by plan (plans.go).
	placings map[planRef]*placing

	mu    sync.Mutex
	hosts map[string]wire.HostState
	vmAt  map[string]vmPlace // VM → where its state is
	stats map[string]*strategies.PriceStats
	// beStats is each host's best-effort price history (bestEffortPrice).
	beStats map[string]*strategies.PriceStats
	// used is each VM's share-seconds of its host used, as its agent's
	// states report (Util over the time between them), since this replica
	// started: what a job's VMs used is how much work it did (usedWork).
	used map[string]float64
	// retired are the hosts whose agent key was revoked, and when (the
	// signing clock): states sealed before are refused (retire.go).
	retired map[string]time.Time
	// periods are each host's agent's tick, as its states' times show
	// (stale.go); staleSeen the hosts last found stale.
	periods   map[string]time.Duration
	staleSeen map[string]bool
	// sealWhois caches the plan records' signers (seal.go), forgotten on
	// revocations like the others.
	sealWhois *service.WhoisCache
	// roundSince is when the round running now began (unix ns, Config.Now;
	// 0: none runs), lastBeat when the last heartbeat was written (the
	// heartbeat loop of Run, heartbeat.go).
	roundSince atomic.Int64
	lastBeat   atomic.Int64
}

// vmPlace is a VM's host and its index in the host's state.
type vmPlace struct {
	host  string
	index int
}

// New makes a broker.
func New(cfg Config) (*Broker, error) {
	if cfg.Bank == nil || cfg.NC == nil && cfg.Agents == nil {
		return nil, errors.New("broker: a Bank, and a NATS connection or Agents, are required")
	}
	if cfg.Agents == nil {
		cfg.Agents = natsAgents{nc: cfg.NC, signer: cfg.Signer}
		if cfg.Identities != nil && cfg.AdminKey != "" {
			m := cfg.Metrics
			cfg.Agents = natsAgents{nc: cfg.NC, signer: cfg.Signer, adminKey: cfg.AdminKey,
				onRefused: func(error) { m.Error("broker", "untrusted_reply") }}
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 30 * time.Second
	}
	if cfg.HoldGrace <= 0 {
		cfg.HoldGrace = 10 * time.Minute
	}
	if cfg.MaxBoost <= 0 {
		cfg.MaxBoost = 0.9
	}
	if !(cfg.DeadlineShare > 0 && cfg.DeadlineShare <= maxDeadlineShare) {
		cfg.DeadlineShare = defaultDeadlineShare
	}
	if !(cfg.DeadlineKappa > 0) {
		cfg.DeadlineKappa = 1
	}
	switch cfg.JobOrder {
	case "":
		cfg.JobOrder = strategies.PolicyMaxSRPT
	case strategies.PolicyMaxSRPT, strategies.PolicySplitSRPT, strategies.PolicyKLPS, strategies.PolicyFIFO:
	default:
		return nil, fmt.Errorf("broker: unknown job order %q (maxsrpt, splitsrpt, klps, fifo)", cfg.JobOrder)
	}
	if cfg.MinHistory <= 0 {
		cfg.MinHistory = defaultMinHistory
	}
	if cfg.Replica == "" {
		cfg.Replica = "broker-" + randomHex()
	}
	if err := wire.CheckName("replica", cfg.Replica); err != nil {
		return nil, err
	}
	b := &Broker{cfg: cfg, hosts: map[string]wire.HostState{}, vmAt: map[string]vmPlace{}, inStart: map[planRef]int{}, placings: map[planRef]*placing{},
		stats: map[string]*strategies.PriceStats{}, beStats: map[string]*strategies.PriceStats{}, used: map[string]float64{}, retired: map[string]time.Time{},
		periods: map[string]time.Duration{}, staleSeen: map[string]bool{}, sealWhois: service.NewWhoisCache(whoisTTL, whoisSize)}
	b.cfg.Agents = retiredAgents{Agents: b.cfg.Agents, b: b}
	if cfg.Plans != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := newKVStore(ctx, cfg.Plans, &sealing{signer: cfg.Signer, ids: b.identities(),
			whois: b.sealWhois, now: cfg.SigningClock, metrics: cfg.Metrics, logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		s.recreate = recreatePlans(cfg.NC, cfg.Plans, cfg.RecreatePlans)
		s.nc = cfg.NC
		b.store = s
	} else if cfg.Memory != nil {
		b.store = cfg.Memory.s
	} else {
		b.store = newMemStore()
	}
	return b, nil
}

// Close stops following the plan store.
func (b *Broker) Close() { b.store.close() }

// Replica is this replica's name.
func (b *Broker) Replica() string { return b.cfg.Replica }

func randomHex() string {
	var x [8]byte
	_, _ = rand.Read(x[:]) // crypto/rand never fails on Linux
	return hex.EncodeToString(x[:])
}

// Observe takes in a host's state; an older state than the one known is
// ignored. Each new state adds to the host's price history.
func (b *Broker) Observe(st wire.HostState) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.hosts[st.Host]; ok && !st.Time.After(old.Time) && !(st.Time.Equal(old.Time) && st.Tick > old.Tick) {
		return
	}
	b.setHost(st)
}

// setHost makes st its host's state, whatever the state known (the caller
// ordered them: Observe by their times, the state intake by their seals).
// b.mu must be held.
func (b *Broker) setHost(st wire.HostState) {
	delete(b.retired, st.Host) // a state of a new agent key: the host is back
	old, known := b.hosts[st.Host]
	if known {
		b.notePeriod(old, st)
		for _, v := range old.VMs {
			if b.vmAt[v.VM].host == st.Host {
				delete(b.vmAt, v.VM)
			}
		}
	}
	st.VMs = b.unclaimed(st)
	if dt := st.Time.Sub(old.Time).Seconds(); known && dt > 0 {
		for _, v := range st.VMs {
			b.used[v.VM] += v.Util * dt
		}
	}
	b.hosts[st.Host] = st
	for i, v := range st.VMs {
		b.vmAt[v.VM] = vmPlace{st.Host, i}
	}
	s := b.stats[st.Host]
	if s == nil {
		s = &strategies.PriceStats{}
		b.stats[st.Host] = s
	}
	s.Observe(st.Price)
	be := b.beStats[st.Host]
	if be == nil {
		be = &strategies.PriceStats{}
		b.beStats[st.Host] = be
	}
	be.Observe(b.bestEffortPrice(st))
}

// unclaimed is st's VMs less those another host reports: a VM belongs to
// the first host whose state lists it until that host's own state drops it
// (a VM that moves is taken by its new host on the state after the old one
// let it go), so no host's state — a compromised agent's included — takes
// over another host's VM. Each VM refused is counted ("vm_claimed"). b.mu
// must be held.
func (b *Broker) unclaimed(st wire.HostState) []wire.VMState {
	var keep []wire.VMState
	for i, v := range st.VMs {
		at, ok := b.vmAt[v.VM]
		if !ok || at.host == st.Host {
			if keep != nil {
				keep = append(keep, v)
			}
			continue
		}
		if keep == nil {
			keep = append(make([]wire.VMState, 0, len(st.VMs)), st.VMs[:i]...)
		}
		b.cfg.Metrics.Error("broker", "vm_claimed")
	}
	if keep == nil {
		return st.VMs
	}
	return keep
}

// bestEffortPrice is a host's price less the rates of admitted jobs' bids:
// what a deadline job competes with when it runs, since EDF runs one
// deadline job per host at a time.
func (b *Broker) bestEffortPrice(st wire.HostState) float64 {
	y := st.Price
	for _, v := range st.VMs {
		for _, bid := range v.Bids {
			if p, ok := b.store.get(planRef{v.Owner, bid.Plan}); ok && p.rec.Job != nil {
				y -= bid.Rate
			}
		}
	}
	return max(y, 0)
}

// vmInfo finds a VM's host and state; b.mu must be held.
func (b *Broker) vmInfo(vm string) (string, wire.VMState, bool) {
	at, ok := b.vmAt[vm]
	if !ok {
		return "", wire.VMState{}, false
	}
	vms := b.hosts[at.host].VMs
	if at.index >= len(vms) || vms[at.index].VM != vm {
		return "", wire.VMState{}, false
	}
	return at.host, vms[at.index], true
}

// Price reports every host's price (or req.Host's), sorted by host.
func (b *Broker) Price(req *wire.PriceRequest) (wire.PriceReply, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rep := wire.PriceReply{Hosts: []wire.HostPrice{}}
	now := b.cfg.Now()
	for _, st := range b.hosts {
		if req.Host != "" && st.Host != req.Host {
			continue
		}
		_, retired := b.retired[st.Host]
		hp := wire.HostPrice{Host: st.Host, Price: st.Price, VMs: len(st.VMs), Updated: st.Time, Retired: retired, Stale: b.stale(st, now)}
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

// Predict answers a what-if question from a host's price history (Sandholm
// and Lai §5.4, the prediction strategy).
func (b *Broker) Predict(req *wire.PredictRequest) (wire.PredictReply, error) {
	b.mu.Lock()
	s, ok := b.stats[req.Host]
	var stats strategies.PriceStats
	if ok {
		stats = *s
	}
	b.mu.Unlock()
	if !ok {
		return wire.PredictReply{}, fmt.Errorf("%w %q", ErrUnknownHost, req.Host)
	}
	d, err := stats.Dist()
	if err != nil {
		return wire.PredictReply{}, fmt.Errorf("%w: %v", wire.ErrNotFound, err)
	}
	rep := wire.PredictReply{Host: req.Host, Observations: stats.N, MeanPrice: d.Mean, StdDevPrice: d.StdDev,
		Spending: req.Spending, Performance: req.Performance, Guarantee: req.Guarantee}
	switch req.Query {
	case wire.WhatIfPerformance:
		rep.Performance = d.GetPerformance(req.Spending, req.Guarantee)
	case wire.WhatIfPrice:
		rep.Spending = d.GetPrice(req.Performance, req.Guarantee)
	case wire.WhatIfGuarantee:
		rep.Guarantee = d.GetGuarantee(req.Spending, req.Performance)
	}
	return rep, nil
}

// VMs lists the VMs of every host, filtered by owner and host, sorted by
// host then VM: the admin's and the brokers' view, every user's money in
// it.
func (b *Broker) VMs(req *wire.VMsRequest) wire.VMsReply {
	return b.listVMs(req.Host, func(v *wire.VMState) bool { return req.Owner == "" || v.Owner == req.Owner }, false)
}

// UserVMs is user's view of the VMs of every host (or of host): its own
// VMs as VMs lists them, and of the other users' VMs only, per host, how
// many there are and their rates and shares combined (wire.OtherVMs).
// Another user's plans, holds, budgets and charges are theirs, as in
// Plans; so are its VMs' names and owners, which name a tenant and what it
// runs, and each VM's rate, share and use, which say what it spends.
func (b *Broker) UserVMs(user, host string) wire.VMsReply {
	return b.listVMs(host, func(v *wire.VMState) bool { return v.Owner == user }, true)
}

// listVMs lists the VMs of host ("": every host) that shown admits, sorted
// by host then VM; with others, the rest of each host's are counted in
// the reply's Others, in host order.
func (b *Broker) listVMs(host string, shown func(*wire.VMState) bool, others bool) wire.VMsReply {
	b.mu.Lock()
	defer b.mu.Unlock()
	rep := wire.VMsReply{VMs: []wire.HostVM{}}
	now := b.cfg.Now()
	for _, st := range b.hosts {
		if host != "" && st.Host != host {
			continue
		}
		stale := b.stale(st, now)
		rest := wire.OtherVMs{Host: st.Host, Updated: st.Time, Stale: stale}
		for _, v := range st.VMs {
			switch {
			case shown(&v):
				rep.VMs = append(rep.VMs, wire.HostVM{Host: st.Host, VMState: v, Resources: st.Resources, Updated: st.Time, Stale: stale})
			case others:
				rest.VMs++
				rest.Rate += v.Rate
				rest.Share += v.Share
			}
		}
		if rest.VMs > 0 {
			rep.Others = append(rep.Others, rest)
		}
	}
	sort.Slice(rep.VMs, func(i, j int) bool {
		if rep.VMs[i].Host != rep.VMs[j].Host {
			return rep.VMs[i].Host < rep.VMs[j].Host
		}
		return rep.VMs[i].VM < rep.VMs[j].VM
	})
	sort.Slice(rep.Others, func(i, j int) bool { return rep.Others[i].Host < rep.Others[j].Host })
	return rep
}

// Healthy reports whether the broker can reach NATS.
func (b *Broker) Healthy() error {
	if b.cfg.NC != nil && !b.cfg.NC.IsConnected() {
		return fmt.Errorf("broker NATS connection is %s", b.cfg.NC.Status())
	}
	return nil
}
