// Package rpc is mrmarket's one client call: Request sends a request of the
// wire contract on a subject and decodes the reply's result. What varies
// from one caller to another is said by options, not by another function:
// who signs it (SignedBy, SignedAs), whose answer counts (Trusted), how a
// try that got no answer is made again (Retried), and, for tests and the
// attack suite, a request sent verbatim (Verbatim).
//
// A request is stamped with this build's version, encoded as JSON and, when
// a signer is named, signed (package signing: NKeys over subject, time,
// nonce and body, in headers; the body untouched); a verbatim one goes as
// it is. A refusal comes back as a *wire.Error, to match with errors.Is
// against the wire sentinels; no responder, or no answer in time, is
// wire.ErrUnavailable, worded so that NoAnswer and TimedOut can tell the
// two apart. A try whose connection loses its NATS server before the
// answer comes ends then, not at its deadline (natsutil.WhileConnected):
// unavailable, as a try that timed out, so it is sent again at once over
// the next connection.
//
// A trusted call waits for a reply signed by a principal its ReplyTrust
// believes and ignores any other, so whoever can publish on its inbox
// cannot answer in the service's place. The trusted calls of a connection
// share one subscription (trusted.go): no subscription per call on the
// hot paths (captures, bids).
package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/retry"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// DefaultTimeout bounds a request when the caller's context has no
// deadline; a service gives its handlers as long.
const DefaultTimeout = 5 * time.Second

// Tries bounds a client's successive tries of one request (Backoff(n) is
// try n's): the first short, so a request lost with a dead replica costs
// little, and each after one that got no answer longer, up to
// DefaultTimeout, the time a service gives its handler, so a live but slow
// answer (a large statement or ledger) still comes. The CLI asks so, and
// so does the fault test's ledger check.
var Tries = retry.Options{InitialBackoff: 2 * time.Second, Multiplier: 1.5, MaxBackoff: DefaultTimeout}

// Option says how Request sends its request.
type Option func(*call)

// call is a request's options.
type call struct {
	signer    *signing.Signer
	as        *signedAs
	headers   nats.Header
	verbatim  *nats.Msg
	trust     signing.ReplyTrust
	onRefused func(error)
	attempt   time.Duration
	again     func(error) bool
}

type signedAs struct {
	who   As
	fixed *signing.Signer
	keys  signing.Keyring
}

// As is whom a request is signed as: a principal's role and name, whose
// credentials a keyring holds. The zero As sends it unsigned.
type As struct{ Role, Name string }

// SignedBy signs the request with s; nil sends it unsigned.
func SignedBy(s *signing.Signer) Option { return func(c *call) { c.signer, c.as = s, nil } }

// SignedAs signs the request as who: with fixed when set (a daemon signs
// as itself whoever it acts for), else with the credentials keys holds
// for who (signing.SignerFor). The zero As sends it unsigned. It is the
// option of the clients that act for several principals (bank.Client,
// broker.Client).
func SignedAs(who As, fixed *signing.Signer, keys signing.Keyring) Option {
	return func(c *call) { c.signer, c.as = nil, &signedAs{who: who, fixed: fixed, keys: keys} }
}

// Header sets a header of the request beside the signing ones: an
// unsigned one, such as wire.HeaderOrder.
func Header(key, value string) Option {
	return func(c *call) {
		if c.headers == nil {
			c.headers = nats.Header{}
		}
		c.headers.Set(key, value)
	}
}

// Trusted makes the answer count only when it is signed and trust
// believes its signer: any other reply is ignored (onRefused, when set,
// hears why) and, if no trusted one comes in time, the call fails as
// unavailable. A nil trust believes any answer.
func Trusted(trust signing.ReplyTrust, onRefused func(error)) Option {
	return func(c *call) { c.trust, c.onRefused = trust, onRefused }
}

// Verbatim sends m's headers and body on the subject as they are, in
// place of the request encoded and signed: a request replayed, forged or
// malformed on purpose (tests, the attack suite). req may be nil.
func Verbatim(m *nats.Msg) Option { return func(c *call) { c.verbatim = m } }

// Request sends req to subject as opts say and decodes the reply's result
// as a Rep; Rep struct{} wants no result and decodes none.
func Request[Rep any](ctx context.Context, nc *nats.Conn, subject string, req wire.Message, opts ...Option) (Rep, error) {
	var c call
	for _, o := range opts {
		o(&c)
	}
	var rep Rep
	var res any = &rep
	if _, none := any(rep).(struct{}); none {
		res = nil
	}
	msg, err := c.message(subject, req)
	if err != nil {
		return rep, err
	}
	err = c.tries(ctx, func(ctx context.Context) error {
		m, err := msg()
		if err != nil {
			return err
		}
		if d, ok := ctx.Deadline(); ok && c.verbatim == nil {
			if m.Header == nil {
				m.Header = nats.Header{}
			}
			m.Header.Set(wire.HeaderPatience, strconv.FormatInt(time.Until(d).Milliseconds(), 10))
		}
		ctx, cancel := natsutil.WhileConnected(ctx, nc)
		defer cancel()
		if c.trust != nil {
			err = trusted(ctx, nc, m, c.trust, c.onRefused, res)
		} else {
			err = plain(ctx, nc, m, res)
		}
		if err != nil && natsutil.LinkLost(ctx) {
			return wire.Errorf(wire.ErrUnavailable, "no answer on %s: %v", subject, natsutil.ErrLinkLost)
		}
		return err
	})
	return rep, err
}

// message returns what makes the message of each try: req encoded once,
// signed afresh by every try (a new time and nonce), or the verbatim one.
func (c *call) message(subject string, req wire.Message) (func() (*nats.Msg, error), error) {
	if c.verbatim != nil {
		return func() (*nats.Msg, error) {
			return &nats.Msg{Subject: subject, Header: c.verbatim.Header, Data: c.verbatim.Data}, nil
		}, nil
	}
	if req == nil {
		return nil, wire.Errorf(wire.ErrBadRequest, "no request for %s", subject)
	}
	signer := c.signer
	if c.as != nil && c.as.who != (As{}) {
		var err error
		if signer, err = signing.SignerFor(c.as.fixed, c.as.keys, c.as.who.Role, c.as.who.Name); err != nil {
			return nil, err
		}
	}
	wire.Stamp(req)
	body, err := json.Marshal(req)
	if err != nil {
		return nil, wire.Errorf(wire.ErrBadRequest, "encoding request for %s: %v", subject, err)
	}
	return func() (*nats.Msg, error) {
		msg := nats.NewMsg(subject)
		msg.Data = body
		if signer != nil {
			var err error
			if msg, err = signer.Sign(subject, body); err != nil {
				return nil, wire.Errorf(wire.ErrInternal, "signing request for %s: %v", subject, err)
			}
		}
		for k, v := range c.headers {
			msg.Header[k] = v
		}
		return msg, nil
	}, nil
}

// plain sends m and decodes the first reply into res.
func plain(ctx context.Context, nc *nats.Conn, m *nats.Msg, res any) error {
	subject := m.Subject
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	msg, err := nc.RequestMsgWithContext(ctx, m)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return wire.Errorf(wire.ErrUnavailable, "nothing answers on %s (is the market running? try `mrmarket up`)", subject)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return wire.Errorf(wire.ErrUnavailable, "no answer on %s in time", subject)
	case err != nil:
		return wire.Errorf(wire.ErrUnavailable, "request on %s: %v", subject, err)
	}
	return wire.DecodeReply(msg.Data, res)
}
