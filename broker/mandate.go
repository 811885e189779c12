package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Mandates: a plan started by a signed spend or submit keeps that signed
// request (planRecord.Mandate), and the user's signed spend --more of it
// (planRecord.More), and passes them on with its hold and every bid; its
// hold is the one the mandate funds (mandate.HoldIDFor), so agents and the
// bank can check the plan against what the user signed (see package
// mandate). A signed request without an id gets its nonce as the plan's
// id, the hold's name, so that a spend --more naming the plan names the
// hold. The hold names where the plan's VMs run (its placement, from the
// registry) and expires no later than the mandate's period; the plan's
// bids are clamped to the most a VM may spend by the mandate
// (mandate.RateCap, mandate.Clamp), which agents refuse to exceed. A plan
// started by an unsigned request (a broker without identities: the
// simulator, tests) carries none, its hold id is random as before and its
// bids are what its strategy wants.

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
		return nil, "", fmt.Errorf("%w: signed for user %q, not %q", mandate.ErrNotAllowed, m.User, user)
	}
	return s, m.Hold, nil
}

// signedID is the id of the signed spend or submit ctx serves: its id, or
// its nonce when it has none (the request the mandate's hold is named
// after, so a spend --more of the plan names its hold); "" unsigned.
func (b *Broker) signedID(ctx context.Context) string {
	s := signedHere(ctx)
	if s == nil || s.Subject != wire.BrokerSpend && s.Subject != wire.BrokerSubmit {
		return ""
	}
	m, err := b.mandates.Read(s)
	if err != nil {
		return ""
	}
	return m.RequestID
}

// rateCap is the most a bid of rec's plan may spend per second on one VM
// by its mandate and the signed additions to it (mandate.RateCap); ok is
// false for a plan without a mandate, whose bids nobody bounds.
func (b *Broker) rateCap(rec *planRecord) (rateCap float64, ok bool) {
	if rec.Mandate == nil {
		return 0, false
	}
	m, err := b.mandates.Read(rec.Mandate)
	if err != nil {
		return 0, false // its bids are refused anyway
	}
	more := make([]mandate.Mandate, 0, len(rec.More))
	for i := range rec.More {
		if a, err := b.mandates.Read(&rec.More[i]); err == nil {
			more = append(more, a)
		}
	}
	return mandate.RateCap(m, more), true
}

// holdTerms are what rec's hold asks of the bank besides its amount: its
// expiry (no later than the mandate's period) and, with a mandate, where
// its VMs run.
func (b *Broker) holdTerms(rec *planRecord) (time.Time, []wire.Placed) {
	expires := rec.Plan.End.Add(b.cfg.Settle + b.cfg.HoldGrace)
	if rec.Mandate == nil {
		return expires, nil
	}
	if m, err := b.mandates.Read(rec.Mandate); err == nil {
		if end := m.HoldEnd(rec.Plan.Start); end.Before(expires) {
			expires = end
		}
	}
	placement := make([]wire.Placed, len(rec.Plan.VMs))
	for i, v := range rec.Plan.VMs {
		placement[i] = wire.Placed{VM: v.VM, Host: v.Host}
	}
	return expires, placement
}

// nonces is where Serve records nonces: Config.Nonces, or the MRM_NONCES
// bucket (made by the admin) shared by the replicas when the broker keeps
// its plans in JetStream (a replay to another replica or after a restart
// is refused), or nil (this process's memory).
func (b *Broker) nonces(nc *nats.Conn) (service.Nonces, error) {
	if b.cfg.Nonces != nil || b.cfg.Plans == nil || b.cfg.Identities == nil {
		return b.cfg.Nonces, nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("broker: jetstream: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := natsutil.OpenNonces(ctx, js, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return service.KVNonces{KV: kv, NC: nc}, nil
}
