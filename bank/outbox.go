package bank

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/retry"
	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// The audit outbox. A request served over NATS that moves money (every
// endpoint of the table marked Audit) writes its audit event — the
// service's wire.Event: the signed request as received, its principal, the
// reply's result — into the outbox table in the transaction that moves the
// money: both commit or neither does, so no money moves unaudited, whatever
// JetStream is doing. A publisher in every bank replica that serves
// (Serve) sends the events to MRM_EVENTS, on the subject and with the
// content the service layer used to publish after the reply, in the
// outbox's order, and deletes each row once the stream acknowledged it.
// A row survives a failed publish, a stream that is gone (deleted by an
// admin: the events wait until it is back) or a bank that dies: at least
// once.
//
// Duplicates carry the event's id as their JetStream dedupe id
// (Nats-Msg-Id), so one published again within the stream's duplicate
// window (a lost acknowledgement, a publisher that died between the
// acknowledgement and the delete) is stored once; every event also carries
// its id, for a reader to drop a later copy (mrmarket events does).
//
// Order, with several replicas on one database: one replica publishes at a
// time, the holder of a lease in the database (outbox_lease, renewed while
// it publishes, taken over when it lapses). A lease alone cannot stop a
// holder that stalled past it (a long pause) from publishing what it read
// before it stalled after its successor published newer events, so every
// publish is also fenced in the stream: it expects the last bank event
// there to be the one this publisher last stored
// (Nats-Expected-Last-Subject-Sequence with the subject filter of the
// bank's events). Any other publish in between makes it fail; the publisher
// then reads the stream's last bank event and the outbox anew, so it never
// appends an event behind a newer one.
//
// Rows are published in seq order. On PostgreSQL seq comes from a sequence
// drawn inside the transaction, so a row may commit after one with a higher
// seq and be published after it: the stream's order is then the commit
// order as the publisher saw it, and an event that depends on another (read
// what it wrote) always has the higher seq, so it follows it.

// Outbox publishing limits.
const (
	outboxBatch = 100
	// outboxPoll is how often a publisher looks for rows other replicas
	// wrote (its own commits wake it at once).
	outboxPoll = 250 * time.Millisecond
	// outboxLeaseTTL is how long a lease lasts unless renewed; a holder
	// renews it when half of it is left.
	outboxLeaseTTL  = 5 * time.Second
	outboxLeaseName = "events"
	// outboxPublishTimeout bounds one publish's wait for its acknowledgement.
	outboxPublishTimeout = 2 * time.Second
	// outboxLogEvery spaces the log lines of failures.
	outboxLogEvery = 10 * time.Second
)

// bankEvents are the subjects of the bank's audit events: the fence's
// subject filter.
var bankEvents = wire.EventSubject("bank", ">")

// outboxRetry is how a publisher that failed (no stream, no JetStream, no
// database) tries again: after 50 ms, doubling to at most 1 s, jittered.
var outboxRetry = retry.Options{InitialBackoff: 50 * time.Millisecond, Multiplier: 2, MaxBackoff: time.Second, Jitter: 0.5}

// audited runs fn as one transaction which, when ctx serves a request over
// NATS, also writes that request's audit event, with result() as its
// result, to the outbox; a committed event wakes the publisher.
func (b *Bank) audited(ctx context.Context, result func() any, fn func(t tx) error) error {
	in, served := service.IncomingFrom(ctx)
	err := b.st.run(ctx, func(t tx) error {
		if err := fn(t); err != nil || !served {
			return err
		}
		return writeEvent(ctx, t, service.EventOf("bank", in, result()))
	})
	if err == nil && served {
		b.kickOutbox()
	}
	return err
}

// kickOutbox wakes the publisher: an event was committed.
func (b *Bank) kickOutbox() {
	select {
	case b.outboxKick <- struct{}{}:
	default:
	}
}

// writeEvent adds ev to the outbox. An event id is a signature's key and
// nonce, used once (the nonce store), so it is new; a row already there
// is left as it is.
func writeEvent(ctx context.Context, t tx, ev wire.Event) error {
	return writeEvents(ctx, t, []wire.Event{ev})
}

