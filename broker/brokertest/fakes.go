package brokertest

import (
	"context"
	"fmt"
	"strings"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// agents is one replica's way to the harness's hosts (broker.Agents): it
// logs every bid change of a batch (a batch of several, a round's, on lines
// marked "+" after its first), applies each as an agent would (all of it
// or nothing), and refuses them while the host is down.
type agents struct {
	h *Harness
	r *replica
}

func (a agents) Bid(_ context.Context, hostName string, reqs []*wire.BidRequest) []error {
	h := a.h
	errs := make([]error, len(reqs))
	h.mu.Lock()
	if a.r.dieAtBid {
		h.mu.Unlock()
		a.r.once.Do(func() { close(a.r.died) })
		<-h.stop // never, while the script runs
		for i := range errs {
			errs[i] = fmt.Errorf("%w: replica %s is gone", wire.ErrUnavailable, a.r.name)
		}
		return errs
	}
	defer h.mu.Unlock()
	for i, req := range reqs {
		arrow := "→"
		if i > 0 {
			arrow = "+"
		}
		errs[i] = h.bid(a.r, hostName, arrow, req)
	}
	return errs
}

// bid logs one change sent to hostName and applies it; h.mu must be held.
func (h *Harness) bid(r *replica, hostName, arrow string, req *wire.BidRequest) error {
	h.sent[hostName] = append(h.sent[hostName], *req)
	line := fmt.Sprintf("%s %s %s: %s", r.name, arrow, hostName, formatRequest(req))
	var ho *host
	for _, x := range h.hosts {
		if x.name == hostName {
			ho = x
		}
	}
	if ho == nil || ho.down {
		h.log = append(h.log, line+" — refused, host down")
		return fmt.Errorf("%w: host %s is down", wire.ErrUnavailable, hostName)
	}
	if ho.refuses {
		h.log = append(h.log, line+" — refused by the host")
		return fmt.Errorf("%w: host %s refuses the bids", wire.ErrForbidden, hostName)
	}
	if err := h.applyBids(ho, req); err != nil {
		h.log = append(h.log, line+" — refused: "+err.Error())
		return err
	}
	h.log = append(h.log, line)
	return nil
}

// applyBids applies req on ho: cancels first (only the named plan's
// bids), then sets, each replaced bid settled at what it charged; h.mu
// must be held.
func (h *Harness) applyBids(ho *host, req *wire.BidRequest) error {
	if err := req.Validate(); err != nil {
		return err
	}
	find := func(name string) *vm {
		for _, v := range ho.vms {
			if v.name == name {
				return v
			}
		}
		return nil
	}
	for _, b := range req.Set {
		if v := find(b.VM); v == nil || v.owner != b.Owner {
			return fmt.Errorf("%w: %s has no VM %s of %s", wire.ErrBadRequest, ho.name, b.VM, b.Owner)
		}
	}
	for _, name := range req.Cancel {
		if find(name) == nil {
			return fmt.Errorf("%w: %s has no VM %s", wire.ErrBadRequest, ho.name, name)
		}
	}
	settle := func(v *vm) {
		if v.bid != nil {
			h.settled[v.bid.hold] += v.bid.charged(h.now)
			h.vmSettled[[2]string{v.bid.hold, v.name}] += v.bid.charged(h.now)
			v.bid = nil
		}
	}
	for _, name := range req.Cancel {
		if v := find(name); v.bid != nil && v.bid.plan == req.Plan {
			settle(v)
		}
	}
	h.audit() // what the settled bids charged is captured now
	for _, b := range req.Set {
		v := find(b.VM)
		settle(v)
		v.bid = &bid{plan: b.Plan, hold: b.Hold, budget: b.Budget, duration: b.Duration.D(), start: h.now}
		h.auditBid(ho, b)
	}
	return nil
}

// formatRequest is a bid request as the scripts print it: each bid as
// vm=budget/duration, then the VMs whose bids it cancels.
func formatRequest(req *wire.BidRequest) string {
	var parts []string
	for _, b := range req.Set {
		parts = append(parts, fmt.Sprintf("%s=%s/%s", b.VM, b.Budget, b.Duration.D()))
	}
	if len(req.Cancel) > 0 {
		parts = append(parts, fmt.Sprintf("cancel %s of %s", strings.Join(req.Cancel, ","), req.Plan))
	}
	return strings.Join(parts, " ")
}

// bankState is the recording bank's books.
type bankState struct {
	users map[string]*account
	holds map[string]*holdRec
}

type account struct {
	balance, granted money.Micro
}

type holdRec struct {
	user     string
	amount   money.Micro
	extends  map[string]bool
	released bool
	refund   money.Micro
}

// Bank is the harness's recording bank (broker.Bank, and the Balance quotes
// ask): it logs every hold, extension and release, keeps each user's
// balance, and releases what a hold's bids did not charge. The bank a
// replica uses knows it, to pause it (Harness.Pause).
type Bank struct {
	h *Harness
	r *replica
}

// OpenHolds are the holds not released, by plan id (the hold's id less
// "hold-" and the broker's random suffix), with their amounts.
func (k Bank) OpenHolds() map[string]money.Micro {
	h := k.h
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]money.Micro{}
	for id, hr := range h.bank.holds {
		if !hr.released {
			out[strings.TrimPrefix(holdName(id), "hold-")] = hr.amount
		}
	}
	return out
}

