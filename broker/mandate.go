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
// request (planRecord.Mandate) and passes it on with its hold and every
// bid; its hold is the one the mandate funds (mandate.HoldIDFor), so agents
// and the bank can check the plan against what the user signed (see
// package mandate). A plan started by an unsigned request (a broker
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
		return nil, "", fmt.Errorf("%w: signed for user %q, not %q", mandate.ErrNotAllowed, m.User, user)
	}
	return s, m.Hold, nil
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
	return service.KVNonces{KV: kv}, nil
}
