package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Sentinel errors of the agent, each wrapping its reply code.
var (
	ErrUnknownVM = fmt.Errorf("%w: no such VM on this host", wire.ErrNotFound)
	ErrNotOwner  = fmt.Errorf("%w: the bid's owner does not own the VM", wire.ErrForbidden)
)

// Config configures an agent.
type Config struct {
	// Host is the host's id. Required.
	Host string
	// Enforcer governs the host's VMs. Required.
	Enforcer Enforcer
	// Capturer charges bids to the bank. Required.
	Capturer Capturer
	// Publisher publishes the host's state each tick; nil publishes nothing.
	Publisher Publisher
	// Metrics, when set, exports price, shares, captures and errors.
	Metrics *obs.Metrics
	// Now is the agent's one clock: bids start, captures are numbered and
	// Run ticks on it; nil means the wall clock.
	Now func() time.Time
	// SigningClock is what signing times and cached identities are checked
	// against; nil means the wall clock (a signature's time is the signer's
	// wall clock, whatever virtual clock the market runs on).
	SigningClock func() time.Time
	// Logger receives the failures no caller sees: Run's failed ticks, the
	// requests Serve refuses and the bank, state-file and enforcer failures
	// SetBids only counts. nil discards them (the daemon passes its own).
	Logger *slog.Logger
	// Capacity is the host's CPUs, to turn CPU time into utilisation; default 1.
	Capacity float64
	// IdleBelow and IdleTicks: a VM that uses less than IdleBelow of its
	// entitlement — min(share × Capacity, the CPUs it may run on) — for
	// IdleTicks ticks in a row is published as idle, so strategies can move
	// money away from it (bottleneck elimination without Hadoop). A VM
	// saturating a small share is busy however little of the host that is,
	// and so is one starved of CPU: with a WaitMeter, the time its vCPUs
	// waited for a host CPU counts as used. An idle VM whose share then
	// shrinks stays idle until it uses more (see wakeShare). Defaults 0.1
	// and 3.
	IdleBelow float64
	IdleTicks int
	// StateFile, when set, keeps the bid book and capture totals across
	// restarts (see state.go).
	StateFile string
	// Identities, when set, makes Serve take bid changes only signed by the
	// broker (or an admin): a bid names the hold it charges, so a bid from
	// anyone else could spend another user's money. bank.Client has it.
	Identities Identities
	// AdminKey is the trust anchor (creds/admin.pub): when set, an identity
	// learnt from Identities counts only with the admin's record of it
	// (service.Certified), so a forged whois answer makes nobody a broker.
	AdminKey string
	// Signer is the agent's own key: when set, Serve signs every reply with
	// it (its record attached once the registry has it), so a broker that
	// knows the anchor believes a bid's answer only from this host's agent.
	Signer *signing.Signer
	// Shared, when set, are caches the agents of one process (the
	// market's simulated hosts) share: nil, each agent's own.
	Shared *Shared
}

// Shared are the caches of what a thousand agents in one process would
// otherwise each learn for themselves at once: the first spend over every
// VM of up's thousand hosts had each agent decode and verify its 200 kB
// mandate and ask the bank who signed it and who signed the bid request
// (two thousand whois, every other request to the bank queued behind
// them). Both hold only what any agent of the market would learn alike:
// mandates read by signature, and identities from the bank's registry
// (each agent's revocation notices forget a key in it for all).
type Shared struct {
	mandates mandate.Cache
	whois    *service.WhoisCache
}

// NewShared makes the caches agents of one process share.
func NewShared() *Shared {
	// The signers of many agents' requests and mandates: more than one's.
	return &Shared{mandates: mandate.Cache{Size: 4 * mandateCacheSize}, whois: service.NewWhoisCache(whoisTTL, 16*whoisSize)}
}

// Identities resolves a signing key to its principal (bank.Client has it).
type Identities = service.Identities

// legKey is what a capture's cumulative total is kept for.
type legKey struct{ hold, vm string }

// wakeShare: an idle VM is busy again once it uses this fraction of its
// entitlement, or IdleBelow of the entitlement it had while it went quiet
// if that is less (see measure).
const wakeShare = 0.5

// starvedWait is the least vCPU wait (CPU-seconds a second) that makes a
// VM busy (see measure): half of one vCPU waiting the whole interval. A
// guest that computes and is denied the CPU waits for about all the time
// it does not run; an idle guest's wakes wait far less (docs/E2E.md has
// both, measured on loaded TCG hosts).
const starvedWait = 0.5

// bidKey is a bid's place in the book: one bid per plan on a VM, so several
// plans funding one VM add up.
type bidKey struct{ vm, plan string }

// bid is a bid in the book.
type bid struct {
	wire.Bid
	start time.Time
	// base is what (hold, vm) had been charged before this bid started.
	base money.Micro
	// excused is the time within the bid's period no agent enforced it
	// (the agent was down): never charged.
	excused time.Duration
}

func (b *bid) end() time.Time { return b.start.Add(b.Duration.D()) }

