package bank

import (
	"context"
	"fmt"

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
//     more than its budget (a submit's budget or max price);
//   - extend: a spend --more of that user, the extension id derived from
//     it (wire.AdjustPlanID), the amount no more than it adds.
//
// A user (or an admin) holding money itself needs no mandate: its own
// signature is one. Captures are bounded by the hold, so no broker, plan
// record or replay makes a user pay more than the user signed for; and a
// capture leg naming the VM's owner (agents that know identities send it)
// is refused unless the hold is that owner's.

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

// checkHoldMandate refuses a broker's hold its mandate does not allow.
func (b *Bank) checkHoldMandate(ctx context.Context, req *wire.HoldRequest) error {
	if !byBroker(ctx) {
		return nil
	}
	m, err := b.mandate(ctx, req.Mandate, req.User)
	switch {
	case err != nil:
		return err
	case m.Subject != wire.BrokerSpend && m.Subject != wire.BrokerSubmit:
		return fmt.Errorf("%w: signed for %s, not a spend or a submit", mandate.ErrNotAllowed, m.Subject)
	case req.ID != m.Hold:
		return fmt.Errorf("%w: hold %q is not the one it funds (%q)", mandate.ErrNotAllowed, req.ID, m.Hold)
	case m.Budget == 0:
		return fmt.Errorf("%w: it signs no budget or max price", mandate.ErrNotAllowed)
	case req.Amount > m.Budget:
		return fmt.Errorf("%w: hold of %s, the user signed for %s", mandate.ErrNotAllowed, req.Amount, m.Budget)
	}
	return nil
}

// checkExtendMandate refuses a broker's extension its mandate does not allow.
func (b *Bank) checkExtendMandate(ctx context.Context, req *wire.ExtendRequest) error {
	if !byBroker(ctx) {
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
	case req.Amount > m.Budget:
		return fmt.Errorf("%w: extension of %s, the user signed for %s", mandate.ErrNotAllowed, req.Amount, m.Budget)
	}
	return nil
}
