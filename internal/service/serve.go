package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
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
	// included: the endpoint's name, the reply code ("ok" or a wire error
	// code) and how long the request took from its arrival until it was
	// answered (queued and handled; the reply is sent right after). It is the one place every endpoint's requests
	// are measured: the metrics' counts and latency histograms.
	Observe func(op, code string, took time.Duration)
	// Logger hears every request refused or failed, one line each (who,
	// what, the code and why), and, unless Slow is set, every slow one;
	// LogAttrs are added to each line (an agent's host). nil: nothing is
	// logged.
	Logger   *slog.Logger
	LogAttrs []any
	// Description and Metadata are the service's, in $SRV.INFO.
	Description string
	Metadata    map[string]string
	// Fair, when set, queues requests per principal and serves them in turn
	// with a pool of workers (see Fair); nil serves each endpoint's
	// requests one at a time in its subscription's goroutine, in arrival
	// order, whoever sent them.
	Fair *Fair
	// Audit, when set, hears every successful request of an Audit endpoint
	// (see Auditor, and JetStreamAudit for the MRM_EVENTS stream).
	Audit Auditor
	// Signer, when set, signs every reply (see reply.go); Cert, when set,
	// gives the signer's principal record to attach (nil: none yet).
	Signer *signing.Signer
	Cert   func() *wire.Sealed
	// Slow, when set, hears every request answered SlowRequest or more
	// after it arrived: the endpoint, whose queue it waited in (see
	// fairKey), how long it waited there and how long its handler ran. A
	// daemon logs them: where a request's time goes is what an operator
	// needs when clients time out. nil: they are logged on Logger.
	Slow func(op, from string, waited, ran time.Duration)
}

// SlowRequest is how long a request may take, queued and handled, before
// Options.Slow hears of it: half a client's usual attempt.
const SlowRequest = time.Second

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
	if opts.Slow == nil && opts.Logger != nil {
		opts.Slow = LogSlow(opts.Logger, component(name), opts.LogAttrs...)
	}
	cfg := micro.Config{Name: name, Version: version, Description: opts.Description, Metadata: opts.Metadata}
	var sched *scheduler
	if opts.Fair != nil {
		sched = newScheduler(*opts.Fair, t)
		cfg.StatsHandler = sched.statsOf
	}
	svc, err := micro.AddService(nc, cfg)
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
		if err := svc.AddEndpoint(e.Name, handler(nc, name, e, opts, sched), eo...); err != nil {
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
	if e.Replayable {
		md["replayable"] = "true"
	}
	if e.Audit {
		md["audit"] = "true"
	}
	if e.Bulk {
		md["bulk"] = "true"
	}
	return md
}