// charged is the bid's own cumulative charge at now: floor(B·t/D) over the
// time t it was enforced.
func (b *bid) charged(now time.Time) money.Micro {
	if end := b.end(); now.After(end) {
		now = end // the excused time does not move the end
	}
	c, _ := money.Charge(b.Budget, max(now.Sub(b.start)-b.excused, 0), b.Duration.D()) // validated: cannot fail
	return c
}

func (b *bid) key() legKey { return legKey{b.Hold, b.VM} }

func (b *bid) place() bidKey { return bidKey{b.VM, b.Plan} }

// Agent is one host's market agent. Its methods are safe for concurrent use.
//
// mu guards the book and is never held across I/O; the other mutexes order
// I/O (see the package doc, "Locks and I/O").
type Agent struct {
	cfg Config

	// tickMu runs ticks one at a time; SetBids never takes it. lastTick and
	// lastUse, the previous tick's measurement, are the ticks' own.
	tickMu   sync.Mutex
	lastTick time.Time
	lastUse  map[string]time.Duration
	lastIO   map[string]IOUse
	lastWait map[string]time.Duration      // a WaitMeter's
	measured measured                      // measure's maps, reused tick to tick
	caps     map[string]map[string]float64 // a Rebalancer's caps by VM and resource; written and read under mu

	// enforceMu serializes the Enforcer's share I/O; applied is the last
	// set Apply accepted.
	enforceMu sync.Mutex
	applied   map[string]float64

	// saveMu guards the state file's group commit (state.go): saves asked
	// (saveWant), made durable (saveDone, with saveErr), one being written
	// (saving; saved is signalled when it ends).
	saveMu             sync.Mutex
	saved              *sync.Cond
	saveWant, saveDone uint64
	saving             bool
	saveErr            error

	// mu guards the book, everything below.
	mu       sync.Mutex
	vms      map[string]VM
	listed   []VM                    // the list vms was made from, to tell a listing that changed nothing
	ids      []string                // the ids of vms, sorted (vmIDs)
	rated    map[string]float64      // what rates returned last, reused by its next call
	rateKeys []bidKey                // rates' bids in order, reused
	bidsOf   map[string][]wire.VMBid // what vmBids returned last, reused likewise
	bids     map[bidKey]*bid
	total    map[legKey]money.Micro
	captured map[legKey]money.Micro
	round    int64
	ticks    int64
	desired  map[string]float64 // the shares the book calls for; replaced, never changed in place
	util     map[string]float64
	quiet    map[string]int           // consecutive ticks below IdleBelow
	quietE   map[string]float64       // the largest entitlement over those ticks
	short    map[[2]string]*shortfall // (vm, resource) delivered short of its share (delivery.go)
	// downtime is how long nobody ran this agent before it started (from
	// its state file's last write), excused from every bid's charge.
	downtime time.Duration
	state    wire.HostState

	// mandates and signers cache bids' mandates and who signed them
	// (mandate.go); safe for concurrent use, outside mu.
	mandates *mandate.Cache
	signers  *service.WhoisCache
}

