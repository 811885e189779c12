package brokertest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// The pace audit: every script's plans run honestly, and the harness checks
// their charges against what their users would sign — the pace and VM
// share the CLI signs for a spend (mandate.SignCaps) or a submit
// (mandate.JobPace) — as the bank and the agents check a plan with a
// mandate: at every tick and bid change, what a hold's bids charged is
// within mandate.Allowed of its terms (the hold's amount from when it was
// placed, each extension from when it was made), each VM's within its
// share of that (mandate.ShareOf), and every bid within mandate.RateCap.
// A breach fails the script's test (Audit) without changing what it
// prints: it means the bank would cut, or an agent refuse, an honest
// plan's charges — the caps a strategy signs are too tight for it (the
// mutation this catches: strategies.StagePriority's Caps giving Speedup 1
// fails stage.txt here).

// signedCaps are the pace and VM share a plan's user signs.
type signedCaps struct {
	pace  time.Duration
	share int64
}

// pacedHold is a hold's schedule as the bank would keep it.
type pacedHold struct {
	plan  string
	share int64
	terms []mandate.Term
}

// expect records what user signs for plan id; h.mu must not be held.
func (h *Harness) expect(user, id string, pace time.Duration, share int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.signs[user+"/"+id] = signedCaps{pace, share}
}

// placed starts the schedule of a hold req places; h.mu must be held.
func (h *Harness) placed(req *wire.HoldRequest) {
	plan := req.User + "/" + strings.TrimPrefix(req.Memo, "plan ")
	c, ok := h.signs[plan]
	if !ok {
		return
	}
	h.paced[req.ID] = &pacedHold{plan: plan, share: c.share, terms: []mandate.Term{{Amount: req.Amount, Start: h.now, Pace: c.pace}}}
}

// extended adds an extension's term; h.mu must be held.
func (h *Harness) extended(hold string, amount money.Micro) {
	if p := h.paced[hold]; p != nil {
		p.terms = append(p.terms, mandate.Term{Amount: amount, Start: h.now, Pace: mandate.ExtensionPace(p.terms[0], h.now)})
	}
}

// rateCap is the most a bid on hold may spend per second on one VM, and
// whether the hold is audited; h.mu must be held.
func (h *Harness) rateCap(hold string) (float64, bool) {
	p := h.paced[hold]
	if p == nil {
		return 0, false
	}
	first := p.terms[0]
	spend := mandate.Mandate{Budget: first.Amount, Pace: first.Pace, VMShare: p.share, Signer: signing.Caller{Time: first.Start}}
	var more []mandate.Mandate
	for _, t := range p.terms[1:] {
		more = append(more, mandate.Mandate{Budget: t.Amount, Signer: signing.Caller{Time: t.Start}})
	}
	return mandate.RateCap(spend, more), true
}

// auditBid checks a bid set on vm of ho; h.mu must be held.
func (h *Harness) auditBid(ho *host, b wire.Bid) {
	if rc, ok := h.rateCap(b.Hold); ok && !mandate.Allows(rc, b.Budget, b.Duration.D()) {
		h.breach(fmt.Sprintf("%s: plan %s's bid on %s spends %.1f µ/s, its mandate allows one VM %.1f µ/s",
			rel(h.now), b.Plan, b.VM, money.Rate(b.Budget, b.Duration.D()), rc))
	}
	_ = ho
}

// audit checks every open audited hold's charges at now; h.mu must be held.
func (h *Harness) audit() {
	for _, id := range slices.Sorted(maps.Keys(h.paced)) {
		p := h.paced[id]
		hr := h.bank.holds[id]
		if hr == nil || hr.released {
			continue
		}
		allowed := mandate.Allowed(p.terms, h.now)
		if total := min(h.charged(id), hr.amount); total > allowed {
			h.breach(fmt.Sprintf("%s: plan %s charged %s, its mandate allows %s by now", rel(h.now), p.plan, total, allowed))
		}
		most := mandate.ShareOf(allowed, p.share)
		for _, ho := range h.hosts {
			for _, v := range ho.vms {
				c := h.vmSettled[[2]string{id, v.name}]
				if v.bid != nil && v.bid.hold == id {
					c += v.bid.charged(h.now)
				}
				if c > most {
					h.breach(fmt.Sprintf("%s: plan %s charged %s on VM %s, its mandate allows one VM %s by now", rel(h.now), p.plan, c, v.name, most))
				}
			}
		}
	}
}

// breach records an audit failure once; h.mu must be held.
func (h *Harness) breach(what string) {
	if !slices.Contains(h.breaches, what) {
		h.breaches = append(h.breaches, what)
	}
}

// Audit is every breach of the pace audit so far (a test fails on any).
func (h *Harness) Audit() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.breaches)
}