// handler is the one wrapper of every endpoint: (bound the headers, queue
// by connection, verify, queue by signer,) verify, decode, authorize,
// handle (recovering a panic), observe, reply, audit. Without a scheduler
// it serves in micro's goroutine. With one, micro's goroutine only bounds
// the headers and queues the request by the connection it came from (its
// reply inbox: sched.checks); a worker checks its signature there and
// queues it by the key that signed it (sched) — a request with oversized
// headers or a bad signature is refused before it takes a place in any
// signer's queue — and another worker serves it. So neither a principal's
// flood nor a flood of forgeries naming a principal holds up the
// subscription every principal's requests to the endpoint arrive on, and
// the signature checks are spread over the workers. A request over its
// connection's or its signer's bound is refused busy, at once.
func handler(nc *nats.Conn, service string, e *Endpoint, opts Options, sched *scheduler) micro.HandlerFunc {
	var logged atomic.Int64 // when a refusal before queueing was last logged (Unix ns)
	refuse := func(r request, w responder, err error, arrived time.Time) {
		o := opts
		if now, last := time.Now().UnixNano(), logged.Load(); now-last < int64(refusedLogEvery) || !logged.CompareAndSwap(last, now) {
			o.Logger = nil // counted (Observe), not logged: a flood of forgeries is what arrives here
		}
		if errors.Is(err, signing.ErrBadSignature) {
			// Nobody signed it: its refusal is not signed either (as a
			// busy one), so a forgery costs the service one check, not
			// two signatures.
			o.Signer = nil
		}
		serveAndReply(service, e, o, r, w, err, "", arrived)
	}
	busy := func(w responder, reply string, arrived time.Time) {
		// Refused at once, as cheaply as can be: the flood is what arrives
		// here.
		sched.stats[e.Name].Busy.Add(1)
		if opts.Observe != nil {
			opts.Observe(e.Name, wire.CodeUnavailable, time.Since(arrived))
		}
		if reply != "" {
			_ = w.Error(busyStatus, busyDescription, busyBody)
		}
	}
	return func(r micro.Request) {
		arrived := time.Now()
		header := nats.Header(r.Headers())
		if err := checkHeaders(header); err != nil {
			refuse(r, r, err, arrived)
			return
		}
		if sched == nil {
			serveAndReply(service, e, opts, r, r, nil, "", arrived)
			return
		}
		// The workers must not touch r once this handler returned: copy
		// what they need.
		in := requestCopy{subject: r.Subject(), reply: r.Reply(), header: header, data: r.Data()}
		reply := queuedReply{nc: nc, reply: in.reply, stats: sched.stats[e.Name]}
		order := header.Get(wire.HeaderOrder)
		patience := patienceOf(header)
		expired := func() bool {
			if !given(arrived, patience) {
				return false
			}
			sched.stats[e.Name].Expired.Add(1)
			if opts.Observe != nil {
				opts.Observe(e.Name, wire.CodeUnavailable, time.Since(arrived))
			}
			return true
		}
		check := func() {
			if expired() {
				return
			}
			// Only the ed25519 check here (whois is the serving worker's):
			// it is what tells the signer's queue from a queue a forger
			// names.
			caller, err := opts.Auth.verify(in.subject, in.header, in.data)
			if err != nil {
				refuse(in, reply, err, arrived)
				return
			}
			in.caller, in.verified = caller, true
			key := fairKey(caller.Key, in.reply)
			serve := func() {
				if expired() {
					return
				}
				serveAndReply(service, e, opts, in, reply, nil, key, arrived)
			}
			if !sched.submit(key, e, order, serve) {
				busy(reply, in.reply, arrived)
			}
		}
		if !sched.checks.submit(fairKey("", in.reply), e, order, check) {
			busy(r, in.reply, arrived)
		}
	}
}

// patienceOf is how long the sender of a request waits for its answer
// (wire.HeaderPatience); 0: not said, as long as it takes.
func patienceOf(h nats.Header) time.Duration {
	ms, err := strconv.ParseInt(h.Get(wire.HeaderPatience), 10, 64)
	if err != nil || ms <= 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

// given says the sender of a request that arrived at arrived has given up
// on it: its patience ran out while the request waited in the queues. It
// is dropped unanswered, its work not done: under overload, a request
// served after its sender gave up only delays those still awaited, and
// its retry (rpc.Retried) is already queued behind it.
func given(arrived time.Time, patience time.Duration) bool {
	return patience > 0 && time.Since(arrived) > patience
}

// refusedLogEvery spaces the log lines of an endpoint's refusals at once
// (bad headers, bad signatures); the metrics count every one.
const refusedLogEvery = time.Second

// Bounds of the headers a principal controls: an order key is what the
// broker sends (a plan id, at most 200 characters), and a signed request's
// headers together are a few hundred bytes. A request past them is refused
// at once: an order key becomes a queue's key, and a queued request keeps
// its headers until it is served.
const (
	maxOrderKey    = 200
	maxHeaderBytes = 4096
)

// checkHeaders refuses headers past the bounds.
func checkHeaders(h nats.Header) error {
	if len(h.Get(wire.HeaderOrder)) > maxOrderKey {
		return wire.Errorf(wire.ErrBadRequest, "header %s longer than %d bytes", wire.HeaderOrder, maxOrderKey)
	}
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4 // "k: v\r\n"
		}
	}
	if n > maxHeaderBytes {
		return wire.Errorf(wire.ErrBadRequest, "headers of %d bytes, more than %d", n, maxHeaderBytes)
	}
	return nil
}

