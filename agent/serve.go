package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// whoisTTL is how long an agent trusts a cached identity (a bid change
// should not wait on the bank), and whoisSize how many it remembers.
const (
	whoisTTL  = time.Minute
	whoisSize = 256
)

// Endpoints is the agent's table: bid changes and state requests for its
// host, on subjects of their own (no queue group: one agent per host). Bids
// must be signed by the broker or an admin when the agent knows identities
// (Config.Identities): a bid names the hold it charges, so a bid from anyone
// else could spend another user's money. The state is every VM's owner,
// rate and bids (each plan's hold, budget and charge): the admin and the
// brokers may ask, signed, as a replayable read; a user reads its own VMs
// through the broker's vms, which shows it only aggregates of the others'.
// a may be nil to list the table; its subjects then have "*" for the host.
func Endpoints(a *Agent) service.Table {
	host := "*"
	if a != nil {
		host = a.Host()
	}
	return service.Table{
		service.Op(service.Endpoint{Name: "bid", Subject: wire.AgentBidSubject(host), Signed: true, What: "place and cancel bids, several plans' changes in one batch",
			Allow: []service.Allow{service.Role(wire.RoleBroker), service.Role(wire.RoleAdmin)}}, nil, a.Bids),
		service.Op(service.Endpoint{Name: "state", Subject: wire.AgentStateSubject(host), Signed: true, Replayable: true, What: "read host states",
			Allow: []service.Allow{service.Role(wire.RoleAdmin), service.Role(wire.RoleBroker)}}, nil,
			func(context.Context, *wire.StateRequest) (wire.HostState, error) { return a.State(), nil }),
	}
}

// Serve answers the agent's subjects (Endpoints) on nc; several agents may
// share a connection. With identities it follows the bank's revocation
// notices: a revoked key's bids and mandates are refused as soon as the
// notice comes, not once its cached identity expires (whoisTTL bounds a
// notice lost otherwise). stop stops answering.
func Serve(nc *nats.Conn, a *Agent) (stop func(), err error) {
	cert := service.OwnRecord(a.identities(), a.cfg.AdminKey, a.cfg.Signer, wire.RoleAgent, a.Host())
	if cert != nil {
		_ = cert() // now, while nothing is busy: replies carry it from the first
	}
	auth := service.Remote(a.identities(), a.cfg.SigningClock, whoisTTL, whoisSize)
	unfollow := func() {}
	if a.cfg.Identities != nil {
		if a.cfg.Shared != nil {
			auth.Whois = a.signers // the one cache, shared
		}
		heard, lost := service.Forgetting(auth.Whois, a.signers)
		if unfollow, err = service.FollowRevocations(nc, a.cfg.AdminKey, heard, lost); err != nil {
			return nil, err
		}
	}
	svc, err := service.Serve(nc, "mrm-agent", service.Version, Endpoints(a), service.Options{
		Auth:        auth,
		Observe:     func(op, code string, took time.Duration) { a.cfg.Metrics.Request("agent", op, code, took) },
		Logger:      a.cfg.Logger,
		LogAttrs:    []any{"host", a.cfg.Host},
		Description: "mrmarket's agent of host " + a.Host(),
		Metadata:    map[string]string{"host": a.Host()},
		Fair:        &service.Fair{},
		Signer:      a.cfg.Signer,
		Cert:        cert,
	})
	if err != nil {
		unfollow()
		return nil, err
	}
	return func() {
		_ = svc.Stop()
		unfollow()
	}, nil
}

// identities is Config.Identities believed only with the admin's records
// when the agent knows the anchor; a refused answer is counted.
func (a *Agent) identities() service.Identities {
	return service.Certified(a.cfg.Identities, a.cfg.AdminKey, func(string, error) {
		a.cfg.Metrics.Error("agent", "forged_whois")
	})
}

// NATSPublisher publishes a host's state on its subject and keeps the last
// one in the MRM_HOSTS bucket (KV may be nil), so a broker that starts later
// catches up. With Signer (the host's agent key) the state goes out sealed
// for its host (signing.SealHostState): a broker that knows identities takes
// only such states, from the host's own agent. Without one (the simulator,
// tests) it goes out plain. Sealed is not secret: a state carries every
// VM's owner and bids, so only the brokers and the admin may subscribe to
// states or read the bucket (natsauth).
type NATSPublisher struct {
	NC     *nats.Conn
	KV     jetstream.KeyValue
	Signer *signing.Signer
}

// Publish sends st.
func (p NATSPublisher) Publish(ctx context.Context, st wire.HostState) error {
	st.V = wire.Version
	var data []byte
	var err error
	if p.Signer != nil {
		var sealed wire.Sealed
		if sealed, err = signing.SealHostState(p.Signer, st); err == nil {
			data, err = json.Marshal(sealed)
		}
	} else {
		data, err = json.Marshal(st)
	}
	if err != nil {
		return err
	}
	if err := p.NC.Publish(wire.HostStateSubject(st.Host), data); err != nil {
		return fmt.Errorf("publishing %s: %w", wire.HostStateSubject(st.Host), err)
	}
	if p.KV != nil {
		if _, err := p.KV.Put(ctx, st.Host, data); err != nil {
			return fmt.Errorf("storing state in %s: %w", wire.BucketHosts, err)
		}
	}
	return nil
}
