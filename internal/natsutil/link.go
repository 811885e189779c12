package natsutil

import (
	"context"
	"errors"
	"sync"

	"github.com/nats-io/nats.go"
)

// ErrLinkLost ends a context of WhileConnected whose connection was lost.
var ErrLinkLost = errors.New("the connection to NATS was lost while it waited")

// WhileConnected returns a context that ends with ctx, and also as soon as
// nc loses the server it is connected to (a reconnect begins, or nc
// closes: nothing in flight will be answered either way). What is in
// flight on nc then — a request or its answer, a
// JetStream write awaiting its acknowledgement — may have gone down with
// that server, and no answer to it will come: waiting out the attempt only
// delays the try that goes out on the next connection. A request answered
// unavailable at once can be sent again at once (it is idempotent by its
// id, or it would not be retried at all). LinkLost says whether the context
// ended for a reconnect; a close ends it with nats.ErrConnectionClosed (no
// next connection: a try sent again would fail).
func WhileConnected(ctx context.Context, nc *nats.Conn) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stretch := linkOf(nc).current()
	stop := context.AfterFunc(stretch, func() { cancel(context.Cause(stretch)) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// LinkLost says whether ctx, from WhileConnected, ended because its
// connection was lost and a reconnect began.
func LinkLost(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), ErrLinkLost)
}

// link is one connection's current stretch of being connected to one
// server: its context ends when that stretch does, its cause why
// (ErrLinkLost, or nats.ErrConnectionClosed), and a new one begins.
type link struct {
	mu      sync.Mutex
	stretch context.Context
	end     context.CancelCauseFunc
}

// links is each connection's link, watched from its first request until
// it closes.
var links sync.Map // *nats.Conn → *link

func linkOf(nc *nats.Conn) *link {
	if v, ok := links.Load(nc); ok {
		return v.(*link)
	}
	l := &link{}
	l.stretch, l.end = context.WithCancelCause(context.Background())
	v, loaded := links.LoadOrStore(nc, l)
	if loaded {
		l.end(nil)
		return v.(*link)
	}
	events := nc.StatusChanged(nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED)
	if nc.IsClosed() { // closed before the listener was there: nothing in flight can be answered
		nc.RemoveStatusListener(events)
		l.end(nats.ErrConnectionClosed)
		links.Delete(nc)
		return l
	}
	go l.watch(nc, events)
	return l
}

// watch ends the link's stretch at each loss of the connection, and stops
// at its close.
func (l *link) watch(nc *nats.Conn, events chan nats.Status) {
	for s := range events {
		l.mu.Lock()
		if s == nats.RECONNECTING {
			l.end(ErrLinkLost)
			l.stretch, l.end = context.WithCancelCause(context.Background())
		} else {
			l.end(nats.ErrConnectionClosed) // DISCONNECTED comes only before CLOSED
		}
		l.mu.Unlock()
		if s == nats.CLOSED {
			nc.RemoveStatusListener(events)
			links.Delete(nc)
			return
		}
	}
}

// current is the context of the connection's present stretch.
func (l *link) current() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stretch
}
