// Package retry is mrmarket's one way to try something again: a policy
// stated as data (Options: first backoff, growth, ceiling, jitter, how many
// tries) and one loop that follows it, in the manner of CockroachDB's
// pkg/util/retry.
//
//	for r := retry.Start(ctx, opts); r.Next(); {
//		if err = try(); err == nil || !again(err) {
//			break
//		}
//	}
//
// Next returns true at once for the first try and after each backoff for
// the others; it returns false once MaxTries have been made or ctx has
// ended. Every place that tries again (a bank transaction that lost a
// serialization race, a daemon's request to another daemon, the CLI's
// request by id, a broker waiting on another replica's start) states its
// policy as an Options value beside the code that uses it.
package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Options is a retry policy.
type Options struct {
	// InitialBackoff is the pause before the second try.
	InitialBackoff time.Duration
	// MaxBackoff caps every pause (0: no cap).
	MaxBackoff time.Duration
	// Multiplier grows the pause after each try (below 1 counts as 1: a
	// fixed pause).
	Multiplier float64
	// Jitter in [0, 1] spreads each pause uniformly over
	// [b·(1−Jitter), b·(1+Jitter)] around its backoff b, so that racers
	// that failed together do not try again together. 1 is "full
	// jitter": anywhere in [0, 2b].
	Jitter float64
	// MaxTries bounds the tries, the first included (0: until ctx ends).
	MaxTries int
}

// Backoff is the pause before try n+1 (n ≥ 1 tries made so far), before
// jitter.
func (o Options) Backoff(n int) time.Duration {
	if n < 1 {
		return 0
	}
	m := max(o.Multiplier, 1)
	d := float64(o.InitialBackoff)
	for i := 1; i < n; i++ {
		d *= m
		if o.MaxBackoff > 0 && d >= float64(o.MaxBackoff) {
			return o.MaxBackoff
		}
	}
	if o.MaxBackoff > 0 && d > float64(o.MaxBackoff) {
		return o.MaxBackoff
	}
	return time.Duration(d)
}

// pause is Backoff(n) with the jitter drawn.
func (o Options) pause(n int) time.Duration {
	b := o.Backoff(n)
	j := min(max(o.Jitter, 0), 1)
	if j == 0 || b <= 0 {
		return b
	}
	return time.Duration(float64(b) * (1 - j + 2*j*rand.Float64()))
}

// Retry is one run of a policy.
type Retry struct {
	ctx   context.Context
	opts  Options
	tries int
}

// Start begins a run of opts bounded by ctx.
func Start(ctx context.Context, opts Options) *Retry {
	return &Retry{ctx: ctx, opts: opts}
}

// Next waits the policy's pause (none before the first try) and reports
// whether another try is to be made: false once MaxTries were made or ctx
// has ended, before or during the pause.
func (r *Retry) Next() bool {
	if r.ctx.Err() != nil || r.opts.MaxTries > 0 && r.tries >= r.opts.MaxTries {
		return false
	}
	if r.tries > 0 {
		if d := r.opts.pause(r.tries); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-r.ctx.Done():
				t.Stop()
				return false
			case <-t.C:
			}
		}
	}
	r.tries++
	return true
}

// Tries is how many tries Next has allowed so far.
func (r *Retry) Tries() int { return r.tries }

// Do calls try until it succeeds, again says its error is not worth another
// try, or the policy ends; it returns try's last error (nil on success).
// When ctx ends before the first try, Do returns ctx's error.
func Do(ctx context.Context, opts Options, again func(error) bool, try func(context.Context) error) error {
	err := ctx.Err()
	for r := Start(ctx, opts); r.Next(); {
		if err = try(ctx); err == nil || !again(err) {
			return err
		}
	}
	return err
}
