package rpc

import (
	"context"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// trusted sends m (signed or not) and waits for a reply that trust
// believes (see signing.VerifyReply), ignoring any other reply until ctx's
// deadline (DefaultTimeout if none); then it decodes the reply like plain.
// A time-out after refused replies says why they were refused
// (wire.ErrUnavailable). onRefused, when set, hears each reply ignored.
func trusted(ctx context.Context, nc *nats.Conn, m *nats.Msg, trust signing.ReplyTrust, onRefused func(error), res any) error {
	subject := m.Subject
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	inbox, replies, done, err := trustedMux(nc)
	if err != nil {
		return wire.Errorf(wire.ErrUnavailable, "request on %s: %v", subject, err)
	}
	defer done()
	m.Reply = inbox
	nonce := ""
	if m.Header != nil {
		nonce = m.Header.Get(signing.HeaderNonce)
	}
	if err := nc.PublishMsg(m); err != nil {
		return wire.Errorf(wire.ErrUnavailable, "request on %s: %v", subject, err)
	}
	var refused error
	for {
		var r *nats.Msg
		select {
		case r = <-replies:
		case <-ctx.Done():
			if refused != nil {
				return wire.Errorf(wire.ErrUnavailable, "no trusted answer on %s in time (ignored: %v)", subject, refused)
			}
			return wire.Errorf(wire.ErrUnavailable, "no answer on %s in time", subject)
		}
		if len(r.Data) == 0 && r.Header.Get("Status") == "503" {
			return wire.Errorf(wire.ErrUnavailable, "nothing answers on %s (is the market running? try `mrmarket up`)", subject)
		}
		key, cert, err := signing.VerifyReply(r, inbox, nonce)
		if err == nil {
			err = trust(key, cert)
		}
		if err != nil {
			refused = err
			if onRefused != nil {
				onRefused(err)
			}
			continue
		}
		return wire.DecodeReply(r.Data, res)
	}
}

// The trusted calls of a connection share one subscription on a wildcard
// inbox (as nats.go's own requests do), each call its own token and
// channel: no subscription per call on the hot paths (captures, bids).
type replyMux struct {
	mu     sync.Mutex
	prefix string // "<inbox>." — a call's inbox is prefix + token
	calls  map[string]chan *nats.Msg
	next   uint64
	sub    *nats.Subscription
}

// replyMuxes is each connection's mux.
var replyMuxes sync.Map // *nats.Conn → *replyMux

// maxRepliesPerCall bounds what one call buffers: forged replies beyond it
// are dropped (the call still takes a trusted one arriving later, as long
// as it waits).
const maxRepliesPerCall = 16

// trustedMux registers a call on nc's mux: its inbox, the channel of the
// replies to it, and done to unregister.
func trustedMux(nc *nats.Conn) (string, <-chan *nats.Msg, func(), error) {
	v, _ := replyMuxes.LoadOrStore(nc, &replyMux{})
	mux := v.(*replyMux)
	mux.mu.Lock()
	defer mux.mu.Unlock()
	if mux.sub == nil || !mux.sub.IsValid() {
		mux.prefix = nc.NewInbox() + "."
		mux.calls = map[string]chan *nats.Msg{}
		sub, err := nc.Subscribe(mux.prefix+"*", mux.deliver)
		if err != nil {
			return "", nil, nil, err
		}
		mux.sub = sub
	}
	mux.next++
	token := strconv.FormatUint(mux.next, 36)
	ch := make(chan *nats.Msg, maxRepliesPerCall)
	mux.calls[token] = ch
	return mux.prefix + token, ch, func() {
		mux.mu.Lock()
		delete(mux.calls, token)
		mux.mu.Unlock()
	}, nil
}

// deliver hands a reply to its call, if it still waits and has room.
func (mux *replyMux) deliver(m *nats.Msg) {
	mux.mu.Lock()
	ch, ok := mux.calls[strings.TrimPrefix(m.Subject, mux.prefix)]
	mux.mu.Unlock()
	if !ok {
		return
	}
	select {
	case ch <- m:
	default:
	}
}
