package retry

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestBackoffGrowsToItsCap(t *testing.T) {
	o := Options{InitialBackoff: 2 * time.Millisecond, Multiplier: 2, MaxBackoff: 32 * time.Millisecond}
	want := []time.Duration{0, 2, 4, 8, 16, 32, 32, 32}
	for n, w := range want {
		if got := o.Backoff(n); got != w*time.Millisecond {
			t.Errorf("Backoff(%d) = %s, want %s", n, got, w*time.Millisecond)
		}
	}
	fixed := Options{InitialBackoff: 20 * time.Millisecond}
	for n := 1; n < 5; n++ {
		if got := fixed.Backoff(n); got != 20*time.Millisecond {
			t.Errorf("fixed Backoff(%d) = %s, want 20ms", n, got)
		}
	}
}

// The pauses Next waits are the policy's: a loop that ignored Backoff (or
// waited before the first try) fails this.
func TestNextWaitsThePolicysPauses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := Options{InitialBackoff: 4 * time.Second, Multiplier: 2.5, MaxTries: 3}
		start := time.Now()
		var at []time.Duration
		for r := Start(t.Context(), o); r.Next(); {
			at = append(at, time.Since(start))
		}
		want := []time.Duration{0, 4 * time.Second, 14 * time.Second}
		if len(at) != len(want) {
			t.Fatalf("tries at %v, want %v", at, want)
		}
		for i := range want {
			if at[i] != want[i] {
				t.Fatalf("tries at %v, want %v", at, want)
			}
		}
	})
}

// Jitter keeps each pause within [b(1−j), b(1+j)]; with jitter 0 it is b.
func TestJitterStaysInItsBand(t *testing.T) {
	o := Options{InitialBackoff: 10 * time.Millisecond, Multiplier: 1, Jitter: 0.5}
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := o.pause(3)
		if d < 5*time.Millisecond || d > 15*time.Millisecond {
			t.Fatalf("pause %s outside [5ms, 15ms]", d)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Fatalf("jitter drew only %d distinct pauses", len(seen))
	}
}

// A context that ends stops the loop during a pause, not after it.
func TestNextStopsWhenContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
		defer cancel()
		start := time.Now()
		n := 0
		for r := Start(ctx, Options{InitialBackoff: time.Hour}); r.Next(); {
			n++
		}
		if n != 1 || time.Since(start) != 30*time.Millisecond {
			t.Fatalf("%d tries, ended after %s; want 1 try, ended at the context's 30ms", n, time.Since(start))
		}
	})
}

func TestDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errBusy, errBad := errors.New("busy"), errors.New("bad")
		again := func(err error) bool { return errors.Is(err, errBusy) }
		n := 0
		err := Do(t.Context(), Options{InitialBackoff: time.Millisecond, MaxTries: 5}, again, func(context.Context) error {
			n++
			if n < 3 {
				return errBusy
			}
			return nil
		})
		if err != nil || n != 3 {
			t.Fatalf("Do = %v after %d tries, want nil after 3", err, n)
		}
		n = 0
		err = Do(t.Context(), Options{InitialBackoff: time.Millisecond, MaxTries: 5}, again, func(context.Context) error {
			n++
			return errBad
		})
		if !errors.Is(err, errBad) || n != 1 {
			t.Fatalf("Do = %v after %d tries, want bad after 1 (not worth another try)", err, n)
		}
		n = 0
		err = Do(t.Context(), Options{InitialBackoff: time.Millisecond, MaxTries: 4}, again, func(context.Context) error {
			n++
			return errBusy
		})
		if !errors.Is(err, errBusy) || n != 4 {
			t.Fatalf("Do = %v after %d tries, want busy after MaxTries 4", err, n)
		}
	})
}
