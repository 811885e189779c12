package service

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// WhoisCache remembers principals by signing key for a TTL, holding at most
// a fixed number: past it the least recently used is forgotten, so a flood
// of distinct keys costs memory in proportion to the bound, not the flood.
// Expiry reads the time its callers pass (the Authorizer's clock). It is
// safe for concurrent use.
type WhoisCache struct {
	ttl  time.Duration
	size int

	mu    sync.Mutex
	order *list.List               // of *whoisEntry, most recently used first
	byKey map[string]*list.Element // key → its element in order
}

type whoisEntry struct {
	key string
	p   wire.Principal
	at  time.Time
}

// NewWhoisCache makes a cache trusting an answer for ttl and holding at most
// size keys (at least 1).
func NewWhoisCache(ttl time.Duration, size int) *WhoisCache {
	return &WhoisCache{ttl: ttl, size: max(size, 1), order: list.New(), byKey: map[string]*list.Element{}}
}

// Get returns key's principal if it was put less than the TTL before now.
func (c *WhoisCache) Get(key string, now time.Time) (wire.Principal, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return wire.Principal{}, false
	}
	e := el.Value.(*whoisEntry)
	if now.Sub(e.at) >= c.ttl {
		c.order.Remove(el)
		delete(c.byKey, key)
		return wire.Principal{}, false
	}
	c.order.MoveToFront(el)
	return e.p, true
}

// Put remembers key's principal as of now, forgetting the least recently
// used key if the cache is full.
func (c *WhoisCache) Put(key string, p wire.Principal, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		el.Value = &whoisEntry{key, p, now}
		c.order.MoveToFront(el)
		return
	}
	for c.order.Len() >= c.size {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.byKey, oldest.Value.(*whoisEntry).key)
	}
	c.byKey[key] = c.order.PushFront(&whoisEntry{key, p, now})
}

// Len is how many keys the cache holds.
func (c *WhoisCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// certified is Identities whose answers count only with the anchor's
// principal record (see Certified).
type certified struct {
	ids       Identities
	admin     string
	onRefused func(key string, err error)
	newest    *newestRecords
}

// newestRecords remembers, per key, when the newest record seen was sealed:
// an older one answered later is a replay (the bank keeps only the newest).
// It holds at most maxNewest keys and starts over when full.
type newestRecords struct {
	mu sync.Mutex
	at map[string]int64
}

const maxNewest = 65536

// see records cert as seen for key; false if a newer one was seen before.
func (n *newestRecords) see(key string, cert *wire.Sealed) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if cert.Time < n.at[key] {
		return false
	}
	if n.at == nil || len(n.at) >= maxNewest {
		n.at = map[string]int64{}
	}
	n.at[key] = cert.Time
	return true
}

// Certified makes ids trustworthy over an untrusted network: an answer is
// believed only when its Cert opens as the asked key's principal record
// sealed by the anchor adminKey, and the principal is the one the record
// names (signing.OpenPrincipal); any other answer — a forged whois reply from
// whoever joined the bank's queue group, a record of another key or sealed
// by another key, a record older than one this process saw before (a
// replay: the bank keeps the newest only) — is refused as
// signing.ErrUnknownKey and heard by onRefused (nil: nobody). Only a replayed
// old record that this process never saw superseded gets through this
// check; ids that verify the bank's signature on the answer
// (bank.Client with AdminKey) and NATS permissions (only the bank answers
// whois) close that. The anchor key itself is the admin without asking. nil
// ids stays nil; an empty adminKey leaves ids as they are (a market without
// identities: tests, the simulator).
func Certified(ids Identities, adminKey string, onRefused func(key string, err error)) Identities {
	if ids == nil || adminKey == "" {
		return ids
	}
	return certified{ids: ids, admin: adminKey, onRefused: onRefused, newest: &newestRecords{}}
}

// Whois asks ids and checks the answer's record.
func (c certified) Whois(ctx context.Context, key string) (wire.Principal, error) {
	if key == c.admin {
		return signing.OpenPrincipal(nil, c.admin, key)
	}
	p, err := c.ids.Whois(ctx, key)
	if err != nil {
		return wire.Principal{}, err
	}
	got, err := signing.OpenPrincipal(p.Cert, c.admin, key)
	if err == nil && (got.Name != p.Name || got.Role != p.Role || p.Key != key) {
		err = fmt.Errorf("%w: the answer says %s %s, its record %s %s", signing.ErrCertBody, p.Role, p.Name, got.Role, got.Name)
	}
	if err == nil && !c.newest.see(key, p.Cert) {
		err = fmt.Errorf("%w: a record older than one seen before (replayed)", signing.ErrCertBody)
	}
	if err != nil {
		if c.onRefused != nil {
			c.onRefused(key, err)
		}
		return wire.Principal{}, fmt.Errorf("%w %s (%v)", signing.ErrUnknownKey, key, err)
	}
	return got, nil
}
