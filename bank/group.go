package bank

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Group commit of captures. Every agent sends a capture batch per tick, so
// a bank replica serving many hosts gets many small batches at once; one
// transaction each costs a commit (a flush, and the synchronous standby's
// acknowledgement) per batch, and concurrent transactions taking from the
// same hold abort each other under SERIALIZABLE. So a replica commits the
// batches that arrive together as one group: one transaction, whose
// statements each carry the whole group as arrays (store.table), so it
// costs the same dozen round trips for one batch or a thousand.
//
// One group is committed at a time per replica; the batches that arrive
// while it commits form the next, so the group grows with the load and a
// lone batch waits for nobody. Within the group the batches are decided
// one after another against what the ones before them took (the holds,
// totals and legs read once, shared), which is the serial order the
// transaction commits in: the same result as committing each batch by
// itself in that order, under the same SERIALIZABLE transaction and its
// retries from BEGIN. Each batch is answered with its own reply and audited
// by its own event, written in the group's transaction.
//
// A group whose transaction fails other than by a race it retries (a
// batch whose transfer would overflow its provider account, the store
// lost) is not answered with that failure: each of its batches is then
// committed by itself, so only the batch at fault fails. Nothing of a failed
// group was committed, and the legs' ids make a batch applied twice move
// nothing twice, so a batch is neither dropped nor doubled.
//
// A caller whose context ends while its batch waits is answered
// unavailable at once; a batch that had not yet been taken into a group is
// then dropped, one already in a group may still commit (as a COMMIT cut
// short may have), and the agent's retry of the same legs answers it.

// maxGroupLegs bounds the legs of one group (a batch larger than that is a
// group of its own): one transaction's arrays and its time to commit.
const maxGroupLegs = 20_000

// slowGroup is how long a capture transaction may take before it is
// logged, with its size and how many times serialization failures began it
// again: half an agent's attempt.
const slowGroup = 500 * time.Millisecond

// captureCall is one batch waiting for its group.
type captureCall struct {
	ctx   context.Context
	batch *wire.CaptureBatch
	rep   wire.CaptureReply
	err   error
	done  chan struct{}
}

// captureQueue holds the batches waiting for the next group; a committer
// runs while it is not empty.
type captureQueue struct {
	mu      sync.Mutex
	waiting []*captureCall
	running bool
}

// submit queues batch for the next group and waits for its reply.
func (q *captureQueue) submit(ctx context.Context, b *Bank, batch *wire.CaptureBatch) (wire.CaptureReply, error) {
	c := &captureCall{ctx: ctx, batch: batch, done: make(chan struct{})}
	q.mu.Lock()
	q.waiting = append(q.waiting, c)
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		go b.commitCaptures()
	}
	select {
	case <-c.done:
		return c.rep, c.err
	case <-ctx.Done():
		return wire.CaptureReply{}, fmt.Errorf("%w: bank store: capture: %v", errUnavailable, ctx.Err())
	}
}

// take is the next group: the waiting batches, in arrival order, up to
// maxGroupLegs legs. None left stops the committer.
func (q *captureQueue) take() []*captureCall {
	q.mu.Lock()
	defer q.mu.Unlock()
	n, legs := 0, 0
	for n < len(q.waiting) && (n == 0 || legs+len(q.waiting[n].batch.Legs) <= maxGroupLegs) {
		legs += len(q.waiting[n].batch.Legs)
		n++
	}
	group := q.waiting[:n:n]
	q.waiting = q.waiting[n:]
	if len(q.waiting) == 0 {
		q.waiting = nil
	}
	if n == 0 {
		q.running = false
	}
	return group
}

// commitCaptures commits groups until none is waiting.
func (b *Bank) commitCaptures() {
	for {
		group := b.captures.take()
		if len(group) == 0 {
			return
		}
		b.commitGroup(group)
	}
}

// commitGroup commits group in one transaction, or each of its batches by
// itself if that fails, and answers every batch.
func (b *Bank) commitGroup(group []*captureCall) {
	live := group[:0]
	for _, c := range group {
		if err := c.ctx.Err(); err != nil {
			c.answer(wire.CaptureReply{}, fmt.Errorf("%w: bank store: capture: %v", errUnavailable, err))
			continue
		}
		live = append(live, c)
	}
	if len(live) > 1 {
		ctx, cancel := groupContext(live)
		reps, err := b.commitCaptureTx(ctx, live)
		cancel()
		if err == nil {
			for i, c := range live {
				c.answer(reps[i], nil)
			}
			return
		}
		b.logger.Debug("bank: a capture group failed, committing its batches one by one", "batches", len(live), "err", err)
	}
	for _, c := range live {
		reps, err := b.commitCaptureTx(c.ctx, []*captureCall{c})
		if err != nil {
			c.answer(wire.CaptureReply{}, err)
			continue
		}
		c.answer(reps[0], nil)
	}
}

func (c *captureCall) answer(rep wire.CaptureReply, err error) {
	c.rep, c.err = rep, err
	close(c.done)
}

// groupContext bounds a group's transaction by the latest deadline of its
// callers (none if one has none), and not by any one caller's cancellation:
// the others still wait for it.
func groupContext(calls []*captureCall) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, c := range calls {
		d, ok := c.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.Background())
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.Background(), latest)
}

// commitCaptureTx commits calls' batches in one transaction, each with its
// audit event when its call is served over NATS, and replies to each.
func (b *Bank) commitCaptureTx(ctx context.Context, calls []*captureCall) ([]wire.CaptureReply, error) {
	start := time.Now()
	legs := 0
	for _, c := range calls {
		legs += len(c.batch.Legs)
	}
	tries := 0
	defer func() {
		b.captureTxs.Add(1)
		b.captureTries.Add(int64(tries))
		// A group's time is what each of its captures waited: an agent's
		// capture lost for one attempt (rpc.DaemonAttempt) stalls its tick.
		if took := time.Since(start); took >= slowGroup {
			b.logger.Warn("bank: slow capture transaction", "batches", len(calls), "legs", legs, "tries", tries, "took", took.Round(time.Millisecond))
		}
	}()
	batches := make([]*wire.CaptureBatch, len(calls))
	for i, c := range calls {
		batches[i] = c.batch
	}
	reps := make([]wire.CaptureReply, len(calls))
	audited := false
	var err error
	tries, err = b.st.runTries(ctx, func(t tx) error {
		now := b.now()
		in, err := readCapture(ctx, t, batches)
		if err != nil {
			return err
		}
		ds := make([]captureDecision, len(batches))
		for i, batch := range batches {
			ds[i] = decideCapture(batch, in, now, b.adminKey != "")
			reps[i] = ds[i].rep
		}
		if err := writeCapture(ctx, t, batches, ds, in, now); err != nil {
			return err
		}
		var events []wire.Event
		for i, c := range calls {
			if in, served := service.IncomingFrom(c.ctx); served {
				events = append(events, service.EventOf("bank", in, reps[i]))
			}
		}
		audited = len(events) > 0
		return writeEvents(ctx, t, events)
	})
	if err != nil {
		return nil, err
	}
	if audited {
		b.kickOutbox()
	}
	return reps, nil
}
