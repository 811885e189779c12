package broker

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Revoked keys. The broker follows the bank's revocation notices (Serve):
// a revoked key is forgotten by every cache of identities at once (the
// requests it signs, the states and plan records it sealed are refused
// from then on), and a host whose agent key was revoked without a
// successor is retired: its VMs are offered to nobody, so no plan bids
// there any more, and the price list shows it retired. A rotated agent key
// leaves its host up: its new key's next state is taken. A host comes back
// with the first state sealed by a key registered for it after the
// revocation; a state sealed before it, still on its way, is refused. A
// replica that starts after the revocation never takes the host's states
// (their key is revoked), so it knows no such host.

// followRevocations forgets revoked keys in caches and retires the hosts of
// agents revoked for good; stop stops following.
func (b *Broker) followRevocations(nc *nats.Conn, serving *service.Authorizer, states *stateIntake) (stop func(), err error) {
	if b.cfg.Identities == nil {
		return func() {}, nil
	}
	var intake *service.WhoisCache
	if states != nil {
		intake = states.cache
	}
	forget, lost := service.Forgetting(serving.Whois, intake, b.sealWhois)
	heard := func(n wire.RevokedNotice) {
		forget(n)
		if n.Role == wire.RoleAgent && n.Successor == "" {
			b.retireHost(n.Name)
		}
	}
	return service.FollowRevocations(nc, b.cfg.AdminKey, heard, lost)
}

// retireHost takes host out of the market: its agent key was revoked.
func (b *Broker) retireHost(host string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, ok := b.hosts[host]
	if !ok {
		return
	}
	for _, v := range st.VMs {
		if b.vmAt[v.VM].host == host {
			delete(b.vmAt, v.VM)
		}
	}
	st.VMs = nil
	b.hosts[host] = st
	b.retired[host] = b.signingNow()
	b.cfg.Logger.Info("broker: host retired: its agent's key was revoked", "host", host, "replica", b.cfg.Replica)
}

// isRetired reports whether host is retired.
func (b *Broker) isRetired(host string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.retired[host]
	return ok
}

// retiredAgents reaches the agents but for the retired hosts': a plan's
// bids there are cancelled without asking (nobody answers, and nothing can
// be charged there any more), and no bid is placed there.
type retiredAgents struct {
	Agents
	b *Broker
}

func (r retiredAgents) Bid(ctx context.Context, host string, changes []*wire.BidRequest) []error {
	if !r.b.isRetired(host) {
		return r.Agents.Bid(ctx, host, changes)
	}
	errs := make([]error, len(changes))
	for i, c := range changes {
		if len(c.Set) > 0 {
			errs[i] = wire.Errorf(wire.ErrUnavailable, "host %s is retired: its agent's key was revoked", host)
		}
	}
	return errs
}
