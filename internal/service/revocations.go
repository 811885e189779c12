package service

import (
	"encoding/json"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Revocations. A component caches who signed (WhoisCache, for a TTL), so a
// key the admin revokes would still be believed until its entry expired.
// The bank announces each revocation it commits on wire.RegistryRevoked;
// FollowRevocations hears it and the component forgets the key at once.
// A notice counts only when its records open under the anchor
// (signing.CheckRevokedNotice): a forged one makes nobody forget anything. A
// notice published while the connection was down is lost, so on every
// reconnect each follower is told to forget everything (its lost
// callback); one dropped otherwise (a slow consumer) leaves the cache's
// TTL as the bound.

// Forget drops key from the cache: it was revoked.
func (c *WhoisCache) Forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		c.order.Remove(el)
		delete(c.byKey, key)
	}
}

// Clear drops every key from the cache: revocations may have been missed.
func (c *WhoisCache) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.order.Init()
	clear(c.byKey)
}

// Forgetting is a FollowRevocations callback pair that forgets in caches:
// the revoked key on a notice, every key when notices may have been lost.
func Forgetting(caches ...*WhoisCache) (heard func(wire.RevokedNotice), lost func()) {
	heard = func(n wire.RevokedNotice) {
		for _, c := range caches {
			if c != nil {
				c.Forget(n.Key)
			}
		}
	}
	lost = func() {
		for _, c := range caches {
			if c != nil {
				c.Clear()
			}
		}
	}
	return heard, lost
}

// follower is one component following the notices on a connection.
type follower struct {
	adminKey string
	heard    func(wire.RevokedNotice)
	lost     func()
}

// connFollowers are the followers of one connection: one subscription and
// one reconnect handler serve them all (several agents share a
// connection).
type connFollowers struct {
	mu   sync.Mutex
	next int
	all  map[int]follower
	sub  *nats.Subscription
}

var following sync.Map // *nats.Conn → *connFollowers

// FollowRevocations calls heard with every revocation notice published on
// nc whose records open under adminKey (every notice when adminKey is "":
// a market without an anchor, where nothing is checked anyway), and lost
// after every reconnect of nc. It sets nc's reconnect handler, after the
// one nc was made with (a daemon's log line), which it keeps. stop stops
// following.
func FollowRevocations(nc *nats.Conn, adminKey string, heard func(wire.RevokedNotice), lost func()) (stop func(), err error) {
	v, _ := following.LoadOrStore(nc, &connFollowers{all: map[int]follower{}})
	cf := v.(*connFollowers)
	cf.mu.Lock()
	defer cf.mu.Unlock()
	if cf.sub == nil {
		sub, err := nc.Subscribe(wire.RegistryRevoked, cf.deliver)
		if err != nil {
			return nil, err
		}
		cf.sub = sub
		made := nc.Opts.ReconnectedCB
		nc.SetReconnectHandler(func(c *nats.Conn) {
			if made != nil {
				made(c)
			}
			cf.reconnected()
		})
	}
	id := cf.next
	cf.next++
	cf.all[id] = follower{adminKey: adminKey, heard: heard, lost: lost}
	return func() {
		cf.mu.Lock()
		defer cf.mu.Unlock()
		delete(cf.all, id)
		if len(cf.all) == 0 && cf.sub != nil {
			_ = cf.sub.Unsubscribe()
			cf.sub = nil
			following.CompareAndDelete(nc, cf)
		}
	}, nil
}

// deliver hands a notice to every follower that believes it.
func (cf *connFollowers) deliver(m *nats.Msg) {
	var n wire.RevokedNotice
	if wire.Decode(m.Data, &n) != nil {
		return
	}
	for _, f := range cf.snapshot() {
		if f.adminKey != "" && signing.CheckRevokedNotice(&n, f.adminKey) != nil {
			continue
		}
		if f.heard != nil {
			f.heard(n)
		}
	}
}

func (cf *connFollowers) reconnected() {
	for _, f := range cf.snapshot() {
		if f.lost != nil {
			f.lost()
		}
	}
}

func (cf *connFollowers) snapshot() []follower {
	cf.mu.Lock()
	defer cf.mu.Unlock()
	out := make([]follower, 0, len(cf.all))
	for _, f := range cf.all {
		out = append(out, f)
	}
	return out
}

// PublishRevoked announces n on nc (the bank, once it committed the
// revocation).
func PublishRevoked(nc *nats.Conn, n wire.RevokedNotice) error {
	n.V = wire.Version
	data, err := json.Marshal(n)
	if err != nil {
		return err
	}
	return nc.Publish(wire.RegistryRevoked, data)
}
