package wire

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// DaemonAttempt bounds each try of a daemon's request to another daemon
// (Tries): long enough for a live service's answer, short against the 5 s
// a request is given (DefaultTimeout), so a request lost with a dead NATS
// node or a dead replica costs one attempt, not the whole deadline.
const DaemonAttempt = time.Second

// Tries runs try until it gets an answer: each try bounded by attempt, and
// one whose error again accepts (NoAnswer, TimedOut) made again, afresh —
// so a signed request is signed anew, with a new nonce — until ctx ends.
// Only for requests that are idempotent (by their id, or by what they
// set): a try that did apply and whose answer was lost is applied again.
// attempt <= 0: one try, bounded by ctx.
func Tries(ctx context.Context, attempt time.Duration, again func(error) bool, try func(ctx context.Context) error) error {
	if attempt <= 0 {
		return try(ctx)
	}
	for {
		actx, cancel := context.WithTimeout(ctx, attempt)
		err := try(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !again(err) {
			return err
		}
		select { // nothing subscribed answers at once: not a busy loop
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// NoAnswer says err is a try that got no answer: time ran out, or nothing
// was there to take it (CallMsg's words for both) — for a service of
// several replicas, one of which may be there on the next try.
func NoAnswer(err error) bool {
	return TimedOut(err) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, ErrUnavailable) && strings.Contains(err.Error(), "nothing answers")
}

// TimedOut says err is a try whose answer did not come in time: the
// request or its answer may be lost, and the one it went to may be alive —
// for a service of one responder, whose absence a new try does not mend.
func TimedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, ErrUnavailable) && strings.Contains(err.Error(), "in time")
}