// New makes an agent and enforces the initial shares.
func New(cfg Config) (*Agent, error) {
	if err := wire.CheckName("host", cfg.Host); err != nil {
		return nil, err
	}
	if cfg.Enforcer == nil || cfg.Capturer == nil {
		return nil, errors.New("agent: an Enforcer and a Capturer are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Capacity <= 0 {
		cfg.Capacity = 1
	}
	if cfg.IdleBelow <= 0 {
		cfg.IdleBelow = 0.1
	}
	if cfg.IdleTicks <= 0 {
		cfg.IdleTicks = 3
	}
	a := &Agent{cfg: cfg, bids: map[bidKey]*bid{}, total: map[legKey]money.Micro{},
		captured: map[legKey]money.Micro{}, util: map[string]float64{}, quiet: map[string]int{}, quietE: map[string]float64{}, short: map[[2]string]*shortfall{},
		mandates: &mandate.Cache{Size: mandateCacheSize}, signers: newSignerCache()}
	if cfg.Shared != nil {
		a.mandates, a.signers = &cfg.Shared.mandates, cfg.Shared.whois
	}
	a.saved = sync.NewCond(&a.saveMu)
	ctx := context.Background()
	if err := a.load(); err != nil {
		return nil, err
	}
	list, err := a.listVMs(ctx)
	if err != nil {
		return nil, err
	}
	now := cfg.Now()
	a.mu.Lock()
	a.setVMs(list, now)
	a.desired = Shares(a.vmIDs(), a.rates(now))
	a.mu.Unlock()
	a.lastTick = now
	a.lastUse, _ = cfg.Enforcer.Usage(ctx)
	if m, ok := cfg.Enforcer.(IOMeter); ok {
		a.lastIO, _ = m.IOUsage(ctx)
	}
	if m, ok := cfg.Enforcer.(WaitMeter); ok {
		a.lastWait, _ = m.CPUWait(ctx)
	}
	if err := a.enforce(ctx, false, nil); err != nil {
		a.cfg.Metrics.Error("agent", "apply")
		a.cfg.Logger.Warn("agent: applying the initial shares failed; the first tick retries", "host", cfg.Host, "err", err)
	}
	a.mu.Lock()
	a.snapshot(now)
	bids, down := len(a.bids), a.downtime
	a.mu.Unlock()
	level := slog.LevelDebug
	if bids > 0 || down > 0 {
		level = slog.LevelInfo // a restart: say what it took back
	}
	cfg.Logger.Log(ctx, level, "agent: started", "host", cfg.Host, "vms", len(list), "bids_loaded", bids, "downtime_excused", down.Round(time.Millisecond))
	return a, nil
}

// Host is the agent's host id.
func (a *Agent) Host() string { return a.cfg.Host }

// Now is the agent's clock.
func (a *Agent) Now() time.Time { return a.cfg.Now() }

// listVMs asks the Enforcer for the host's VMs (I/O: without mu).
func (a *Agent) listVMs(ctx context.Context) ([]VM, error) {
	list, err := a.cfg.Enforcer.VMs(ctx)
	if err != nil {
		return nil, fmt.Errorf("agent %s: listing VMs: %w", a.cfg.Host, err)
	}
	return list, nil
}

// setVMs takes in the VM list under mu; bids on VMs that are gone are
// settled and dropped. A list the same as the last (what every tick of a
// host whose VMs did not change lists) leaves the VMs as they are.
func (a *Agent) setVMs(list []VM, now time.Time) {
	if a.vms != nil && slices.Equal(list, a.listed) {
		// Taken in before (a.vms is nil until the first list), and
		// the bids on VMs not in it dropped then: none to drop now.
		return
	}
	vms := make(map[string]VM, len(list))
	for _, vm := range list {
		vms[vm.ID] = vm
	}
	a.vms, a.listed = vms, slices.Clone(list)
	a.ids = slices.Sorted(maps.Keys(vms))
	for k, b := range a.bids {
		if _, ok := vms[k.vm]; !ok {
			a.settle(b, now)
			delete(a.bids, k)
		}
	}
}

// settle charges b up to now into its key's total, to be captured.
func (a *Agent) settle(b *bid, now time.Time) {
	k := b.key()
	a.total[k] = max(a.total[k], b.base+b.charged(now))
}

// SetBids applies a bid change: all of it or, if any part is invalid, none.
// Replaced and cancelled bids are settled and captured at once; the new
// shares are enforced before it returns. It is a batch of one (SetBatch).
func (a *Agent) SetBids(ctx context.Context, req *wire.BidRequest) (wire.HostState, error) {
	st, errs := a.SetBatch(ctx, []*wire.BidRequest{req})
	if errs[0] != nil {
		return wire.HostState{}, errs[0]
	}
	return st, nil
}

// Bids applies a batch of bid changes, each as SetBids would apply it
// alone — all of a change or, if any part of it is invalid, none of it —
// and answers each. What the taken changes settled goes to the bank in
// one capture, and the state file and the shares are written once.
func (a *Agent) Bids(ctx context.Context, b *wire.BidBatch) (wire.BidResults, error) {
	reqs := make([]*wire.BidRequest, len(b.Changes))
	for i := range b.Changes {
		reqs[i] = &b.Changes[i]
	}
	_, errs := a.SetBatch(ctx, reqs)
	res := wire.BidResults{Errors: make([]*wire.Error, len(errs))}
	for i, err := range errs {
		if err != nil {
			res.Errors[i] = wire.ToError(err)
			a.refused(reqs[i], res.Errors[i])
		}
	}
	return res, nil
}

// refused counts and logs a change of a batch the agent refused, as the
// service logs a request it refuses (the batch itself is answered ok): a
// refusal the change earned (forbidden, not found, …) is information, one
// the agent could not help (internal, unavailable) a warning.
func (a *Agent) refused(req *wire.BidRequest, e *wire.Error) {
	a.cfg.Metrics.Error("agent", "bid_refused")
	plan, owner := req.Plan, ""
	if len(req.Set) > 0 {
		plan, owner = req.Set[0].Plan, req.Set[0].Owner
	}
	level := slog.LevelInfo
	if e.Code == wire.CodeInternal || e.Code == wire.CodeUnavailable {
		level = slog.LevelWarn
	}
	a.cfg.Logger.Log(context.Background(), level, "agent: bid change refused", "host", a.cfg.Host, "plan", plan, "owner", owner,
		"code", e.Code, "err", e.Message)
}

// SetBatch applies each of reqs that is valid on its own and gives each
// one's error: Bids without the wire (the simulator's transport calls it).
// The book changes under mu; the capture, the state file and
// the Enforcer are written without it, so a tick waiting on a slow bank
// does not hold a bid change up.
func (a *Agent) SetBatch(ctx context.Context, reqs []*wire.BidRequest) (wire.HostState, []error) {
	errs := make([]error, len(reqs))
	for i, req := range reqs {
		errs[i] = req.Validate()
	}
	taken := func() bool { return slices.ContainsFunc(errs, func(err error) bool { return err == nil }) }
	if !taken() {
		return wire.HostState{}, errs
	}
	l := startLaps()
	defer l.logIfSlow(a.cfg.Logger, "agent: slow bid change", func() []any { return []any{"host", a.cfg.Host, "changes", len(reqs), "plan", reqs[0].Plan} })
	check := func(f func(*wire.BidRequest) error) {
		for i, req := range reqs {
			if errs[i] == nil {
				errs[i] = f(req)
			}
		}
	}
	if a.cfg.Identities != nil {
		// The book first (an unknown VM is not found whatever its
		// mandate), then the mandates without mu (whois is I/O), then the
		// book again under mu as the change applies.
		a.mu.Lock()
		check(a.checkBids)
		a.mu.Unlock()
		check(func(req *wire.BidRequest) error { return a.checkMandates(ctx, req) })
		l.lap("mandates")
	}
	a.mu.Lock()
	check(a.checkBids)
	if !taken() {
		a.mu.Unlock()
		return wire.HostState{}, errs
	}
	now := a.cfg.Now()
	// Only what this change settled: the rest is the tick's to capture, and
	// a bid that settles nothing (a plan's first) does not wait on the bank.
	settled := map[legKey]bool{}
	for i, req := range reqs {
		if errs[i] == nil {
			maps.Copy(settled, a.changeBids(req, now))
		}
	}
	batch := a.captureBatch(now, settled)
	a.mu.Unlock()
	l.lap("book")
	// Settled charges go to the bank now, so a plan's hold can be released
	// right after; if the bank is away, later rounds retry them. The bank
	// gets one daemon attempt here, not the request's whole deadline: the
	// broker waits that long for a bid's answer before it sends the bids
	// again (rpc.Retried), and a bid change that outwaits it only queues
	// its own retries behind it.
	cctx, cancel := context.WithTimeout(ctx, rpc.DaemonAttempt)
	err := a.capture(cctx, batch)
	cancel()
	if err != nil {
		a.failed("capture", err)
	}
	l.lap("capture")
	a.mu.Lock()
	a.desired = Shares(a.vmIDs(), a.rates(now))
	st := a.snapshot(now)
	a.mu.Unlock()
	if err := a.save(); err != nil {
		// Without the file a restart forgets this change: it can only
		// under-charge, never charge twice, but it must be seen.
		a.failed("save_state", err)
	}
	l.lap("save")
	if err := a.enforce(ctx, false, l); err != nil {
		a.failed("apply", err) // the next tick's reconcile retries
	}
	return st, errs
}

// failed counts and logs a failure SetBids does not return: the change is
// in the book, and the next tick retries what failed.
func (a *Agent) failed(kind string, err error) {
	a.cfg.Metrics.Error("agent", kind)
	a.cfg.Logger.Warn("agent: bid change: "+kind+" failed; the next tick retries", "host", a.cfg.Host, "err", err)
}

// checkBids checks, under mu, that every VM req names is here and owned by
// the bid's owner.
func (a *Agent) checkBids(req *wire.BidRequest) error {
	for _, b := range req.Set {
		vm, ok := a.vms[b.VM]
		if !ok {
			return fmt.Errorf("%w: %q on %s", ErrUnknownVM, b.VM, a.cfg.Host)
		}
		if vm.Owner != b.Owner {
			return fmt.Errorf("%w: %q is not %s's", ErrNotOwner, b.VM, b.Owner)
		}
	}
	for _, id := range req.Cancel {
		if _, ok := a.vms[id]; !ok {
			return fmt.Errorf("%w: %q on %s", ErrUnknownVM, id, a.cfg.Host)
		}
	}
	return nil
}

// changeBids applies a checked req to the book under mu, settling the bids
// it cancels or replaces at now; it gives the (hold, vm) they were charged
// to.
func (a *Agent) changeBids(req *wire.BidRequest, now time.Time) map[legKey]bool {
	settled := map[legKey]bool{}
	for _, id := range req.Cancel {
		k := bidKey{id, req.Plan}
		if b := a.bids[k]; b != nil {
			a.settle(b, now)
			settled[b.key()] = true
			delete(a.bids, k)
		}
	}
	for _, nb := range req.Set {
		b := &bid{Bid: nb, start: now}
		if old := a.bids[b.place()]; old != nil {
			a.settle(old, now)
			settled[old.key()] = true
		}
		b.base = a.total[b.key()]
		a.bids[b.place()] = b
	}
	return settled
}

// captureDrain bounds how long a stopped agent waits for the bank's
// answer to the capture it had sent (see Tick): as long as a request is
// given without a deadline of its own (rpc.DefaultTimeout).
const captureDrain = 5 * time.Second

// Tick runs one round at now, in phases (raft's Ready): list the VMs; under
// mu take them in, charge every bid and build one capture batch; send it;
// under mu take the bank's answer in, drop finished bids and derive the
// shares; then write the state file, reconcile the enforced shares, measure
// utilisation and publish the host's state. Errors of any phase are
// counted and returned after the round completed; the next round retries.
func (a *Agent) Tick(ctx context.Context, now time.Time) (wire.HostState, error) {
	l := startLaps()
	a.tickMu.Lock()
	defer a.tickMu.Unlock()
	l.lap("wait")
	defer l.logIfSlow(a.cfg.Logger, "agent: slow tick", func() []any { return []any{"host", a.cfg.Host} })
	var errs []error
	fail := func(kind string, err error) {
		a.cfg.Metrics.Error("agent", kind)
		errs = append(errs, err)
	}
	list, vmErr := a.listVMs(ctx)
	if vmErr != nil {
		fail("vms", vmErr)
	}
	l.lap("list")
	a.mu.Lock()
	a.ticks++
	if vmErr == nil {
		a.setVMs(list, now)
	}
	for _, b := range a.bids {
		a.settle(b, now)
	}
	batch := a.captureBatch(now, nil)
	a.mu.Unlock()
	// A stop does not cut a capture short: the bank may apply a batch
	// whose answer the agent would then not take in, and the book it saves
	// would lag the bank's until its next start (cumulative legs keep the
	// money exact; an operator comparing the two would not see why). A
	// capture begun finishes, for at most captureDrain; one not begun when
	// the stop comes is left to the next start.
	if ctx.Err() == nil && batch != nil { // (nothing owed: no context, no timer)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), captureDrain)
		err := a.capture(cctx, batch)
		cancel()
		if err != nil {
			fail("capture", err)
		}
	}
	l.lap("capture")
	a.mu.Lock()
	a.dropFinished(now)
	a.desired = Shares(a.vmIDs(), a.rates(now))
	a.mu.Unlock()
	if err := a.save(); err != nil {
		fail("save_state", err)
	}
	l.lap("save")
	if err := a.enforce(ctx, true, l); err != nil {
		fail("apply", err)
	}
	if err := a.measure(ctx, now, l); err != nil {
		fail("usage", err)
	}
	if err := a.rebalance(ctx); err != nil {
		fail("throttle", err)
	}
	l.lap("throttle")
	if m := a.cfg.Metrics; m != nil {
		m.Ticks.WithLabelValues(a.cfg.Host).Inc()
	}
	a.mu.Lock()
	st := a.snapshot(now)
	a.mu.Unlock()
	if a.cfg.Publisher != nil {
		if err := a.cfg.Publisher.Publish(ctx, st); err != nil {
			fail("publish", fmt.Errorf("agent %s: publishing state: %w", a.cfg.Host, err))
		}
		l.lap("publish")
	}
	return st, errors.Join(errs...)
}

// dropFinished drops, under mu, the bids that ran their course and are
// paid for.
func (a *Agent) dropFinished(now time.Time) {
	for k, b := range a.bids {
		if !now.Before(b.end()) && a.captured[b.key()] >= a.total[b.key()] {
			delete(a.bids, k)
		}
	}
}

// captureBatch builds, under mu, one batch with a leg for every (hold, vm)
// charged beyond what the bank confirmed — of only, when only is not nil
// — under a new round number; nil when nothing is owed. Legs carry
// cumulative totals, so batches that overlap in flight are safe: the bank
// moves only what a total adds.
func (a *Agent) captureBatch(now time.Time, only map[legKey]bool) *wire.CaptureBatch {
	var keys []legKey
	for k, t := range a.total {
		if t > a.captured[k] && (only == nil || only[k]) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].hold != keys[j].hold {
			return keys[i].hold < keys[j].hold
		}
		return keys[i].vm < keys[j].vm
	})
	a.round = max(a.round+1, now.UnixMilli()) // under mu: every batch its own round
	batch := &wire.CaptureBatch{Host: a.cfg.Host, Tick: a.round, Legs: make([]wire.CaptureLeg, len(keys))}
	for i, k := range keys {
		batch.Legs[i] = wire.CaptureLeg{
			ID:   fmt.Sprintf("%s/%s/%s/%d", k.hold, a.cfg.Host, k.vm, a.round),
			Hold: k.hold, VM: k.vm, Cumulative: a.total[k],
		}
		if a.cfg.Identities != nil {
			// The bank captures only from a hold of the VM's owner.
			batch.Legs[i].Owner = a.vms[k.vm].Owner
		}
	}
	return batch
}