// writeEvents adds evs to the outbox, in their order, in one statement.
func writeEvents(ctx context.Context, t tx, evs []wire.Event) error {
	if len(evs) == 0 {
		return nil
	}
	ids, subjects, data, at := make([]string, len(evs)), make([]string, len(evs)), make([]string, len(evs)), make([]int64, len(evs))
	for i, ev := range evs {
		d, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		ids[i], subjects[i], data[i], at[i] = ev.ID, wire.EventSubject(ev.Component, ev.Op), string(d), ev.At.UnixNano()
	}
	src, args := t.s.table(textCol("id", ids), textCol("subject", subjects), textCol("event", data), intCol("at", at))
	_, err := t.exec(ctx, `INSERT INTO outbox (id, subject, event, at) SELECT id, subject, event, at FROM (`+src+`) AS p
		WHERE true ON CONFLICT (id) DO NOTHING`, args...)
	return err
}

// OutboxLen is how many audit events wait in the outbox.
func (b *Bank) OutboxLen(ctx context.Context) (int, error) {
	var n int
	if err := b.st.db.QueryRowContext(ctx, `SELECT count(*) FROM outbox`).Scan(&n); err != nil {
		return 0, storeErr("outbox", err)
	}
	return n, nil
}

// publisher sends the outbox to MRM_EVENTS (see above).
type publisher struct {
	b      *Bank
	js     jetstream.JetStream
	holder string // this publisher's name in the lease

	leaseUntil time.Time // the lease is ours until then
	otherUntil time.Time // another publisher's lease runs until then
	synced     bool      // last is the stream's last bank event
	last       uint64

	failed  int64
	lastLog time.Time
}

func newPublisher(nc *nats.Conn, b *Bank) (*publisher, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &publisher{b: b, js: js, holder: nuid.Next()}, nil
}

// run publishes until ctx ends, then gives the lease up.
func (p *publisher) run(ctx context.Context) {
	defer p.release()
	for r := retry.Start(ctx, outboxRetry); r.Next(); {
		more, err := p.round(ctx)
		if err != nil {
			if ctx.Err() == nil {
				p.fail(err)
			}
			continue // after the policy's pause
		}
		r = retry.Start(ctx, outboxRetry)
		if more {
			continue
		}
		t := time.NewTimer(outboxPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-p.b.outboxKick:
			t.Stop()
		case <-t.C:
		}
	}
}

// round publishes one batch of the outbox, if this publisher holds the
// lease; more says another round should follow at once.
func (p *publisher) round(ctx context.Context) (more bool, err error) {
	if mine, err := p.lease(ctx); err != nil || !mine {
		return false, err
	}
	if !p.synced {
		if p.last, err = p.lastBankEvent(ctx); err != nil {
			return false, err
		}
		p.synced = true
	}
	rows, err := p.pending(ctx)
	if err != nil {
		return false, err
	}
	var done []int64
	defer func() {
		if derr := p.delete(ctx, done); derr != nil && err == nil {
			err = derr
		}
	}()
	for _, r := range rows {
		ack, err := p.publish(ctx, r)
		if err != nil {
			// Whether or not it was stored, the stream is read again
			// before the next publish.
			p.synced = false
			if natsutil.WrongLastSequence(err) {
				return true, nil // another publisher was here: read anew
			}
			return false, fmt.Errorf("publishing audit event %s: %w", r.id, err)
		}
		p.last = max(p.last, ack.Sequence)
		done = append(done, r.seq)
	}
	return len(rows) == outboxBatch, nil
}

// outboxRow is one event waiting.
type outboxRow struct {
	seq         int64
	id, subject string
	event       []byte
}

// pending reads the oldest rows. They are read outside a SERIALIZABLE
// transaction: a committed row is all the publisher needs, and a
// serializable read of the whole table would tie it to every transaction
// that writes one.
func (p *publisher) pending(ctx context.Context) ([]outboxRow, error) {
	st := p.b.st
	rows, err := st.db.QueryContext(ctx, st.rebind(`SELECT seq, id, subject, event FROM outbox ORDER BY seq LIMIT ?`), outboxBatch)
	if err != nil {
		return nil, storeErr("outbox", err)
	}
	defer rows.Close()
	var out []outboxRow
	for rows.Next() {
		var r outboxRow
		var ev string
		if err := rows.Scan(&r.seq, &r.id, &r.subject, &ev); err != nil {
			return nil, storeErr("outbox", err)
		}
		r.event = []byte(ev)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, storeErr("outbox", err)
	}
	return out, nil
}

