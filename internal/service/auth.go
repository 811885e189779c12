package service

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Identities resolves a signing key to its principal (bank.Client and the
// bank itself have it).
type Identities interface {
	Whois(ctx context.Context, key string) (wire.Principal, error)
}

// Nonces remembers the nonces of signed requests: Use refuses one seen
// before with signing.ErrReplay. now is the Authorizer's clock, for stores that
// expire nonces themselves.
type Nonces interface {
	Use(ctx context.Context, c signing.Caller, now time.Time) error
}

// MemoryNonces keeps nonces in the process's memory (signing.NonceCache, which
// forgets them once their signature could no longer be fresh): replays are
// refused by this process only, and not across its restarts.
type MemoryNonces struct{ cache signing.NonceCache }

// Use records c's nonce; signing.ErrReplay if it was seen.
func (m *MemoryNonces) Use(_ context.Context, c signing.Caller, now time.Time) error {
	return m.cache.Use(c, now)
}

// Authorizer decides who may send what, for every endpoint of a table. The
// zero value allows everything and verifies signatures on the wall clock.
// It must not be copied after first use.
type Authorizer struct {
	// Identities resolves signers; nil allows every request, signed or not.
	Identities Identities
	// Whois, when set, caches Identities' answers (the broker and the
	// agents ask the bank over NATS; the bank asks itself and needs none).
	Whois *WhoisCache
	// Nonces refuses replays; nil keeps them in memory (MemoryNonces).
	Nonces Nonces
	// Now is the clock of signature freshness, nonce and whois expiry; nil
	// is the wall clock.
	Now func() time.Time

	memory MemoryNonces // when Nonces is nil
}

// Remote is the Authorizer of a component that asks the bank who signed
// (the broker, an agent): ids' answers cached for ttl, at most size of
// them, on the clock now (nil: the wall clock). nil ids allows everything.
// Over NATS, pass Certified(ids, adminKey, …) so that only the admin's
// records count (agent.Serve and broker.Serve do when they know the anchor).
func Remote(ids Identities, now func() time.Time, ttl time.Duration, size int) *Authorizer {
	a := &Authorizer{Now: now}
	if ids != nil {
		a.Identities, a.Whois = ids, NewWhoisCache(ttl, size)
	}
	return a
}

// now is a's clock.
func (a *Authorizer) now() time.Time {
	if a.Now == nil {
		return time.Now()
	}
	return a.Now()
}

// verify checks a request's signature, if it has one, and its freshness.
func (a *Authorizer) verify(subject string, h nats.Header, body []byte) (signing.Caller, error) {
	return signing.Verify(subject, h, body, a.now())
}

// Authorize decides whether caller may send req on e: an open endpoint, or
// no Identities, admits anyone; a signed endpoint needs a signature, a known
// key, a role e allows (for the principal req acts for, where e says so)
// and a nonce not used before — checked last, so a refused request does not
// spend its nonce; a Replayable endpoint (a read) records no nonce.
func (a *Authorizer) Authorize(ctx context.Context, e *Endpoint, caller signing.Caller, req any) error {
	if !e.Signed || a.Identities == nil {
		return nil
	}
	if !caller.Signed() {
		return signing.ErrUnsigned
	}
	p, err := a.whois(ctx, caller.Key)
	if err != nil {
		return err
	}
	if in, ok := ctx.Value(incomingKey{}).(*Incoming); ok {
		in.Principal = p
	}
	e.fillMine(p, req)
	if ok, actsFor := e.admits(p, req); !ok {
		what := e.What
		if actsFor != "" {
			what += " " + actsFor
		}
		return fmt.Errorf("%w: %s (%s) may not %s", signing.ErrRole, p.Name, p.Role, what)
	}
	if e.Replayable {
		return nil // a read: nothing to protect from a replay, no nonce to store
	}
	if a.Nonces == nil {
		return a.memory.Use(ctx, caller, a.now())
	}
	return a.Nonces.Use(ctx, caller, a.now())
}

// whois resolves key, through the cache when there is one. Failures are not
// cached: a key registered a moment later is known at once.
func (a *Authorizer) whois(ctx context.Context, key string) (wire.Principal, error) {
	if a.Whois == nil {
		return a.Identities.Whois(ctx, key)
	}
	if p, ok := a.Whois.Get(key, a.now()); ok {
		return p, nil
	}
	p, err := a.Identities.Whois(ctx, key)
	if err != nil {
		return p, err
	}
	a.Whois.Put(key, p, a.now())
	return p, nil
}