// capture sends batch (nil: nothing to send) to the bank without mu and
// takes the answer in under it.
func (a *Agent) capture(ctx context.Context, batch *wire.CaptureBatch) error {
	if batch == nil {
		return nil
	}
	rep, err := a.cfg.Capturer.Capture(ctx, batch)
	if err != nil {
		return fmt.Errorf("agent %s: capture: %w", a.cfg.Host, err)
	}
	if len(rep.Legs) != len(batch.Legs) {
		return fmt.Errorf("agent %s: capture reply has %d legs for %d sent", a.cfg.Host, len(rep.Legs), len(batch.Legs))
	}
	a.mu.Lock()
	a.takeCaptured(batch, rep)
	a.mu.Unlock()
	if m := a.cfg.Metrics; m != nil {
		m.Captures.WithLabelValues(a.cfg.Host).Inc()
		m.CapturedCredits.WithLabelValues(a.cfg.Host).Add(rep.Applied.Credits())
	}
	return nil
}

// takeCaptured applies the bank's answer to batch under mu: the captured
// totals rise, and a hold the bank reports exhausted or refuses drops its
// bids (they get the floor) and its totals.
func (a *Agent) takeCaptured(batch *wire.CaptureBatch, rep wire.CaptureReply) {
	dead := map[string]bool{}
	for i, res := range rep.Legs {
		k := legKey{batch.Legs[i].Hold, batch.Legs[i].VM}
		if res.Error != nil {
			// Unknown, closed or expired hold, or a leg id clash: nothing
			// more can be charged to this hold from here.
			a.cfg.Metrics.Error("agent", "capture_"+res.Error.Code)
			dead[k.hold] = true
			continue
		}
		// A batch overlapping one that found the hold dead finds its total
		// gone: nothing is owed there any more.
		if _, ok := a.total[k]; ok {
			a.captured[k] = max(a.captured[k], res.Captured)
		}
		if res.Exhausted {
			dead[k.hold] = true
		}
	}
	if len(dead) == 0 {
		return
	}
	for k, b := range a.bids {
		if dead[b.Hold] {
			delete(a.bids, k)
		}
	}
	for k := range a.total {
		if dead[k.hold] {
			delete(a.total, k)
			delete(a.captured, k)
		}
	}
}

