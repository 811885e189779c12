package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// A try that lands on a frozen or dead replica costs one short attempt and
// a short pause, not the 9 s of a 5 s attempt and a 4 s pause: the next try
// (the same request) reaches the other replica within the fault table's
// bound.
func TestAskingAgainAfterOneShortAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var warn bytes.Buffer
		var seen []string
		tries := 0
		lost := func(ctx context.Context, _ clients, req string) (string, error) {
			tries++
			seen = append(seen, req)
			if tries == 1 {
				<-ctx.Done() // frozen: no answer comes
				return "", wire.Errorf(wire.ErrUnavailable, "no answer on mrm.v1.broker.spend in time")
			}
			return "plan " + req, nil
		}
		start := time.Now()
		rep, err := retried(lost)(t.Context(), clients{warn: &warn}, "p1")
		took := time.Since(start)
		if err != nil || rep != "plan p1" || tries != 2 || seen[1] != "p1" {
			t.Fatalf("%q, %v after %d tries of %v", rep, err, tries, seen)
		}
		if bound := 5 * time.Second; took > bound || took < asking.attempts.InitialBackoff {
			t.Fatalf("answered after %s: want one attempt (%s) and a pause, within %s", took, asking.attempts.InitialBackoff, bound)
		}
		if !strings.Contains(warn.String(), "asking again") {
			t.Errorf("no word of the retry: %q", warn.String())
		}
	})
}

// An answer is final (a refusal too); unavailable is asked again with a
// growing pause until patience runs out, and then it is the answer (exit 4).
func TestAskingStopsAtAnAnswerOrPatience(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tries := 0
		refused := func(context.Context, clients, string) (string, error) {
			tries++
			return "", wire.Errorf(wire.ErrConflict, "id already used")
		}
		if _, err := retried(refused)(t.Context(), clients{}, "x"); !errors.Is(err, wire.ErrConflict) || tries != 1 {
			t.Fatalf("a refusal asked %d times: %v", tries, err)
		}
		tries = 0
		var at []time.Duration
		start := time.Now()
		down := func(context.Context, clients, string) (string, error) {
			tries++
			at = append(at, time.Since(start))
			return "", wire.Errorf(wire.ErrUnavailable, "nothing answers on mrm.v1.bank.transfer")
		}
		_, err := retried(down)(t.Context(), clients{}, "x")
		if !errors.Is(err, wire.ErrUnavailable) || ExitCode(err) != ExitUnavailable {
			t.Fatalf("gave up with %v", err)
		}
		if took := time.Since(start); took > asking.patience || took < asking.patience-asking.pauses.MaxBackoff*2 {
			t.Fatalf("gave up after %s, want about %s", took, asking.patience)
		}
		for i := 1; i < len(at); i++ {
			if gap := at[i] - at[i-1]; gap > 2*asking.pauses.MaxBackoff {
				t.Fatalf("tries at %v: a pause of %s", at, gap)
			}
		}
	})
}

// A long request's work shown advancing (wire.Progress: a spend placing
// bids on thousands of hosts) is reported each time it advances and
// waited for past the patience of a request whose answers show none.
func TestAskingWaitsForWorkThatAdvances(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var warn bytes.Buffer
		start := time.Now()
		placing := func(context.Context, clients, string) (string, error) {
			done := int(time.Since(start) / (asking.patience / 2)) // a host every half patience
			if done == 4 {
				return "running", nil
			}
			return "", &wire.Error{Code: wire.CodeUnavailable, Message: "starting",
				Progress: &wire.Progress{Done: done, Of: 4, What: "hosts answered its bids"}}
		}
		rep, err := retried(placing)(t.Context(), clients{warn: &warn}, "big")
		if err != nil || rep != "running" || time.Since(start) < 2*asking.patience {
			t.Fatalf("%q, %v after %s", rep, err, time.Since(start))
		}
		for _, line := range []string{"1 of 4 hosts answered its bids", "3 of 4 hosts answered its bids"} {
			if !strings.Contains(warn.String(), line) {
				t.Errorf("no %q in %q", line, warn.String())
			}
		}
	})
}

// A service answering "unavailable" at once (a bank whose database is
// failing over) does not lengthen the attempts: when it is back, a try it
// loses costs the first, short attempt, not the longest. Mutation: growing
// the attempt with every try makes the lost try cost rpc.DefaultTimeout
// (5 s) here.
func TestAttemptsGrowOnlyAfterTriesWithoutAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const back = 20 * time.Second // the database answers again
		start := time.Now()
		lostOne := false
		failover := func(ctx context.Context, _ clients, _ string) (string, error) {
			if time.Since(start) < back {
				return "", wire.Errorf(wire.ErrUnavailable, "bank store begin: conn closed")
			}
			if !lostOne { // the first try after it is lost with a connection the bank drops
				lostOne = true
				<-ctx.Done()
				return "", wire.Errorf(wire.ErrUnavailable, "no answer on mrm.v1.bank.transfer in time")
			}
			return "done", nil
		}
		rep, err := retried(failover)(t.Context(), clients{}, "tr")
		took := time.Since(start)
		if err != nil || rep != "done" {
			t.Fatalf("%q, %v", rep, err)
		}
		// The longest pause is the jittered one, MaxBackoff·(1+Jitter):
		// one before the lost try and one after it.
		longest := time.Duration(float64(asking.pauses.MaxBackoff) * (1 + asking.pauses.Jitter))
		if bound := back + asking.attempts.InitialBackoff + 2*longest; took > bound {
			t.Fatalf("answered %s after the start, %s after the service was back: want at most one short attempt and a pause (%s)", took, took-back, bound)
		}
	})
}
