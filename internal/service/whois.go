package service

import (
	"container/list"
	"sync"
	"time"

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
