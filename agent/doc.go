// Package agent is the per-host part of the market: the host's bid book, the
// share rule, the charging loop and enforcement through an Enforcer.
//
// # Share rule
//
// The book keeps one bid per (VM, plan): several plans may fund one VM,
// and their rates add up. Each VM i with a funded bid gets
// q_i = r_i / Σ_j r_j of the host (Eq. 1 of Sandholm and Lai, "MapReduce
// Optimization Using Regulated Dynamic Prioritization"), r_i being the sum of
// its bids' rates budget/duration. A VM without a funded bid
// keeps only a floor (FloorShare each, at most 10% of the host for all of
// them together) so it can still boot and answer, and a host with no funded
// bid at all is divided equally. Shares always sum to 1.
//
// # Charging
//
// A bid starts when the agent accepts it. Each tick the agent computes every
// bid's cumulative charge floor(B·t/D) (money.Charge), t being the time an
// agent enforced it (downtime is excused, see state.go), and sends one batched
// capture for all of them: one leg per (hold, vm) naming the cumulative total,
// with the idempotency id "hold/host/vm/round". The bank moves only the
// difference from what it already captured, so a lost reply, a retry or a
// replayed batch never charges twice, and a bid that runs its full duration
// is charged exactly B however irregular the ticks. A bid replaced or
// cancelled mid-way is settled at that moment: its charge up to then is
// captured at once (and retried by later rounds if the bank is away). A bid
// on the same hold and VM continues that hold's cumulative total. When the
// bank reports a hold exhausted, closed, expired or unknown, the agent drops
// the bids it funds: they get the floor.
//
// Capture rounds are numbered by max(previous+1, Unix milliseconds of the
// tick), under the state lock, so every batch has its own round and leg ids
// stay unique across agent restarts.
//
// # Enforcement
//
// Any change of any bid re-computes and applies all shares of the host at
// once (event-driven). Every tick a reconcile pass compares what the
// Enforcer reports as applied with what should be, and re-applies on any
// drift (level-triggered), so a share changed behind the agent's back is
// repaired within a tick. A VM deleted between the listing the shares came
// from and their apply, which the Enforcer reports gone (GoneError, having
// applied the others), is dropped as the next listing would drop it — its
// bids settled, logged once — and the others' shares, recomputed without
// it, applied in the same pass: one vanished VM does not fail the tick or
// leave the rest waiting for the next. SimEnforcer is a simulated host for the demo, the
// simulator and tests; the libvirt enforcer implements the same interface.
//
// Each tick the agent publishes the host's state — price = Σ funded rates,
// every VM's rate and bids, share, CPU utilisation and whether it is idle —
// for the broker, on mrm.v1.host.<id>.state and in the MRM_HOSTS bucket,
// sealed for its host by the agent's key when NATSPublisher has a Signer
// (signing.SealHostState), so a broker that knows identities can tell it from
// a forgery.
//
// # Idle
//
// A VM is idle after using less than IdleBelow of its entitlement — min(share
// × host CPUs, the CPUs it may run on) — for IdleTicks ticks: a guest
// saturating a small share is busy, a sleeping guest idle, whatever the rest
// of the host does. Once idle it stays idle until it uses IdleBelow of the
// largest entitlement it had while quiet, or half of its entitlement now if
// that is less: moving money away from an idle VM shrinks its share, not its
// use, so the smaller share alone must not make it busy again (bottleneck
// elimination would oscillate), while a VM that wakes and fills its smaller
// share is busy at once. A VM on the floor share (no funded bid, see
// FloorShare) is judged against all it may use — its CPUs, the whole disk
// and link — since an idle guest's timers alone use many times the floor:
// an unfunded guest is busy when it computes, waits for a CPU or moves
// data, and idle when it sleeps, so a later stage's guests, unfunded until
// their stage, are not taken for a stage already under way.
//
// Use is not only CPU: when the Enforcer is also an IOMeter (the libvirt
// enforcer and the simulator's hosts are), a VM that moves as large a part
// of its share of the disk's or the network's bandwidth counts as using as
// much of its CPU entitlement, so a VM waiting on I/O is busy — bottleneck
// elimination and stage priority do not move money away from it.
//
// Nor is a VM starved of CPU idle. Shares are weights among the VMs; on a
// host whose CPUs processes outside the market also want, the VMs together
// get less than the host, and a VM that wants all of its entitlement may
// get a small part of it. Judged by its use it would look idle, and
// bottleneck elimination would move money away from the very VM that most
// needs it. So the rule counts what a VM wanted, not only what it got: when
// the Enforcer is a WaitMeter, the time its vCPUs were runnable but waiting
// for a host CPU counts as used. A starved VM's vCPUs wait; an idle VM's
// halt — they neither run nor wait — so it stays idle on a loaded host as
// on a quiet one. The libvirt enforcer reads the vCPUs' scheduling delay
// (the steal time the guest sees) from the host's accounts of the QEMU
// process, never by asking the QEMU itself: a VM the market starves cannot
// answer, and a reading that waits on it would stall the agent's ticks and
// the very bid that would let it answer. The simulator reads the demand it
// did not give; a VM the Enforcer
// cannot say, or every VM in a tick whose read failed, is judged by its
// use alone.
//
// # Resources that do not weigh their users
//
// CPU shares are weights the kernel honours. A disk under mq-deadline or a
// tap device divides itself as it likes, so there the share is delivered
// by a Throttle: per-VM caps of the device's measured bandwidth, re-planned
// every tick from what each VM moved. An Enforcer that throttles is a
// Rebalancer (the agent hands it the shares after measuring, each tick),
// and one that says how it delivers each resource is a ModeReporter: the
// host state carries the modes (wire.ResourceMode) and each VM's caps, so
// no one is shown a share that nothing delivers.
//
// Package agent/virt is the libvirt Enforcer for real hosts (mrmarket agent).
//
// # Delivered shares
//
// The agent checks, every tick, that it delivers what it sets. A VM that
// wanted more of a resource than it got — for the CPU, its vCPUs waited
// half a CPU or more for a host CPU; for the disk or the network (in and
// out together, as the meter counts them), it filled its cap or, on a
// device about full, moved an equal turn of what the VMs using it moved
// (with room to spare, VMs that move alike are held by their CPUs) — and
// got a part of it
// short of its entitlement by more than 0.05 is short. Its entitlement is,
// for the CPU, its entitlement above as a part of the host; for a device,
// its share's part of the shares of the VMs that moved data on it, against
// its part of what they moved (a VM alone on a device is never short). The
// shortfall is the metric mrm_vm_share_shortfall from its first tick; once
// it has lasted 5 s it is logged once, and again when it ends, and the
// host state carries it (wire.VMState.Short), so `mrmarket vms` shows the
// user what they pay for and do not get. Resources not governed (mode
// none) are not checked: no share is promised there.
//
// # Locks and I/O
//
// The state lock (Agent.mu) covers the book only: VMs, bids, capture totals,
// desired shares, utilisation, the last host state. No I/O happens under it,
// so a slow bank (a capture may take seconds), libvirt or disk never holds
// up a bid change or a state request. A tick runs in phases, as raft's
// Ready does: list the VMs (I/O); under the lock take them in, charge every
// bid and build the capture batch; send the batch (I/O); under the lock
// take the bank's answer in (captured totals; exhausted or refused holds
// drop their bids), drop finished bids and derive the desired shares; then
// write the state file, reconcile the shares, read the CPU usage (and take
// it in under the lock) and publish (I/O). A bid change (Bids: a batch of
// plans' changes, each taken or refused on its own; SetBids, a batch of
// one) changes the book under the lock and captures what it settled, saves
// and enforces without it, once for the whole batch.
//
// Overlapping I/O stays correct: capture legs carry cumulative totals, so
// batches in flight together move each micro-credit once, whatever order
// the bank sees them in, and answers only ever raise what is known
// captured. Each kind of write has its own mutex, and its holder reads what
// to write under the state lock only once it holds it: the Enforcer's
// shares (enforceMu) and the state file (saveMu) are always overwritten by
// a newer set, never a stale one. State-file saves are group-committed: a
// bid change or a tick that asks for a save while one is being written
// waits for the next, which one of the waiters writes for all of them, so
// concurrent bid changes cost one fsync, not one each; and the agents of
// one process (up's simulated hosts) write at most a few files at once,
// so a tick of a thousand agents does not park a thousand threads in
// fsync. Ticks run one at a time (tickMu), so the
// utilisation measured compares consecutive ticks; SetBids never waits on
// a tick.
//
// The agent has one clock, Config.Now: bids start, captures are numbered
// and Run ticks on it (its wall ticker only paces). It logs on Config.Logger
// (nothing when nil), one line each: a restart (bids taken back, downtime
// excused), a failed tick (as the daemons' loop backs off: stop.Ticker),
// every failed bid-change phase, shares repaired after drift, and every
// request refused (with why).
//
// # Who may bid
//
// With Config.Identities set, Serve takes bid changes only signed by the
// broker (or an admin), once each: a bid names the hold it charges, so a bid
// from anyone else could spend another user's money. Nor is the broker's
// signature enough: a bid is charged only with its owner's mandate (the
// user's signed spend or submit) naming the VM, funding the bid's hold,
// covering its period and spending no faster than the mandate lets one VM
// (with the plan's signed spend --more the bid carries), and the VM must
// be that user's on this host (mandate.go); capture legs name the VM's
// owner, so the bank never captures into another user's hold. A leg the
// bank cuts to its hold's schedule (LegResult.Cut) is not a refusal: the
// bid stays, and the next tick's cumulative leg asks for the rest.
// With Config.AdminKey too, an identity counts only with the admin's record
// of it (service.Certified): a forged whois answer makes nobody a broker.
// Identities are cached a minute and forgotten at once when the bank
// announces a key revoked, so a revoked broker's bids and a revoked user's
// mandates are refused from then on.
// With Config.Signer the agent signs its replies, so the broker believes a
// bid's outcome only from this host's agent.
//
// # Trusted capture results
//
// A capture result decides whether a bid lives: a leg the bank refuses
// drops its hold's bids. So the Capturer of a market with identities is a
// bank.Client with AdminKey, which believes only replies signed by a bank
// principal: a forged or unsigned reply, an error reply included, is
// ignored; if no trusted answer comes the capture fails, the bids and
// totals stay, and the next tick captures the cumulative total again.
//
// # Restarts
//
// With Config.StateFile set the bid book and capture totals survive a
// restart (state.go): New reads them back and enforces the shares before its
// first tick, and cumulative captures mean a restart never charges twice.
// A stop does not cut short a capture the bank is answering: the tick
// takes the answer in (waiting at most 5 s) and saves it, so the book a
// stopped agent leaves is what the bank holds.
package agent
