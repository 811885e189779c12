package bank

import (
	"context"
	"fmt"
	"time"

	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Mandates (see package mandate): the broker holds and extends users'
// money only with the user's own signed request. A hold or an extension a
// broker asks for must carry the mandate, and the bank checks it through
// its own registry of identities:
//
//   - hold: a spend or submit signed by the user whose money it is (or an
//     admin), the hold id derived from it (mandate.HoldIDFor), the amount no
//     more than its budget (a submit's budget or max price), expiring no
//     later than its period's end (Mandate.HoldUntil), with a placement of
//     VMs it names only and the placement's hosts as the hold's;
//   - extend: a spend --more of that user, the extension id derived from
//     it (wire.AdjustPlanID), the amount no more than it adds, and only
//     into the hold of the plan it names (mandate.HoldIDFor(user, plan)).
//
// A hold carrying a mandate keeps its terms (terms.go), whoever places it:
// every capture leg is checked against its pace, its VM share and its
// placement. A user (or an admin) holding money itself needs no mandate:
// its own signature is one, but a hold without one has no terms, and a
// bank that knows identities lets no agent capture it. So no broker, plan record or replay makes a user pay
// more, faster, longer or elsewhere than the user signed for; and a capture
// leg naming the VM's owner (agents that know identities send it) is
// refused unless the hold is that owner's.

// byBroker reports whether the request ctx serves was signed by a broker.
func byBroker(ctx context.Context) bool {
	in, ok := service.IncomingFrom(ctx)
	return ok && in.Principal.Role == wire.RoleBroker
}

// mandate reads s and checks it was signed by user (or an admin), through
// the bank's own registry.
func (b *Bank) mandate(ctx context.Context, s *wire.SignedRequest, user string) (mandate.Mandate, error) {
	if s == nil {
		return mandate.Mandate{}, mandate.ErrMissing
	}
	m, err := b.mandates.Read(s)
	if err != nil {
		return m, fmt.Errorf("%w: %v", mandate.ErrNotAllowed, err)
	}
	if m.User != user {
		return m, fmt.Errorf("%w: it spends %s's money, not %s's", mandate.ErrNotAllowed, m.User, user)
	}
	p, err := b.Whois(ctx, m.Signer.Key)
	if err != nil {
		return m, fmt.Errorf("%w: its signer: %v", mandate.ErrNotAllowed, err)
	}
	return m, m.SignedBy(p)
}

// checkHoldMandate refuses a hold its mandate does not allow, and gives
// the mandate: nil for a hold without one, which only its user (or an
// admin, or an in-process caller) may place, and which gets no terms.
func (b *Bank) checkHoldMandate(ctx context.Context, req *wire.HoldRequest) (*mandate.Mandate, error) {
	if !byBroker(ctx) && req.Mandate == nil {
		return nil, nil
	}
	m, err := b.mandate(ctx, req.Mandate, req.User)
	switch {
	case err != nil:
		return nil, err
	case m.Subject != wire.BrokerSpend && m.Subject != wire.BrokerSubmit:
		return nil, fmt.Errorf("%w: signed for %s, not a spend or a submit", mandate.ErrNotAllowed, m.Subject)
	case req.ID != m.Hold:
		return nil, fmt.Errorf("%w: hold %q is not the one it funds (%q)", mandate.ErrNotAllowed, req.ID, m.Hold)
	case m.Budget == 0:
		return nil, fmt.Errorf("%w: it signs no budget or max price", mandate.ErrNotAllowed)
	case req.Amount > m.Budget:
		return nil, fmt.Errorf("%w: hold of %s, the user signed for %s", mandate.ErrNotAllowed, req.Amount, m.Budget)
	case len(req.Placement) == 0:
		return nil, fmt.Errorf("%w: a broker's hold names where its VMs run (placement)", mandate.ErrNotAllowed)
	}
	for _, p := range req.Placement {
		if !m.VMs[p.VM] {
			return nil, fmt.Errorf("%w: it does not name VM %q", mandate.ErrNotAllowed, p.VM)
		}
	}
	if until := m.HoldUntil(b.now(), b.signingNow()); req.Expires.After(until) {
		return nil, fmt.Errorf("%w: the hold expires %s, its period ends %s", mandate.ErrNotAllowed,
			req.Expires.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339))
	}
	return &m, nil
}

// checkExtendMandate refuses an extension its mandate does not allow; a
// broker's needs one.
func (b *Bank) checkExtendMandate(ctx context.Context, req *wire.ExtendRequest) error {
	if !byBroker(ctx) && req.Mandate == nil {
		return nil
	}
	m, err := b.mandate(ctx, req.Mandate, req.User)
	switch {
	case err != nil:
		return err
	case m.Subject != wire.BrokerAdjust:
		return fmt.Errorf("%w: signed for %s, not a spend --more", mandate.ErrNotAllowed, m.Subject)
	case req.ID != wire.AdjustPlanID(m.Plan, m.RequestID):
		return fmt.Errorf("%w: extension %q is not the one it asks for", mandate.ErrNotAllowed, req.ID)
	case req.Hold != mandate.HoldIDFor(m.User, m.Plan):
		return fmt.Errorf("%w: it adds to plan %q, not to hold %q", mandate.ErrNotAllowed, m.Plan, req.Hold)
	case req.Amount > m.Budget:
		return fmt.Errorf("%w: extension of %s, the user signed for %s", mandate.ErrNotAllowed, req.Amount, m.Budget)
	}
	return nil
}
