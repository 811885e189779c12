package rpc

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/retry"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// DaemonAttempt bounds each try of a daemon's request to another daemon
// (Retried): long enough for a live service's answer, short against the
// 5 s a request is given (DefaultTimeout), so a request lost with a dead
// NATS node or a dead replica costs one attempt, not the whole deadline.
const DaemonAttempt = time.Second

// retryPolicy is how a try that got no usable answer is made again: after
// a fixed pause (nothing subscribed answers at once, so no busy loop),
// until the caller's ctx ends.
var retryPolicy = retry.Options{InitialBackoff: 20 * time.Millisecond}

// busyPolicy is how a try answered "busy, retry" (a service shedding load
// it cannot serve in time: service.ErrBusy) is made again: after a pause
// that grows, jittered, so an overloaded service gets less of its callers'
// load, not the same again at once.
var busyPolicy = retry.Options{InitialBackoff: 50 * time.Millisecond, Multiplier: 2, MaxBackoff: time.Second, Jitter: 0.5}

// Retried bounds each try by attempt and makes a try whose error again
// accepts (NoAnswer, TimedOut), or that was answered busy (Busy: not
// served, so always safe to send again), again, afresh — a signed request
// is signed anew, with a new nonce — until ctx ends (retryPolicy, and
// busyPolicy after a busy answer). Only for requests
// that are idempotent (by their id, or by what they set): a try that did
// apply and whose answer was lost is applied again. attempt <= 0: one try,
// bounded by ctx.
func Retried(attempt time.Duration, again func(error) bool) Option {
	return func(c *call) { c.attempt, c.again = attempt, again }
}

// tries runs try as Retried says: once without an attempt.
func (c *call) tries(ctx context.Context, try func(ctx context.Context) error) error {
	if c.attempt <= 0 {
		return try(ctx)
	}
	r := retry.Start(ctx, retryPolicy)
	// The first try goes out even when ctx has already ended: its error
	// (unavailable), not ctx's, is the caller's answer.
	r.Next()
	var busy *retry.Retry // its pauses grow over the busy answers only
	for {
		actx, cancel := context.WithTimeout(ctx, c.attempt)
		err := try(actx)
		cancel()
		switch {
		case err == nil:
			return nil
		case Busy(err):
			if busy == nil {
				busy = retry.Start(ctx, busyPolicy)
				busy.Next() // the busy try was the first
			}
			if !busy.Next() {
				return err
			}
		case !c.again(err) || !r.Next():
			return err
		}
	}
}

// Busy says err is a service's "busy, retry" (service.ErrBusy): the
// request was refused unserved, its sender's queue full.
func Busy(err error) bool {
	return errors.Is(err, wire.ErrUnavailable) && strings.Contains(err.Error(), "busy, retry")
}

// NoAnswer says err is a try that got no answer: time ran out, or nothing
// was there to take it (Request's words for both) — for a service of
// several replicas, one of which may be there on the next try.
func NoAnswer(err error) bool {
	return TimedOut(err) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, wire.ErrUnavailable) && strings.Contains(err.Error(), "nothing answers")
}

// TimedOut says err is a try whose answer did not come in time, or whose
// connection was lost while it waited (natsutil.ErrLinkLost): the request
// or its answer may be lost, and the one it went to may be alive — for a
// service of one responder, whose absence a new try does not mend.
func TimedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, wire.ErrUnavailable) && (strings.Contains(err.Error(), "in time") || strings.Contains(err.Error(), natsutil.ErrLinkLost.Error()))
}