// publish stores r in the stream, fenced behind the last bank event this
// publisher knows of.
func (p *publisher) publish(ctx context.Context, r outboxRow) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(ctx, outboxPublishTimeout)
	defer cancel()
	msg := &nats.Msg{Subject: r.subject, Data: r.event, Header: nats.Header{}}
	return p.js.PublishMsg(ctx, msg, jetstream.WithMsgID(r.id), jetstream.WithExpectLastSequenceForSubject(p.last, bankEvents),
		jetstream.WithRetryAttempts(0))
}

// lastBankEvent is the stream sequence of the last bank event in
// MRM_EVENTS (0: none).
func (p *publisher) lastBankEvent(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, outboxPublishTimeout)
	defer cancel()
	st, err := p.js.Stream(ctx, wire.StreamEvents)
	if err != nil {
		return 0, fmt.Errorf("audit stream %s: %w", wire.StreamEvents, err)
	}
	m, err := st.GetLastMsgForSubject(ctx, bankEvents)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("audit stream %s: last bank event: %w", wire.StreamEvents, err)
	}
	return m.Sequence, nil
}

// delete removes the rows the stream acknowledged.
func (p *publisher) delete(ctx context.Context, seqs []int64) error {
	if len(seqs) == 0 {
		return nil
	}
	args := make([]any, len(seqs))
	for i, s := range seqs {
		args[i] = s
	}
	st := p.b.st
	if _, err := st.db.ExecContext(ctx, st.rebind(`DELETE FROM outbox WHERE seq IN (`+inList(len(seqs))+`)`), args...); err != nil {
		return storeErr("outbox", err)
	}
	return nil
}

// lease reports whether this publisher holds the outbox lease, taking it
// when it is free or lapsed and renewing it when half of it is gone. It
// goes by the wall clock (whatever clock the ledger runs on: the lease is
// about processes).
func (p *publisher) lease(ctx context.Context) (bool, error) {
	now := time.Now()
	switch {
	case now.Before(p.otherUntil):
		return false, nil
	case now.Add(outboxLeaseTTL / 2).Before(p.leaseUntil):
		return true, nil
	}
	until := now.Add(outboxLeaseTTL)
	var other time.Time
	err := p.b.st.run(ctx, func(t tx) error {
		other = time.Time{}
		var holder string
		var held int64
		switch err := t.queryRow(ctx, `SELECT holder, until FROM outbox_lease WHERE name = ?`, outboxLeaseName).Scan(&holder, &held); {
		case errors.Is(err, sql.ErrNoRows):
			_, err = t.exec(ctx, `INSERT INTO outbox_lease (name, holder, until) VALUES (?, ?, ?)`, outboxLeaseName, p.holder, until.UnixNano())
			return err
		case err != nil:
			return err
		case holder != p.holder && held > now.UnixNano():
			// Asked again within a second, not at its end: a holder that
			// stops gives its lease up (release).
			other = time.Unix(0, min(held, now.Add(time.Second).UnixNano()))
			return nil
		}
		_, err := t.exec(ctx, `UPDATE outbox_lease SET holder = ?, until = ? WHERE name = ?`, p.holder, until.UnixNano(), outboxLeaseName)
		return err
	})
	if err != nil {
		return false, err
	}
	if !other.IsZero() {
		p.leaseUntil, p.otherUntil, p.synced = time.Time{}, other, false
		return false, nil
	}
	p.leaseUntil = until
	return true, nil
}

// release gives the lease up, so another replica publishes at once.
func (p *publisher) release() {
	if p.leaseUntil.IsZero() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st := p.b.st
	_, _ = st.db.ExecContext(ctx, st.rebind(`UPDATE outbox_lease SET until = 0 WHERE name = ? AND holder = ?`), outboxLeaseName, p.holder)
}

// fail counts a failed round and logs it, at most once per outboxLogEvery
// (a JetStream outage fails every round): the events wait in the outbox.
func (p *publisher) fail(err error) {
	p.failed++
	p.b.metrics.Error("bank", "audit")
	if now := time.Now(); now.Sub(p.lastLog) >= outboxLogEvery {
		p.lastLog = now
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		waiting, _ := p.b.OutboxLen(ctx)
		p.b.logger.Warn("bank: audit events wait in the outbox", "err", err, "waiting", waiting, "failed_rounds", p.failed)
	}
}
