package broker

import (
	"context"

	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Money figures. The broker keeps its own running account of what a plan's
// bids charged (the record's Plan.Spent and its bids in force): a round
// needs what is left now, without asking the bank. It is an estimate — an
// agent starts a bid a little after the broker, excuses its downtime, and
// a hold the bank found exhausted stops charging — so it is never what a
// user is shown. Every answer about plans over NATS (spend, cancel, adjust,
// plans, submit, jobs) carries the bank's figures of each plan's hold, read
// in one batch: Budget what was held for the plan (the spend and its
// --more), Spent what the agents captured, Released what went back, Held
// what is still in escrow — so Spent + Released + Held = Budget, always,
// and Held = 0 once the plan's hold is closed. When the bank cannot be
// asked, the answer carries the broker's estimate and says so (Figures
// "estimate"); Broker.Plans and Broker.Jobs in process are the broker's
// own account. The answers name a plan's kind too: a best-effort job's plan
// (which spends by the deadline service's strategy) is "best-effort".

// HoldReader reads holds from the bank (bank.Client has it). A Bank
// without it (the simulator's ledger) leaves answers with the broker's
// own account.
type HoldReader interface {
	Holds(ctx context.Context, req *wire.HoldsRequest) (wire.HoldsReply, error)
}

// Where a plan's figures come from.
const (
	FiguresBank     = "bank"
	FiguresEstimate = "estimate"
)

// bankFigures replaces the money figures of plans by the bank's.
func (b *Broker) bankFigures(ctx context.Context, plans []wire.Plan) {
	holds := b.readHolds(ctx, plans)
	for i := range plans {
		p := &plans[i]
		if v, ok := b.store.get(refOf(p)); ok && p.Strategy == wire.StrategyDeadline && v.rec.Job != nil && v.rec.Job.Deadline.IsZero() {
			p.Strategy = wire.StrategyBestEffort
		}
		if h, ok := holds[holdOf(p.User, p.Hold)]; ok {
			p.Budget, p.Spent, p.Released, p.Held, p.Figures = h.Amount, h.Captured, h.Released, h.Remaining(), FiguresBank
			continue
		}
		p.Figures = FiguresEstimate
		if p.Status == wire.PlanRunning || p.Status == planStarting {
			p.Held = max(p.Budget-p.Spent-p.Released, 0)
		}
	}
}

// holdOf keys a hold by its user and its id: hold ids are each user's own
// at the bank, so a user may have a hold of the id another user's plan's
// hold has.
func holdOf(user, hold string) string { return user + "\x00" + hold }

// figuresWait bounds the bank's answer to a read of plans' holds: an
// overloaded bank leaves the plans answered with the broker's estimates,
// in time, rather than not answered at all. Two attempts: a try lost with
// a dead bank replica is asked again of the other.
const figuresWait = 2 * rpc.DaemonAttempt

// readHolds reads the holds of plans from the bank, by id, keyed by
// holdOf; none when the bank cannot be asked in time (counted).
func (b *Broker) readHolds(ctx context.Context, plans []wire.Plan) map[string]wire.HoldInfo {
	hr, ok := b.cfg.Bank.(HoldReader)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, figuresWait)
	defer cancel()
	var ids []string
	for _, p := range plans {
		if p.Hold != "" {
			ids = append(ids, p.Hold)
		}
	}
	out := make(map[string]wire.HoldInfo, len(ids))
	for len(ids) > 0 {
		n := min(len(ids), wire.MaxHoldsRead)
		rep, err := hr.Holds(ctx, &wire.HoldsRequest{Versioned: wire.Versioned{V: wire.Version}, IDs: ids[:n]})
		if err != nil {
			b.cfg.Metrics.Error("broker", "bank_figures")
			return nil
		}
		for _, h := range rep.Holds {
			out[holdOf(h.User, h.ID)] = h
		}
		ids = ids[n:]
	}
	return out
}

// planWithFigures is p with the bank's figures.
func (b *Broker) planWithFigures(ctx context.Context, p wire.Plan) wire.Plan {
	ps := []wire.Plan{p}
	b.bankFigures(ctx, ps)
	return ps[0]
}

// jobsWithFigures gives each job of rep what its plan's hold captured.
func (b *Broker) jobsWithFigures(ctx context.Context, rep wire.JobsReply) wire.JobsReply {
	plans := make([]wire.Plan, len(rep.Jobs))
	for i, j := range rep.Jobs {
		if v, ok := b.store.get(planRef{j.User, j.ID}); ok {
			plans[i] = wire.Plan{ID: j.ID, User: v.rec.Plan.User, Hold: v.rec.Plan.Hold}
		}
	}
	holds := b.readHolds(ctx, plans)
	for i, p := range plans {
		if h, ok := holds[holdOf(p.User, p.Hold)]; ok && p.Hold != "" {
			rep.Jobs[i].Spent = h.Captured
		}
	}
	return rep
}
