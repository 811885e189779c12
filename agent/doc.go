// Package agent is the per-host part of the market: the host's bid book, the
// share rule, the charging loop and enforcement through an Enforcer.
//
// # Share rule
//
// Each VM i with a funded bid gets q_i = r_i / Σ_j r_j of the host (seed 003,
// Eq. 1), r being the bid's rate budget/duration. A VM without a funded bid
// keeps only a floor (FloorShare each, at most 10% of the host for all of
// them together) so it can still boot and answer, and a host with no funded
// bid at all is divided equally. Shares always sum to 1.
//
// # Charging
//
// A bid starts when the agent accepts it. Each tick the agent computes every
// bid's cumulative charge floor(B·t/D) (money.Charge) and sends one batched
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
// tick), so leg ids stay unique across agent restarts.
//
// # Enforcement
//
// Any change of any bid re-computes and applies all shares of the host at
// once (event-driven). Every tick a reconcile pass compares what the
// Enforcer reports as applied with what should be, and re-applies on any
// drift (level-triggered), so a share changed behind the agent's back is
// repaired within a tick. SimEnforcer is a simulated host for the demo, the
// simulator and tests; the libvirt enforcer implements the same interface.
//
// Each tick the agent publishes the host's state (price = Σ funded rates,
// every VM's rate, share, CPU utilisation, and whether it has been idle —
// below IdleBelow for IdleTicks ticks) for the broker, on
// mrm.v1.host.<id>.state and in the MRM_HOSTS bucket.
//
// Package agent/virt is the libvirt Enforcer for real hosts (mrmarket agent).
//
// # Who may bid
//
// With Config.Identities set, Serve takes bid changes only signed by the
// broker (or an admin), once each: a bid names the hold it charges, so a bid
// from anyone else could spend another user's money.
//
// # Restarts
//
// With Config.StateFile set the bid book and capture totals survive a
// restart (state.go): New reads them back and enforces the shares before its
// first tick, and cumulative captures mean a restart never charges twice.
package agent