// rates are each VM's funded rate at now, micro-credits per second: the sum
// of its plans' bids; under mu. The map is the agent's, reused by the next
// call (a tick makes two): read it, do not keep it.
func (a *Agent) rates(now time.Time) map[string]float64 {
	if a.rated == nil {
		a.rated = make(map[string]float64, len(a.bids))
	}
	r := a.rated
	clear(r)
	// A VM's bids are added in the order of their plans, not the map's
	// (see sumInOrder).
	keys := a.rateKeys[:0]
	for k, b := range a.bids {
		if now.Before(b.end()) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(x, y bidKey) int { return cmp.Or(strings.Compare(x.vm, y.vm), strings.Compare(x.plan, y.plan)) })
	for _, k := range keys {
		b := a.bids[k]
		r[k.vm] += money.Rate(b.Budget, b.Duration.D())
	}
	a.rateKeys = keys
	return r
}

// vmBids are each VM's bids, sorted by plan, as the host's state shows them;
// under mu. The map is the agent's, reused by the next call (each tick
// makes one); the slices are new.
func (a *Agent) vmBids(now time.Time) map[string][]wire.VMBid {
	if a.bidsOf == nil {
		a.bidsOf = map[string][]wire.VMBid{}
	}
	out := a.bidsOf
	clear(out)
	for k, b := range a.bids {
		var rate float64
		if now.Before(b.end()) {
			rate = money.Rate(b.Budget, b.Duration.D())
		}
		out[k.vm] = append(out[k.vm], wire.VMBid{Plan: b.Plan, Hold: b.Hold, Rate: rate, Budget: b.Budget, Charged: b.base + b.charged(now), Ends: b.end()})
	}
	for _, bs := range out {
		// A VM has one bid per plan: the order is total.
		slices.SortFunc(bs, func(x, y wire.VMBid) int { return strings.Compare(x.Plan, y.Plan) })
	}
	return out
}