// Grant gives user amount.
func (k Bank) Grant(user string, amount money.Micro) {
	h := k.h
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.account(user)
	a.balance += amount
	a.granted += amount
}

// account is user's account; h.mu must be held.
func (h *Harness) account(user string) *account {
	a := h.bank.users[user]
	if a == nil {
		a = &account{}
		h.bank.users[user] = a
	}
	return a
}

func (k Bank) Hold(_ context.Context, req *wire.HoldRequest) (wire.HoldReply, error) {
	h := k.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if hr, ok := h.bank.holds[req.ID]; ok {
		return wire.HoldReply{Hold: wire.HoldInfo{ID: req.ID, User: hr.user, Amount: hr.amount}, Replayed: true}, nil
	}
	a := h.account(req.User)
	if req.Amount > a.balance {
		h.log = append(h.log, fmt.Sprintf("bank: hold %s %s %s — refused, balance %s", holdName(req.ID), req.User, req.Amount, a.balance))
		return wire.HoldReply{}, fmt.Errorf("%w: balance %s", wire.ErrInsufficient, a.balance)
	}
	a.balance -= req.Amount
	h.bank.holds[req.ID] = &holdRec{user: req.User, amount: req.Amount, extends: map[string]bool{}}
	h.placed(req)
	h.log = append(h.log, fmt.Sprintf("bank: hold %s %s %s", holdName(req.ID), req.User, req.Amount))
	return wire.HoldReply{Hold: wire.HoldInfo{ID: req.ID, User: req.User, Amount: req.Amount}, Balance: a.balance}, nil
}

func (k Bank) Extend(_ context.Context, req *wire.ExtendRequest) (wire.HoldReply, error) {
	h := k.h
	h.mu.Lock()
	defer h.mu.Unlock()
	hr, ok := h.bank.holds[req.Hold]
	if !ok || hr.released {
		return wire.HoldReply{}, fmt.Errorf("%w: hold %s", wire.ErrNotFound, holdName(req.Hold))
	}
	a := h.account(hr.user)
	if !hr.extends[req.ID] {
		if req.Amount > a.balance {
			return wire.HoldReply{}, fmt.Errorf("%w: balance %s", wire.ErrInsufficient, a.balance)
		}
		hr.extends[req.ID] = true
		a.balance -= req.Amount
		hr.amount += req.Amount
		h.extended(req.Hold, req.Amount)
		h.log = append(h.log, fmt.Sprintf("bank: extend %s +%s", holdName(req.Hold), req.Amount))
	}
	return wire.HoldReply{Hold: wire.HoldInfo{ID: req.Hold, User: hr.user, Amount: hr.amount}, Balance: a.balance}, nil
}

func (k Bank) Release(_ context.Context, req *wire.ReleaseRequest) (wire.ReleaseReply, error) {
	h := k.h
	h.mu.Lock()
	defer h.mu.Unlock()
	hr, ok := h.bank.holds[req.Hold]
	if !ok {
		return wire.ReleaseReply{}, fmt.Errorf("%w: hold %s", wire.ErrNotFound, holdName(req.Hold))
	}
	a := h.account(hr.user)
	if req.Amount > 0 && !hr.released { // a part (spend --less): the hold stays open
		part := min(req.Amount, hr.amount-min(h.charged(req.Hold), hr.amount))
		hr.amount -= part
		a.balance += part
		h.log = append(h.log, fmt.Sprintf("bank: release %s: %s back (part)", holdName(req.Hold), part))
		return wire.ReleaseReply{Hold: wire.HoldInfo{ID: req.Hold, User: hr.user, Amount: hr.amount, Status: wire.HoldOpen}, Released: part, Balance: a.balance}, nil
	}
	if !hr.released {
		hr.released = true
		hr.refund = hr.amount - min(h.charged(req.Hold), hr.amount)
		a.balance += hr.refund
		h.log = append(h.log, fmt.Sprintf("bank: release %s: %s back", holdName(req.Hold), hr.refund))
	}
	info := wire.HoldInfo{ID: req.Hold, User: hr.user, Amount: hr.amount, Captured: hr.amount - hr.refund, Released: hr.refund}
	return wire.ReleaseReply{Hold: info, Released: hr.refund, Balance: a.balance}, nil
}

// Balance is user's account: its balance, what its open holds have not
// yet charged, and what its bids charged.
func (k Bank) Balance(_ context.Context, req *wire.BalanceRequest) (wire.BalanceReply, error) {
	h := k.h
	h.mu.Lock()
	if r := k.r; r != nil && r.pause {
		r.pause = false
		paused, resume := r.paused, r.resume
		h.mu.Unlock()
		close(paused)
		select {
		case <-resume:
		case <-h.stop:
		}
		h.mu.Lock()
	}
	defer h.mu.Unlock()
	a := h.account(req.User)
	rep := wire.BalanceReply{User: req.User, Balance: a.balance, Granted: a.granted}
	for id, hr := range h.bank.holds {
		if hr.user != req.User {
			continue
		}
		if hr.released {
			rep.Spent += hr.amount - hr.refund
			continue
		}
		c := min(h.charged(id), hr.amount)
		rep.Spent += c
		rep.Held += hr.amount - c
	}
	return rep, nil
}
