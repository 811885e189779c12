package service

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// Version is the micro service version of this build's wire contract.
var Version = fmt.Sprintf("%d.0.0", wire.Version)

// Options configures Serve.
type Options struct {
	// Auth authorizes every request; nil allows everything (a zero
	// Authorizer).
	Auth *Authorizer
	// Observe, when set, hears the outcome of every request, refused ones
	// included: the endpoint's name and the reply code ("ok" or a wire
	// error code).
	Observe func(op, code string)
	// Description and Metadata are the service's, in $SRV.INFO.
	Description string
	Metadata    map[string]string
	// Signer, when set, signs every reply (see reply.go); Cert, when set,
	// gives the signer's principal record to attach (nil: none yet).
	Signer *wire.Signer
	Cert   func() *wire.Sealed
}

// Serve serves t on nc as the micro service name at version, until the
// returned service is stopped (or nc closes). Its subscriptions are
// registered with the server when Serve returns.
func Serve(nc *nats.Conn, name, version string, t Table, opts Options) (micro.Service, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	if opts.Auth == nil {
		opts.Auth = &Authorizer{}
	}
	svc, err := micro.AddService(nc, micro.Config{Name: name, Version: version, Description: opts.Description, Metadata: opts.Metadata})
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", name, err)
	}
	for i := range t {
		e := &t[i]
		eo := []micro.EndpointOpt{micro.WithEndpointSubject(e.Subject), micro.WithEndpointMetadata(endpointMetadata(e))}
		if e.Queue == "" {
			eo = append(eo, micro.WithEndpointQueueGroupDisabled())
		} else {
			eo = append(eo, micro.WithEndpointQueueGroup(e.Queue))
		}
		if err := svc.AddEndpoint(e.Name, handler(e, opts), eo...); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("service %s: endpoint %s on %s: %w", name, e.Name, e.Subject, err)
		}
	}
	if err := nc.Flush(); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("service %s: %w", name, err)
	}
	return svc, nil
}

// endpointMetadata tells $SRV.INFO who may call e.
func endpointMetadata(e *Endpoint) map[string]string {
	md := map[string]string{"signed": fmt.Sprint(e.Signed), "request": e.request}
	if e.Signed {
		md["roles"] = strings.Join(e.roles(), ", ")
	}
	return md
}

// handler is the one wrapper of every endpoint: verify, decode, authorize,
// handle (recovering a panic), observe, reply.
func handler(e *Endpoint, opts Options) micro.HandlerFunc {
	return func(r micro.Request) {
		res, err := serveOne(e, opts.Auth, r)
		code := "ok"
		if err != nil {
			code = wire.ToError(err).Code
		}
		if opts.Observe != nil {
			opts.Observe(e.Name, code)
		}
		if r.Reply() == "" {
			return // a publish, not a request: nobody to answer
		}
		body := wire.EncodeReply(res, err)
		ro := replyOpts(opts, r, body)
		if err != nil {
			_ = r.Error(statusOf(code), describe(err), body, ro...) // the requester may be gone: nothing to do
			return
		}
		_ = r.Respond(body, ro...)
	}
}

func serveOne(e *Endpoint, auth *Authorizer, r micro.Request) (res any, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, wire.Errorf(wire.ErrInternal, "handler panic: %v", p)
		}
	}()
	caller, err := auth.verify(r.Subject(), nats.Header(r.Headers()), r.Data())
	if err != nil {
		return nil, err
	}
	req, err := e.decode(r.Data())
	if err != nil {
		return nil, err
	}
	in := &Incoming{Subject: r.Subject(), Reply: r.Reply(), Caller: caller}
	in.Signed, _ = wire.SignedRequestOf(r.Subject(), nats.Header(r.Headers()), r.Data())
	ctx, cancel := context.WithTimeout(context.Background(), wire.DefaultTimeout)
	defer cancel()
	ctx = withIncoming(ctx, in)
	if err := auth.Authorize(ctx, e, caller, req); err != nil {
		return nil, err
	}
	return e.handle(ctx, req)
}

// statusOf is micro's error code header of a wire code: HTTP's numbers, as
// micro's tools expect. Clients read the wire code from the body.
func statusOf(code string) string {
	switch code {
	case wire.CodeBadRequest:
		return "400"
	case wire.CodeInsufficient:
		return "402"
	case wire.CodeForbidden:
		return "403"
	case wire.CodeNotFound:
		return "404"
	case wire.CodeConflict:
		return "409"
	case wire.CodeExpired:
		return "410"
	case wire.CodeUnavailable:
		return "503"
	default:
		return "500"
	}
}

// maxDescription bounds micro's error header: the full message is in the body.
const maxDescription = 200

// describe is err's message as a header value: one line, bounded.
func describe(err error) string {
	d := strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, wire.ToError(err).Message)
	if len(d) > maxDescription {
		d = strings.ToValidUTF8(d[:maxDescription], "") + "…"
	}
	if strings.TrimSpace(d) == "" {
		return "error"
	}
	return d
}
