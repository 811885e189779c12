package service

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// Auditor hears every successful request of an Audit endpoint, after its
// reply was sent. It must not block for long and cannot fail the request:
// a request that moved money has moved it whether or not it is audited.
// (The bank does not use one: it writes each event in the transaction that
// moves the money, see bank/outbox.go.)
type Auditor interface {
	Audit(ev wire.Event)
}

// EventOf is the audit event of a success of the request in served by
// component ("bank"), whose reply's result is res: the endpoint, the time,
// the principal and the signed request exactly as received. An unsigned
// request (a market without identities) is recorded by its subject and body
// under a fresh id; a signed one's id is its signer's key and nonce.
func EventOf(component string, in Incoming, res any) wire.Event {
	ev := wire.Event{Component: component, Op: in.Op, At: time.Now().UTC(), Principal: in.Principal, Request: in.Signed}
	ev.V = wire.Version
	if ev.Request.Key == "" { // unsigned: what it asked, for the record
		ev.Request = wire.SignedRequest{Subject: in.Subject, Body: in.Body}
		ev.ID = "unsigned." + nuid.Next()
	} else {
		ev.ID = wire.EventID(ev.Request.Key, ev.Request.Nonce)
	}
	if data, err := json.Marshal(res); err == nil {
		ev.Result = data
	}
	return ev
}

// JetStream audit limits.
const (
	auditAttempts = 3
	auditTimeout  = 2 * time.Second
	// auditInFlight bounds the publishes under way: past it an event is
	// counted failed at once rather than piling up goroutines while
	// JetStream is away.
	auditInFlight = 4096
	// auditLogEvery spaces the log lines of failures.
	auditLogEvery = 10 * time.Second
)

// JetStreamAudit publishes audit events to the MRM_EVENTS stream on
// wire.EventSubject(component, op), each with the JetStream dedupe header
// Nats-Msg-Id set to its id (signer key and nonce), so a publish retried
// after a lost acknowledgement is stored once. Publishing happens in the
// background; a publish that fails after its retries is counted (Failed),
// reported to OnError and logged (at most one line per ten seconds), and
// never fails the request.
type JetStreamAudit struct {
	js jetstream.JetStream
	// OnError, when set, hears each event that could not be stored (the
	// component's error metric); Logger logs it (nil: not logged).
	OnError func(err error)
	Logger  *slog.Logger

	wg        sync.WaitGroup
	inFlight  atomic.Int64
	published atomic.Int64
	failed    atomic.Int64
	lastLog   atomic.Int64 // Unix nanoseconds of the last failure logged
}

// NewJetStreamAudit audits to nc's JetStream. The stream need not exist
// yet (natsutil.EnsureAssets creates it); until it does, events fail.
func NewJetStreamAudit(nc *nats.Conn) (*JetStreamAudit, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &JetStreamAudit{js: js}, nil
}

// Audit publishes ev in the background.
func (a *JetStreamAudit) Audit(ev wire.Event) {
	data, err := json.Marshal(ev)
	if err != nil {
		a.fail(ev, err)
		return
	}
	if a.inFlight.Add(1) > auditInFlight {
		a.inFlight.Add(-1)
		a.fail(ev, wire.Errorf(wire.ErrUnavailable, "%d audit events already being published", auditInFlight))
		return
	}
	msg := &nats.Msg{Subject: wire.EventSubject(ev.Component, ev.Op), Data: data, Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, ev.ID)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer a.inFlight.Add(-1)
		a.publish(ev, msg)
	}()
}

// publish stores msg, retrying with the same dedupe id.
func (a *JetStreamAudit) publish(ev wire.Event, msg *nats.Msg) {
	var err error
	for attempt := range auditAttempts {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), auditTimeout)
		_, err = a.js.PublishMsg(ctx, msg)
		cancel()
		if err == nil {
			a.published.Add(1)
			return
		}
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrConnectionClosed) {
			break // no stream, or no connection: a retry now would fail alike
		}
	}
	a.fail(ev, err)
}

func (a *JetStreamAudit) fail(ev wire.Event, err error) {
	a.failed.Add(1)
	if a.OnError != nil {
		a.OnError(err)
	}
	// Logged at most once per auditLogEvery (a JetStream outage fails every
	// event); the count says how many.
	now := time.Now().UnixNano()
	last := a.lastLog.Load()
	if now-last < int64(auditLogEvery) || !a.lastLog.CompareAndSwap(last, now) {
		return
	}
	if a.Logger == nil {
		return
	}
	a.Logger.Warn("audit: event not stored", "component", ev.Component, "op", ev.Op, "id", ev.ID, "err", err, "failed_total", a.failed.Load())
}

// Published is how many events were stored.
func (a *JetStreamAudit) Published() int64 { return a.published.Load() }

// Failed is how many events could not be stored.
func (a *JetStreamAudit) Failed() int64 { return a.failed.Load() }

// Wait waits for the publishes under way (a component stopping, a test).
func (a *JetStreamAudit) Wait() { a.wg.Wait() }
