package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// Recovery from the bank. A plan record holds the only copy of what a
// plan does; the bank holds its money. When the plan store lost a plan
// while no replica had it in memory (the bucket deleted or purged while
// the brokers were down), the money would stay held until the hold
// expires, unlisted and uncancellable. So a replica's first round asks the
// bank for the open holds brokers placed (memo "plan <id>") more than
// startingTimeout ago; each one no plan record knows is released and
// recorded as a cancelled plan with what it released — listed by `plans`,
// counted (metric broker error "plan_recovered") and logged, never lost
// silently. (The plan itself, its VMs and strategy, is not rebuilt: its
// bids lose their hold and stop.) A bank without the listing (the
// simulator's, brokertest's) is not asked.

// holdLister is the part of bank.Client recovery uses.
type holdLister interface {
	OpenHolds(ctx context.Context, req *wire.OpenHoldsRequest) (wire.OpenHoldsReply, error)
}

// planMemo is the memo of a plan's hold.
const planMemo = "plan "

// recovery runs recoverHolds twice: at a replica's first round that
// reaches the bank, and at its first round startingTimeout later (for the
// holds too recent the first time).
type recovery struct {
	mu    sync.Mutex
	first time.Time // of the first listing; zero before
	done  bool
}

// due reports whether recovery should list the holds at now.
func (r *recovery) due(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.done && (r.first.IsZero() || !now.Before(r.first.Add(startingTimeout)))
}

// listed records a listing at now.
func (r *recovery) listed(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first.IsZero() {
		r.first = now
	} else {
		r.done = true
	}
}

// recoverHolds recovers the plans the store lost from the bank's open
// holds (see above); how many it recovered.
func (b *Broker) recoverHolds(ctx context.Context, now time.Time) (int, error) {
	bank, ok := b.cfg.Bank.(holdLister)
	if !ok || !b.recovered.due(now) {
		return 0, nil
	}
	rep, err := bank.OpenHolds(ctx, &wire.OpenHoldsRequest{MemoPrefix: planMemo, Before: now.Add(-startingTimeout)})
	if err != nil {
		return 0, fmt.Errorf("listing open holds: %w", err)
	}
	b.recovered.listed(now)
	known := map[string]bool{}
	b.store.each(func(rec *planRecord, _ uint64) { known[holdOf(rec.Plan.User, rec.Plan.Hold)] = true })
	n := 0
	var errs []error
	for _, h := range rep.Holds {
		id := strings.TrimPrefix(h.Memo, planMemo)
		if known[holdOf(h.User, h.ID)] || wire.CheckID("plan id", id) != nil {
			continue
		}
		if _, ok := b.store.get(planRef{h.User, id}); ok {
			continue // a plan of that id runs with another hold: not ours to touch
		}
		if err := b.recoverHold(ctx, id, h, now); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// recoverHold releases a lost plan's hold and records the plan cancelled.
func (b *Broker) recoverHold(ctx context.Context, id string, h wire.OpenHold, now time.Time) error {
	rel, err := b.cfg.Bank.Release(ctx, &wire.ReleaseRequest{Hold: h.ID, User: h.User})
	if err != nil {
		return fmt.Errorf("releasing the hold %s of lost plan %s: %w", h.ID, id, err)
	}
	rec := &planRecord{Request: "recovered from the bank", Bids: map[string]bidRec{}, Plan: wire.Plan{
		ID: id, User: h.User, Budget: h.Amount, Start: h.Created, End: now, Hold: h.ID, Status: wire.PlanCancelled,
		Released: rel.Released, Spent: rel.Hold.Captured, Owner: b.cfg.Replica, VMs: []wire.PlanVM{}}}
	if _, err := b.store.create(ctx, rec); err != nil && !errors.Is(err, errExists) {
		return err
	}
	b.cfg.Metrics.Error("broker", "plan_recovered")
	b.cfg.Logger.Warn("broker: a plan the store lost was recovered from the bank: its hold released", "plan", id, "user", h.User,
		"hold", h.ID, "released", rel.Released.String())
	return nil
}