// request is what serving needs of a request: micro.Request, or a copy of
// one for a worker.
type request interface {
	Subject() string
	Reply() string
	Headers() micro.Headers
	Data() []byte
}

// requestCopy is a request queued for the workers, its signature's
// signer once verified (caller, when verified).
type requestCopy struct {
	subject, reply string
	header         nats.Header
	data           []byte
	caller         signing.Caller
	verified       bool
}

func (r requestCopy) Subject() string        { return r.subject }
func (r requestCopy) Reply() string          { return r.reply }
func (r requestCopy) Headers() micro.Headers { return micro.Headers(r.header) }
func (r requestCopy) Data() []byte           { return r.data }

// responder answers a request: micro.Request, or queuedReply from a worker.
type responder interface {
	Respond(data []byte, opts ...micro.RespondOpt) error
	Error(code, description string, data []byte, opts ...micro.RespondOpt) error
}

// serveAndReply serves r (unless refused already: refused), reports the
// outcome, replies through w and audits a success. r arrived at arrived
// and was queued by from (empty: not queued).
func serveAndReply(service string, e *Endpoint, opts Options, r request, w responder, refused error, from string, arrived time.Time) {
	start := time.Now()
	if opts.Slow != nil {
		defer func() {
			if end := time.Now(); end.Sub(arrived) >= SlowRequest {
				opts.Slow(e.Name, from, start.Sub(arrived), end.Sub(start))
			}
		}()
	}
	var res any
	var in *Incoming
	err := refused
	if err == nil {
		res, in, err = serveOne(e, opts.Auth, r)
	}
	code := "ok"
	if err != nil {
		code = wire.ToError(err).Code
	}
	if opts.Observe != nil {
		// Before the reply, so whoever got the reply finds it counted.
		opts.Observe(e.Name, code, time.Since(arrived))
	}
	switch {
	case e.Audit:
		logMoney(opts, service, e, r, in, code, err)
	case err != nil:
		logRefused(opts, service, e, r, in, code, err)
	}
	if r.Reply() != "" { // else a publish, not a request: nobody to answer
		body := wire.EncodeReply(res, err)
		ro := replyOpts(opts, r, body)
		if err != nil {
			_ = w.Error(statusOf(code), describe(err), body, ro...) // the requester may be gone: nothing to do
		} else {
			_ = w.Respond(body, ro...)
		}
	}

	if err == nil && e.Audit && opts.Audit != nil && in != nil {
		opts.Audit.Audit(EventOf(component(service), *in, res))
	}
}

func serveOne(e *Endpoint, auth *Authorizer, r request) (res any, in *Incoming, err error) {
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, wire.Errorf(wire.ErrInternal, "handler panic: %v", p)
		}
	}()
	var caller signing.Caller
	if c, ok := r.(requestCopy); ok && c.verified {
		caller = c.caller // verified before it was queued
	} else if caller, err = auth.verify(r.Subject(), nats.Header(r.Headers()), r.Data()); err != nil {
		return nil, nil, err
	}
	req, err := e.decode(r.Data())
	if err != nil {
		return nil, nil, err
	}
	in = &Incoming{Op: e.Name, Subject: r.Subject(), Body: r.Data(), Reply: r.Reply(), Caller: caller}
	in.Signed, _ = signing.SignedRequestOf(r.Subject(), nats.Header(r.Headers()), r.Data())
	ctx, cancel := context.WithTimeout(context.Background(), rpc.DefaultTimeout)
	defer cancel()
	ctx = withIncoming(ctx, in)
	if err := auth.Authorize(ctx, e, caller, req); err != nil {
		return nil, in, err
	}
	res, err = e.handle(ctx, req)
	return res, in, err
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

