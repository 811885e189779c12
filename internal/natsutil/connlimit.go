package natsutil

// Connections per principal.
//
// nats-server bounds connections per server (max_connections) and per
// account (an account's limits), not per user: a per-user limit was asked
// for (nats-server issue 1552) and never built. Every principal is a user
// of one account (see natsauth), so a stolen key may hold as many
// connections as the server takes, each with the per-connection limits to
// spend. A custom authentication hook could count at admission, but
// nats-server's reload, which runs on every principal added, finds no
// users of its own then and drops every connection.
//
// So a server started here (StartServer with Users, StartNode with
// ConnLimits) watches its own connections: every connPoll it reads how
// many clients it has, and when that grew (or every connRescan anyway) it
// lists them (Connz, with their NKeys) and closes, for every key over its
// limit, its newest connections beyond the limit — the ones a flood
// opened, not the daemon's established one. Such a connection lives at
// most about one connPoll; its client sees its connection closed by the
// server, and the server's owner a log line (one per key per
// closeLogEvery) and the count of Closed. Limits are per server: a
// cluster admits a key on each node up to its limit. A stock nats-server
// given `mrmarket nats config`'s file bounds only its total.

import (
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

const (
	connPoll      = 50 * time.Millisecond
	connRescan    = time.Second
	closeLogEvery = 10 * time.Second
)

// logf logs a closing, on ns's log or the process's.
type logf func(ns *server.Server, format string, args ...any)

// connLimiter holds the keys of one server to their limits.
type connLimiter struct {
	ns   *server.Server
	logf logf

	mu     sync.Mutex
	limits map[string]int // by key; absent or 0: no limit
	closed int64
	logged map[string]time.Time // last closing logged, by key
}

// limiters are the running limiters, by server (Reload, Node.Refresh and
// Closed find them).
var limiters sync.Map // *server.Server → *connLimiter

// limitConnections starts holding ns's keys to limits, until ns shuts down.
func limitConnections(ns *server.Server, limits map[string]int, log logf) {
	l := &connLimiter{ns: ns, logf: log, limits: limits, logged: map[string]time.Time{}}
	limiters.Store(ns, l)
	done := make(chan struct{})
	go func() {
		ns.WaitForShutdown()
		limiters.Delete(ns)
		close(done)
	}()
	go l.run(done)
}

// setConnLimits replaces the limits of ns's keys (none started: nothing).
func setConnLimits(ns *server.Server, limits map[string]int) {
	if l, ok := limiters.Load(ns); ok {
		l := l.(*connLimiter)
		l.mu.Lock()
		l.limits = limits
		l.mu.Unlock()
	}
}

// Closed is how many connections ns closed because their key held its
// limit already.
func Closed(ns *server.Server) int64 {
	l, ok := limiters.Load(ns)
	if !ok {
		return 0
	}
	cl := l.(*connLimiter)
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.closed
}

func (l *connLimiter) run(done <-chan struct{}) {
	t := time.NewTicker(connPoll)
	defer t.Stop()
	seen, scanned := 0, time.Time{}
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			n := l.ns.NumClients()
			if n > seen || now.Sub(scanned) >= connRescan {
				l.scan(n)
				scanned = now
			}
			seen = n
		}
	}
}

// scan closes, for every key over its limit, its newest connections.
func (l *connLimiter) scan(clients int) {
	l.mu.Lock()
	limits := l.limits
	l.mu.Unlock()
	if len(limits) == 0 {
		return
	}
	// Connz lists by connection id, oldest first, and names each
	// connection's NKey with Username.
	cz, err := l.ns.Connz(&server.ConnzOptions{Username: true, Limit: clients + 1024})
	if err != nil {
		return
	}
	held := map[string]int{}
	over := map[string][]uint64{}
	for _, c := range cz.Conns {
		key := c.AuthorizedUser
		limit := limits[key]
		if key == "" || limit <= 0 {
			continue
		}
		if held[key]++; held[key] > limit {
			over[key] = append(over[key], c.Cid)
		}
	}
	for key, cids := range over {
		for _, cid := range cids {
			_ = l.ns.DisconnectClientByID(cid) // gone already: nothing to close
		}
		l.closedFor(key, limits[key], len(cids))
	}
}

// closedFor counts n connections of key closed, and says so now and then.
func (l *connLimiter) closedFor(key string, limit, n int) {
	l.mu.Lock()
	l.closed += int64(n)
	now := time.Now()
	say := now.Sub(l.logged[key]) >= closeLogEvery
	if say {
		l.logged[key] = now
	}
	l.mu.Unlock()
	if say && l.logf != nil {
		l.logf(l.ns, "natsutil: closed %d connection(s) of %s: it may hold %d to this server", n, key, limit)
	}
}
