package rpc

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// retried is a request's tries as Retried(attempt, again) makes them.
func retried(ctx context.Context, attempt time.Duration, again func(error) bool, try func(ctx context.Context) error) error {
	var c call
	Retried(attempt, again)(&c)
	return c.tries(ctx, try)
}

// A try whose answer was lost is made again after one attempt, not after
// the caller's whole deadline; one refused is not.
func TestTriesSendsALostRequestAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
		defer cancel()
		start := time.Now()
		tries := 0
		err := retried(ctx, DaemonAttempt, TimedOut, func(ctx context.Context) error {
			tries++
			if tries == 1 {
				<-ctx.Done() // lost: no answer comes
				return wire.Errorf(wire.ErrUnavailable, "no answer on x in time")
			}
			return nil
		})
		if err != nil || tries != 2 {
			t.Fatalf("err %v after %d tries, want the second to answer", err, tries)
		}
		if took := time.Since(start); took > DaemonAttempt+100*time.Millisecond {
			t.Fatalf("answered after %s: the lost try held the call longer than one attempt (%s)", took, DaemonAttempt)
		}
	})
}

func TestTriesStopsAtAnAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refused := wire.Errorf(wire.ErrForbidden, "not yours")
		for _, c := range []struct {
			name  string
			again func(error) bool
			err   error
		}{
			{"a refusal is an answer", NoAnswer, refused},
			{"no responder ends a call to a single responder", TimedOut, nats.ErrNoResponders},
		} {
			tries := 0
			err := retried(context.Background(), DaemonAttempt, c.again, func(context.Context) error { tries++; return c.err })
			if !errors.Is(err, c.err) || tries != 1 {
				t.Errorf("%s: %d tries, err %v", c.name, tries, err)
			}
		}
	})
}

// With several replicas, nobody answering now may be a replica still
// subscribing: the call tries again until its deadline.
func TestTriesWaitsForAReplicaUntilTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		start, tries := time.Now(), 0
		err := retried(ctx, DaemonAttempt, NoAnswer, func(context.Context) error { tries++; return nats.ErrNoResponders })
		if !errors.Is(err, nats.ErrNoResponders) || tries < 10 {
			t.Fatalf("%d tries, err %v", tries, err)
		}
		if took := time.Since(start); took < 3*time.Second {
			t.Fatalf("gave up after %s, before the deadline", took)
		}
	})
}

// A try answered "busy, retry" is made again, even by a call that retries
// only lost answers (TimedOut), after pauses that grow as busyPolicy says.
func TestTriesBacksOffWhenBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var at []time.Duration
		start := time.Now()
		err := retried(context.Background(), DaemonAttempt, TimedOut, func(context.Context) error {
			at = append(at, time.Since(start))
			if len(at) < 5 {
				return wire.Errorf(wire.ErrUnavailable, "busy, retry: too many requests waiting from this principal")
			}
			return nil
		})
		if err != nil || len(at) != 5 {
			t.Fatalf("err %v after %d tries", err, len(at))
		}
		for i := 1; i < len(at); i++ {
			low := time.Duration(float64(busyPolicy.Backoff(i)) * (1 - busyPolicy.Jitter))
			if gap := at[i] - at[i-1]; gap < low {
				t.Fatalf("tries at %v: pause %d of %s, below the policy's %s", at, i, gap, low)
			}
		}
	})
}
