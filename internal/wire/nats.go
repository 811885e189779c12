package wire

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultTimeout bounds a request when the caller's context has no deadline.
const DefaultTimeout = 5 * time.Second

// Call sends req to subject and decodes the reply's result into res. A refusal comes back as a *Error (match it with
// errors.Is against the Err sentinels); no responder or a time-out is
// ErrUnavailable.
func Call(ctx context.Context, nc *nats.Conn, subject string, req any, res any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return Errorf(ErrBadRequest, "encoding request for %s: %v", subject, err)
	}
	return CallRaw(ctx, nc, subject, body, res)
}

// CallRaw is Call with a request body that is already encoded.
func CallRaw(ctx context.Context, nc *nats.Conn, subject string, body []byte, res any) error {
	msg := nats.NewMsg(subject)
	msg.Data = body
	return CallMsg(ctx, nc, msg, res)
}

// CallMsg sends a prepared request message (a signed one, say) and decodes
// the reply like Call.
func CallMsg(ctx context.Context, nc *nats.Conn, req *nats.Msg, res any) error {
	subject := req.Subject
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	msg, err := nc.RequestMsgWithContext(ctx, req)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return Errorf(ErrUnavailable, "nothing answers on %s (is the market running? try `mrmarket up`)", subject)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return Errorf(ErrUnavailable, "no answer on %s in time", subject)
	case err != nil:
		return Errorf(ErrUnavailable, "request on %s: %v", subject, err)
	}
	return DecodeReply(msg.Data, res)
}

// Message is a request of this contract: every one embeds Versioned, whose
// stamp sets the version Do sends.
type Message interface{ stamp() }

// Stamp sets req's version to the one this build speaks, as Do does, for
// a caller that sends a request itself.
func Stamp(req Message) { req.stamp() }

// stamp sets the message's version to the one this build speaks.
func (v *Versioned) stamp() { v.V = Version }

// Do is the one typed call path of the clients: it sets req's version,
// signs it with signer (unsigned when nil), sends it to subject and decodes
// the reply's result as a Rep.
func Do[Rep any](ctx context.Context, nc *nats.Conn, signer *Signer, subject string, req Message) (Rep, error) {
	req.stamp()
	var rep Rep
	err := CallAs(ctx, nc, signer, subject, req, &rep)
	return rep, err
}

// As is whom a client signs a request as; the zero As sends it unsigned.
type As struct{ Role, Name string }

// DoAs is Do signed as who: with fixed when set, else with the
// credentials keys holds for who (SignerFor) — the path of every client
// that acts for several principals (bank.Client, broker.Client).
func DoAs[Rep any](ctx context.Context, nc *nats.Conn, fixed *Signer, keys Keyring, who As, subject string, req Message) (Rep, error) {
	var s *Signer
	if who != (As{}) {
		var err error
		if s, err = SignerFor(fixed, keys, who.Role, who.Name); err != nil {
			var zero Rep
			return zero, err
		}
	}
	return Do[Rep](ctx, nc, s, subject, req)
}
