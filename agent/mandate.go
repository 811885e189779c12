package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Mandates (see wire/mandate.go): an agent that knows identities charges a
// bid only when it carries its owner's signed spend or submit and that
// mandate allows it — signed by the bid's owner (or an admin), naming the
// VM, funding the bid's hold (wire.HoldIDFor), and the bid ending within
// the mandate's period. That the VM is the owner's on this host is
// checkBids' (under mu); the budget is the bank's to bound (it captures no
// more than the user's signed requests put in the hold).
//
// Mandates are read once per signature (wire.MandateCache) and their
// signers' identities cached, so a round of many bids of one plan costs
// one verification.

// mandateCacheSize bounds the mandates an agent remembers.
const mandateCacheSize = 1024

// ErrMandate is a bid its mandate does not allow.
var ErrMandate = wire.ErrBadMandate

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
	byPlan := map[plan]*wire.SignedRequest{}
	for i := range req.Set {
		if m := req.Set[i].Mandate; m != nil {
			byPlan[plan{req.Set[i].Owner, req.Set[i].Plan}] = m
		}
	}
	for i := range req.Set {
		b := &req.Set[i]
		s := b.Mandate
		if s == nil {
			s = byPlan[plan{b.Owner, b.Plan}]
		}
		if s == nil {
			return fmt.Errorf("%w for the bid on %q", wire.ErrNoMandate, b.VM)
		}
		if err := a.checkMandate(ctx, b, s, now()); err != nil {
			return err
		}
	}
	return nil
}

// checkMandate checks one bid against its mandate s.
func (a *Agent) checkMandate(ctx context.Context, b *wire.Bid, s *wire.SignedRequest, now time.Time) error {
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
	p, err := a.whois(ctx, m.Signer.Key, now)
	if err != nil {
		return err
	}
	return m.SignedBy(p)
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