// vmIDs are the VMs' ids, sorted; under mu. The slice is the agent's
// (setVMs makes a new one when the VMs change): do not change it.
func (a *Agent) vmIDs() []string { return a.ids }

// measure turns the CPU time used since the last tick into utilisation,
// and the I/O done (an IOMeter's) into each VM's busiest use of its
// shares; the Enforcer is read without mu.
func (a *Agent) measure(ctx context.Context, now time.Time, l *laps) error {
	use, err := a.cfg.Enforcer.Usage(ctx)
	if err != nil {
		return fmt.Errorf("agent %s: reading CPU usage: %w", a.cfg.Host, err)
	}
	l.lap("usage")
	var io map[string]IOUse
	var capacity IOUse
	if m, ok := a.cfg.Enforcer.(IOMeter); ok {
		if io, err = m.IOUsage(ctx); err != nil {
			return fmt.Errorf("agent %s: reading I/O usage: %w", a.cfg.Host, err)
		}
		capacity = m.IOCapacity()
		l.lap("io")
	}
	var wait map[string]time.Duration
	var waitErr error // reported once the rest is measured: the use alone judges idleness meanwhile
	if m, ok := a.cfg.Enforcer.(WaitMeter); ok {
		if wait, waitErr = m.CPUWait(ctx); waitErr != nil {
			wait, waitErr = nil, fmt.Errorf("agent %s: reading CPU wait: %w", a.cfg.Host, waitErr)
		}
		l.lap("cpu_wait")
	}
	governed := governedIO(a.cfg.Enforcer)
	a.mu.Lock()
	defer a.mu.Unlock()
	if dt := now.Sub(a.lastTick).Seconds(); dt > 0 {
		// What each VM took of each resource, for checkDelivery.
		a.measured.clear()
		cpus, entitled, waits, moved := a.measured.cpus, a.measured.entitled, a.measured.waits, a.measured.moved
		total := sumInOrder(use, func(vm string, u time.Duration) float64 {
			return (u - a.lastUse[vm]).Seconds() / dt / a.cfg.Capacity
		})
		for vm, u := range use {
			used := (u - a.lastUse[vm]).Seconds() / dt // CPUs
			a.util[vm] = used / a.cfg.Capacity
			if total > 1 {
				// A host gives at most all of itself: more is the
				// measurement's timing (CPU time read later than the
				// tick's time, or counted with the VM's own threads),
				// taken back in proportion.
				a.util[vm] /= total
			}
			e, q := a.entitlement(vm), a.desired[vm]
			cpus[vm], entitled[vm], waits[vm] = a.util[vm]*a.cfg.Capacity, e, -1
			if q <= FloorShare {
				// A VM on the floor (no funded bid) has no share to
				// fill — an idle guest's timers use a hundred times the
				// floor — so it is judged against all it may use: its
				// CPUs, the whole disk and link. Unfunded, a guest that
				// computes, waits for a CPU or moves data is busy, and
				// one that sleeps is idle. Taken for busy whatever it
				// did, a later stage's unfunded guests looked busy, and
				// stage priority left a stage whose job had not yet
				// begun for them.
				e, q = a.cpusOf(vm), 1
			}
			ran, waited := used, 0.0 // for the log of an idle VM waking
			// (A VM whose I/O was not read last tick — its QEMU did not
			// answer — has no rate this tick: its counters would count
			// all it ever moved as one tick's, and an idle VM would wake.)
			lastIO, read := a.lastIO[vm]
			if x, ok := io[vm]; ok && read {
				disk, net := (x.Disk-lastIO.Disk)/dt, (x.Net-lastIO.Net)/dt // MB/s
				moved[wire.ResourceDisk][vm], moved[wire.ResourceNet][vm] = disk, net
				// Its disk or network share used as much as its CPU
				// share counts as CPU used: the VM is as busy as its
				// busiest resource. (q and e are positive: a VM on the
				// floor is judged as above.)
				for _, r := range [...]struct{ rate, cap float64 }{{disk, capacity.Disk}, {net, capacity.Net}} {
					if r.cap > 0 {
						used = max(used, r.rate/(q*r.cap)*e)
					}
				}
			}
			w, ok := wait[vm]
			last, known := a.lastWait[vm]
			waitKnown := ok && known
			if waitKnown {
				// Starved is not idle: what its vCPUs waited for a host CPU
				// (runnable, not running) it wanted as much as what they ran.
				// Only a wait of starvedWait or more says so: an idle guest's
				// vCPUs wake for its timers, and on a busy host each wake
				// waits its turn.
				if waited = max(w-last, 0).Seconds() / dt; waited >= starvedWait {
					used += waited
				}
				waits[vm] = waited
			}
			bar := a.cfg.IdleBelow * e
			if a.quiet[vm] >= a.cfg.IdleTicks {
				// Idle already: money moved away from it shrinks its
				// share, not its use, so the same small use is a larger
				// part of the smaller share. It stays idle until it uses
				// IdleBelow of the largest entitlement it had while
				// quiet. Where its vCPUs' wait is unknown, half of its
				// entitlement now is enough if that is less (filling a
				// small share is busy at once). Where it is known, a VM
				// that computes again on its small share is starved and
				// its wait counts as use, and half a share shrunk to a
				// twentieth is what an idle TCG guest's timers use
				// (0.03-0.04 CPU): its money would come and go.
				wake := a.cfg.IdleBelow * a.quietE[vm]
				if !waitKnown {
					wake = min(wake, wakeShare*e)
				}
				bar = max(bar, wake)
			}
			if used < bar {
				a.quiet[vm]++
				a.quietE[vm] = max(a.quietE[vm], e)
				if a.quiet[vm] == a.cfg.IdleTicks {
					a.cfg.Logger.Debug("agent: VM idle", "host", a.cfg.Host, "vm", vm, "cpus", ran, "used", used, "bar", bar)
				}
			} else {
				if a.quiet[vm] >= a.cfg.IdleTicks {
					// What woke it, for an operator asking why its money
					// came back: its CPUs, its I/O (as CPUs, used counts
					// the busiest), or a starved vCPU's wait.
					a.cfg.Logger.Debug("agent: VM busy again", "host", a.cfg.Host, "vm", vm, "cpus", ran, "waited", waited,
						"used", used, "bar", bar)
				}
				a.quiet[vm] = 0
				delete(a.quietE, vm)
			}
		}
		a.checkDelivery(now, wire.ResourceCPU, cpuTook(a.measured.took, a.cfg.Capacity, cpus, entitled, waits))
		for _, r := range [...]string{wire.ResourceDisk, wire.ResourceNet} {
			var tick map[string]took // none: not measured, or not governed (no share promised)
			if io != nil && slices.Contains(governed, r) {
				c := capacity.Disk
				if r == wire.ResourceNet {
					c = capacity.Net
				}
				tick = ioTook(a.desired, moved[r], a.capsOf(r), c)
			}
			a.checkDelivery(now, r, tick)
		}
	}
	a.lastTick, a.lastUse, a.lastIO, a.lastWait = now, use, io, wait
	return waitErr
}

