package wire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultTimeout bounds a request when the caller's context has no deadline.
const DefaultTimeout = 5 * time.Second

// Call sends req (its version is set to Version) to subject and decodes the
// reply's result into res. A refusal comes back as a *Error (match it with
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

// Request is the constraint Serve needs of a request type: a pointer to a
// struct that validates itself.
type Request[T any] interface {
	*T
	Validator
}

// Serve subscribes handle to subject in queue group queue (none if empty).
// Each message is decoded strictly into a fresh request; a bad one is
// answered with a bad_request error and never reaches handle. handle's
// result or error is sent back as a reply envelope. A panic in handle is
// answered as an internal error instead of killing the process.
func Serve[T any, PT Request[T]](nc *nats.Conn, subject, queue string, handle func(context.Context, PT) (any, error)) (*nats.Subscription, error) {
	return ServeObserved(nc, subject, queue, nil, handle)
}

// ServeObserved is Serve that also reports the outcome of every request,
// refused ones included, to observe with the reply code ("ok" or an error
// code), so metrics count what handlers never see.
func ServeObserved[T any, PT Request[T]](nc *nats.Conn, subject, queue string, observe func(code string), handle func(context.Context, PT) (any, error)) (*nats.Subscription, error) {
	return ServeSigned(nc, subject, queue, observe, func(ctx context.Context, req PT, _ Caller) (any, error) { return handle(ctx, req) })
}

// ServeSigned is ServeObserved for requests that may be signed: the
// signature is checked (a bad or stale one is refused before decoding) and
// the handler gets the Caller, zero for an unsigned request. Replays and
// roles are the handler's to check.
func ServeSigned[T any, PT Request[T]](nc *nats.Conn, subject, queue string, observe func(code string), handle func(context.Context, PT, Caller) (any, error)) (*nats.Subscription, error) {
	cb := func(m *nats.Msg) {
		res, err := serveOne(m, handle)
		if observe != nil {
			code := "ok"
			if err != nil {
				code = ToError(err).Code
			}
			observe(code)
		}
		if m.Reply == "" {
			return
		}
		_ = m.Respond(EncodeReply(res, err)) // the requester may be gone: nothing to do
	}
	var (
		sub *nats.Subscription
		err error
	)
	if queue == "" {
		sub, err = nc.Subscribe(subject, cb)
	} else {
		sub, err = nc.QueueSubscribe(subject, queue, cb)
	}
	if err != nil {
		return nil, fmt.Errorf("subscribing to %s: %w", subject, err)
	}
	return sub, nil
}

func serveOne[T any, PT Request[T]](m *nats.Msg, handle func(context.Context, PT, Caller) (any, error)) (res any, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, Errorf(ErrInternal, "handler panic: %v", p)
		}
	}()
	caller, err := VerifyMsg(m, time.Now())
	if err != nil {
		return nil, err
	}
	req := PT(new(T))
	if err := Decode(m.Data, req); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	return handle(ctx, req, caller)
}