// component is the name a service logs and audits under: "mrm-bank" is
// the bank.
func component(service string) string { return strings.TrimPrefix(service, "mrm-") }

// logRefused is the one line of a request refused or failed: who sent it
// (the principal when resolved, else the signing key, else unsigned),
// where, the reply code and why. A refusal the request earned (forbidden,
// not found, …) is information; one the service could not help (internal,
// unavailable) is a warning.
func logRefused(opts Options, service string, e *Endpoint, r request, in *Incoming, code string, err error) {
	if opts.Logger == nil {
		return
	}
	level := slog.LevelInfo
	if code == wire.CodeInternal || code == wire.CodeUnavailable {
		level = slog.LevelWarn
	}
	opts.Logger.Log(context.Background(), level, component(service)+": request refused", append([]any{"op", e.Name, "subject", r.Subject(),
		"principal", principalOf(in, r), "code", code, "err", err}, opts.LogAttrs...)...)
}

// logMoney is the one line of a request that moves money (an Audit
// endpoint's), whatever came of it: who, the op, the request's id and
// amount, and the result — "ok", or the code and why, as logRefused says
// it. An operator follows the money in these lines, one per request served
// (a retry is served again, and logged again, with the same id).
func logMoney(opts Options, service string, e *Endpoint, r request, in *Incoming, code string, err error) {
	if opts.Logger == nil {
		return
	}
	level := slog.LevelInfo
	switch {
	case code == wire.CodeInternal || code == wire.CodeUnavailable:
		level = slog.LevelWarn
	case err == nil && in != nil && in.Principal.Role == wire.RoleAgent:
		level = slog.LevelDebug // every host's captures, every tick: their sums are in the metrics
	}
	if !opts.Logger.Enabled(context.Background(), level) {
		return // nothing decoded for a line nobody reads
	}
	attrs := []any{"principal", principalOf(in, r), "op", e.Name}
	var body map[string]json.RawMessage
	_ = json.Unmarshal(r.Data(), &body) // a body that does not decode was refused bad_request: the line says so
	for _, k := range moneyFields {
		if v, ok := body[k]; ok {
			var x any
			if json.Unmarshal(v, &x) == nil {
				attrs = append(attrs, k, x)
			}
		}
	}
	attrs = append(attrs, "result", code)
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	opts.Logger.Log(context.Background(), level, component(service)+": "+e.Name, append(attrs, opts.LogAttrs...)...)
}

// moneyFields are the request fields a money line shows, when there: the
// id, whose money, and how much.
var moneyFields = []string{"id", "user", "from", "to", "host", "plan", "hold", "amount_micro", "budget_micro", "more_micro", "less_micro"}

// principalOf names who sent r, as far as serving it got.
func principalOf(in *Incoming, r request) string {
	switch {
	case in != nil && in.Principal.Name != "":
		return in.Principal.Name + " (" + in.Principal.Role + ")"
	case in != nil && in.Caller.Key != "":
		return in.Caller.Key
	}
	if key := nats.Header(r.Headers()).Get(signing.HeaderKey); key != "" {
		return key
	}
	return "unsigned"
}

// LogSlow is an Options.Slow that logs each slow request as one warning
// line of l (nil: nothing is logged), prefixed by component and with attrs.
func LogSlow(l *slog.Logger, component string, attrs ...any) func(op, from string, waited, ran time.Duration) {
	return func(op, from string, waited, ran time.Duration) {
		if l == nil {
			return
		}
		l.Warn(component+": slow request", append([]any{"op", op, "from", from,
			"waited", waited.Round(time.Millisecond), "ran", ran.Round(time.Millisecond)}, attrs...)...)
	}
}