// measured are the maps measure fills each tick: cleared and filled again
// rather than made anew, as a simulator's million ticks would; the ticks'
// own (under tickMu), like lastUse. Nothing keeps them past the tick.
type measured struct {
	cpus, entitled, waits map[string]float64            // by VM, for cpuTook
	moved                 map[string]map[string]float64 // MB/s by resource and VM
	took                  map[string]took               // cpuTook's
}

// clear empties the maps, making them the first time.
func (m *measured) clear() {
	if m.moved == nil {
		*m = measured{cpus: map[string]float64{}, entitled: map[string]float64{}, waits: map[string]float64{},
			moved: map[string]map[string]float64{wire.ResourceDisk: {}, wire.ResourceNet: {}}, took: map[string]took{}}
	}
	clear(m.cpus)
	clear(m.entitled)
	clear(m.waits)
	for _, vms := range m.moved {
		clear(vms)
	}
	clear(m.took)
}

// rebalance re-spreads a throttling Enforcer's caps by the shares in force
// and what each VM moved since the last tick (see Rebalancer).
func (a *Agent) rebalance(ctx context.Context) error {
	r, ok := a.cfg.Enforcer.(Rebalancer)
	if !ok {
		return nil
	}
	a.mu.Lock()
	shares := a.desired
	a.mu.Unlock()
	caps, err := r.Rebalance(ctx, shares)
	a.mu.Lock()
	a.caps = caps
	a.mu.Unlock()
	if err != nil {
		return fmt.Errorf("agent %s: throttling: %w", a.cfg.Host, err)
	}
	return nil
}

