package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Mandates (see package mandate): an agent that knows identities charges a
// bid only when it carries its owner's signed spend or submit and that
// mandate allows it — signed by the bid's owner (or an admin), naming the
// VM, funding the bid's hold (mandate.HoldIDFor), the bid ending within
// the mandate's period and spending no faster than the mandate allows one
// VM (mandate.RateCap: its VM share of its budget over its pace, with the
// owner's signed spend --more of the plan the bid carries). That the VM is
// the owner's on this host is checkBids' (under mu); the money is the
// bank's to bound (it captures no more than the mandate's schedule allows
// from the user's hold). The rate check keeps a stolen broker key from
// making an honest agent give a VM more of its host than its owner signed
// for, even where the bank would not let the money follow.
//
// Mandates are read once per signature (mandate.Cache) and their
// signers' identities cached, so a round of many bids of one plan costs
// one verification.

// mandateCacheSize bounds the mandates an agent remembers.
const mandateCacheSize = 1024

// ErrMandate is a bid its mandate does not allow.
var ErrMandate = mandate.ErrNotAllowed

// checkMandates checks every bid req sets against its mandate; without
// Identities it checks nothing. It does I/O (whois): call it without mu.
func (a *Agent) checkMandates(ctx context.Context, req *wire.BidRequest) error {
	if a.cfg.Identities == nil || len(req.Set) == 0 {
		return nil
	}
	now := time.Now
	if a.cfg.SigningClock != nil {
		now = a.cfg.SigningClock
	}
	// By owner and plan: plan ids are each user's, so two users' plans may
	// share one.
	type plan struct{ owner, id string }
	byPlan := map[plan]*wire.Bid{}
	for i := range req.Set {
		if req.Set[i].Mandate != nil {
			byPlan[plan{req.Set[i].Owner, req.Set[i].Plan}] = &req.Set[i]
		}
	}
	added := map[*wire.Bid][]mandate.Mandate{} // by the bid carrying them
	for i := range req.Set {
		b := &req.Set[i]
		carrier := b
		if b.Mandate == nil {
			carrier = byPlan[plan{b.Owner, b.Plan}]
		}
		if carrier == nil {
			return fmt.Errorf("%w for the bid on %q", mandate.ErrMissing, b.VM)
		}
		adds, ok := added[carrier]
		if !ok {
			var err error
			if adds, err = a.additions(ctx, carrier, now()); err != nil {
				return err
			}
			added[carrier] = adds
		}
		if err := a.checkMandate(ctx, b, carrier.Mandate, adds, now()); err != nil {
			return err
		}
	}
	return nil
}

// checkMandate checks one bid against its mandate s and the signed
// additions to its plan adds.
func (a *Agent) checkMandate(ctx context.Context, b *wire.Bid, s *wire.SignedRequest, adds []mandate.Mandate, now time.Time) error {
	m, err := a.mandates.Read(s)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrMandate, err)
	}
	switch {
	case m.Subject != wire.BrokerSpend && m.Subject != wire.BrokerSubmit:
		return fmt.Errorf("%w: signed for %s", ErrMandate, m.Subject)
	case m.User != b.Owner:
		return fmt.Errorf("%w: it spends %s's money, the bid is %s's", ErrMandate, m.User, b.Owner)
	case !m.VMs[b.VM]:
		return fmt.Errorf("%w: it does not name VM %q", ErrMandate, b.VM)
	case b.Hold != m.Hold:
		return fmt.Errorf("%w: the bid charges hold %q, it funds %q", ErrMandate, b.Hold, m.Hold)
	case m.MarketClock && a.cfg.Now().Add(b.Duration.D()).After(m.Until),
		!m.MarketClock && now.Add(b.Duration.D()).After(m.Until):
		return fmt.Errorf("%w: the bid runs past its period (until %s)", ErrMandate, m.Until.UTC().Format(time.RFC3339))
	}
	if rc := mandate.RateCap(m, adds); !mandate.Allows(rc, b.Budget, b.Duration.D()) {
		return fmt.Errorf("%w: the bid on %q spends %.0f µ/s, its mandate allows one VM %.0f µ/s", ErrMandate, b.VM,
			money.Rate(b.Budget, b.Duration.D()), rc)
	}
	p, err := a.whois(ctx, m.Signer.Key, now)
	if err != nil {
		return err
	}
	return m.SignedBy(p)
}

// additions reads the signed spend --more bid b carries for its plan:
// each must be of that plan, signed by its owner (or an admin).
func (a *Agent) additions(ctx context.Context, b *wire.Bid, now time.Time) ([]mandate.Mandate, error) {
	out := make([]mandate.Mandate, 0, len(b.More))
	for i := range b.More {
		m, err := a.mandates.Read(&b.More[i])
		switch {
		case err != nil:
			return nil, fmt.Errorf("%w: an addition: %v", ErrMandate, err)
		case m.Subject != wire.BrokerAdjust || m.User != b.Owner || m.Plan != b.Plan:
			return nil, fmt.Errorf("%w: an addition signed for %s of %s's plan %q, the bid is on %s's plan %q", ErrMandate, m.Subject, m.User, m.Plan, b.Owner, b.Plan)
		}
		p, err := a.whois(ctx, m.Signer.Key, now)
		if err != nil {
			return nil, err
		}
		if err := m.SignedBy(p); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// whois resolves a mandate's signer through the agent's cache, believing
// only the admin's record of it (identities), like every identity the agent
// acts on.
func (a *Agent) whois(ctx context.Context, key string, now time.Time) (wire.Principal, error) {
	if p, ok := a.signers.Get(key, now); ok {
		return p, nil
	}
	p, err := a.identities().Whois(ctx, key)
	if err != nil {
		return p, err
	}
	a.signers.Put(key, p, now)
	return p, nil
}

// newSignerCache is the cache of mandate signers' identities.
func newSignerCache() *service.WhoisCache { return service.NewWhoisCache(whoisTTL, whoisSize) }
