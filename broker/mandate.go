package broker

import (
	"context"
	"fmt"

	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Mandates: a plan started by a signed spend or submit keeps that signed
// request (planRecord.Mandate) and passes it on with its hold and every
// bid; its hold is the one the mandate funds (wire.HoldIDFor), so agents
// and the bank can check the plan against what the user signed (see
// wire/mandate.go). A plan started by an unsigned request (a broker
// without identities: the simulator, tests) carries none, and its hold id
// is random as before.

// signedHere is the signed request ctx serves, if any: the mandate a
// handler passes on.
func signedHere(ctx context.Context) *wire.SignedRequest {
	in, ok := service.IncomingFrom(ctx)
	if !ok || in.Signed.Key == "" {
		return nil
	}
	s := in.Signed
	return &s
}

// mandateOf is the mandate of the spend or submit ctx serves and the hold
// it funds; none for an unsigned request.
func (b *Broker) mandateOf(ctx context.Context, user string) (*wire.SignedRequest, string, error) {
	s := signedHere(ctx)
	if s == nil || s.Subject != wire.BrokerSpend && s.Subject != wire.BrokerSubmit {
		return nil, "", nil
	}
	m, err := b.mandates.Read(s)
	if err != nil {
		return nil, "", err
	}
	if m.User != user {
		return nil, "", fmt.Errorf("%w: signed for user %q, not %q", wire.ErrBadMandate, m.User, user)
	}
	return s, m.Hold, nil
}