// entitlement is how many CPUs vm may use: its share of the host, at most
// the CPUs it can run on; under mu.
func (a *Agent) entitlement(vm string) float64 {
	return min(a.desired[vm]*a.cfg.Capacity, a.cpusOf(vm))
}

// cpusOf is how many of the host's CPUs vm may run on: its vCPUs, at most
// the host's.
func (a *Agent) cpusOf(vm string) float64 {
	cpus := a.vms[vm].CPUs
	if cpus <= 0 || cpus > a.cfg.Capacity {
		cpus = a.cfg.Capacity
	}
	return cpus
}

// bytesPerMB converts the caps' MB/s (MiB, as the throttles plan them) to
// the metrics' bytes per second.
const bytesPerMB = 1 << 20

// snapshot builds the host's state at now from the book and records it;
// under mu.
func (a *Agent) snapshot(now time.Time) wire.HostState {
	rates, bids := a.rates(now), a.vmBids(now)
	st := wire.HostState{Versioned: wire.Versioned{V: wire.Version}, Host: a.cfg.Host, Time: now, Tick: a.ticks,
		VMs: make([]wire.VMState, 0, len(a.vms))}
	m := a.cfg.Metrics
	for _, id := range a.vmIDs() {
		vs := wire.VMState{VM: id, Owner: a.vms[id].Owner, Rate: rates[id], Share: a.desired[id], Util: a.util[id],
			Idle: a.quiet[id] >= a.cfg.IdleTicks}
		vs.Bids = bids[id]
		if c := a.caps[id]; len(c) > 0 {
			vs.Caps = maps.Clone(c)
		}
		vs.Short = a.shortfalls(id)
		st.Price += vs.Rate
		st.VMs = append(st.VMs, vs)
		if m != nil {
			m.VMShare.WithLabelValues(a.cfg.Host, id).Set(vs.Share)
			m.VMRate.WithLabelValues(a.cfg.Host, id).Set(vs.Rate / float64(money.PerCredit))
			for r, c := range vs.Caps {
				m.VMCap.WithLabelValues(a.cfg.Host, id, r).Set(c * bytesPerMB)
			}
			for _, r := range [...]string{wire.ResourceCPU, wire.ResourceDisk, wire.ResourceNet} {
				// A series only while the VM is short: a host of many VMs
				// that get their shares exports none.
				if v := a.shortBy(id, r); v > 0 {
					m.VMShortfall.WithLabelValues(a.cfg.Host, id, r).Set(v)
				} else {
					m.VMShortfall.DeleteLabelValues(a.cfg.Host, id, r)
				}
			}
		}
	}
	if r, ok := a.cfg.Enforcer.(ModeReporter); ok {
		st.Resources = r.Modes()
		if m != nil {
			for _, rm := range st.Resources {
				for _, mode := range [...]string{wire.ModeWeights, wire.ModeThrottle, wire.ModeNone} {
					v := 0.0
					if mode == rm.Mode {
						v = 1
					}
					m.ResourceMode.WithLabelValues(a.cfg.Host, rm.Resource, mode).Set(v)
				}
			}
		}
	}
	if m != nil {
		m.HostPrice.WithLabelValues(a.cfg.Host).Set(st.Price / float64(money.PerCredit))
	}
	a.state = st
	return copyState(st)
}

// State is the host's state as of the last tick or bid change.
func (a *Agent) State() wire.HostState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return copyState(a.state)
}

func copyState(st wire.HostState) wire.HostState {
	st.VMs = append([]wire.VMState(nil), st.VMs...)
	st.Resources = append([]wire.ResourceMode(nil), st.Resources...)
	return st
}
