package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// Serve answers the agent's subjects on nc: bid changes and state requests
// for its host. stop unsubscribes.
func Serve(nc *nats.Conn, a *Agent) (stop func(), err error) {
	host := a.Host()
	observe := func(op string) func(string) {
		return func(code string) { a.cfg.Metrics.Request("agent", op, code) }
	}
	bids, err := wire.ServeSigned(nc, wire.AgentBidSubject(host), "", observe("bid"),
		func(ctx context.Context, r *wire.BidRequest, c wire.Caller) (any, error) {
			if err := a.authorizeBid(ctx, c); err != nil {
				return nil, err
			}
			return a.SetBids(ctx, r)
		})
	if err != nil {
		return nil, err
	}
	state, err := wire.ServeObserved(nc, wire.AgentStateSubject(host), "", observe("state"),
		func(context.Context, *wire.StateRequest) (any, error) { return a.State(), nil })
	if err != nil {
		_ = bids.Unsubscribe()
		return nil, err
	}
	stop = func() {
		_ = bids.Unsubscribe()
		_ = state.Unsubscribe()
	}
	if err := nc.Flush(); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// authorizeBid admits bid changes signed by the broker or an admin, once.
func (a *Agent) authorizeBid(ctx context.Context, c wire.Caller) error {
	if a.cfg.Identities == nil {
		return nil
	}
	if !c.Signed() {
		return wire.ErrUnsigned
	}
	p, err := a.whois(ctx, c.Key)
	if err != nil {
		return err
	}
	if p.Role != wire.RoleBroker && p.Role != wire.RoleAdmin {
		return fmt.Errorf("%w: %s (%s) may not place bids", wire.ErrRole, p.Name, p.Role)
	}
	return a.nonces.Use(c, time.Now())
}

// whoisTTL is how long the agent trusts a cached identity.
const whoisTTL = time.Minute

// whois resolves a key through Identities, cached for whoisTTL: a bid
// change should not wait on the bank.
func (a *Agent) whois(ctx context.Context, key string) (wire.Principal, error) {
	a.whoisMu.Lock()
	e, ok := a.whoisCache[key]
	a.whoisMu.Unlock()
	if ok && time.Since(e.at) < whoisTTL {
		return e.p, nil
	}
	p, err := a.cfg.Identities.Whois(ctx, key)
	if err != nil {
		return p, err
	}
	a.whoisMu.Lock()
	if a.whoisCache == nil {
		a.whoisCache = map[string]cachedPrincipal{}
	}
	a.whoisCache[key] = cachedPrincipal{p, time.Now()}
	a.whoisMu.Unlock()
	return p, nil
}

type cachedPrincipal struct {
	p  wire.Principal
	at time.Time
}

// NATSPublisher publishes a host's state on its subject and keeps the last
// one in the MRM_HOSTS bucket (KV may be nil), so a broker that starts later
// catches up.
type NATSPublisher struct {
	NC *nats.Conn
	KV jetstream.KeyValue
}

// Publish sends st.
func (p NATSPublisher) Publish(ctx context.Context, st wire.HostState) error {
	st.V = wire.Version
	data, err := json.Marshal(st)
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
