package virt_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/agent/virt"
)

// throttleTick is how often the share tests re-plan the throttles, as the
// agent's tick does.
const throttleTick = 500 * time.Millisecond

// runThrottles drives enf as the agent's tick does — measure (IOUsage),
// then re-plan and set the caps (Rebalance) — every throttleTick with the
// shares shares() returns, until the test ends. It returns the last caps
// (MB/s by VM and resource), safe to call at any time.
func runThrottles(t *testing.T, enf *virt.Enforcer, shares func() map[string]float64) func() map[string]map[string]float64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var last map[string]map[string]float64
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(throttleTick)
		defer tick.Stop()
		trace := os.Getenv("MRM_TRACE_CAPS") != ""
		for {
			use, err := enf.IOUsage(ctx)
			if err != nil && ctx.Err() == nil {
				t.Errorf("I/O usage: %v", err)
			}
			caps, err := enf.Rebalance(ctx, shares())
			if trace {
				t.Logf("trace %s: used %v caps %v (%s)", time.Now().Format("15:04:05.0"), use, caps, modes(enf))
			}
			if err != nil && ctx.Err() == nil {
				t.Errorf("rebalance: %v", err)
			}
			mu.Lock()
			last = caps
			mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func() map[string]map[string]float64 {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// bidBook is a test's bids by guest, which the test changes while
// runThrottles reads them as the shares of the guests' domains (prefix and
// the guest's name).
type bidBook struct {
	prefix string
	mu     sync.Mutex
	bids   map[string]float64
}

// set replaces the bids.
func (b *bidBook) set(bids map[string]float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bids = bids
}

// parts is each guest's part of the bids now.
func (b *bidBook) parts() map[string]float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return partsOf(b.bids)
}

// among is each of names' part of the bids among them.
func (b *bidBook) among(names ...string) map[string]float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := map[string]float64{}
	for _, n := range names {
		m[n] = b.bids[n]
	}
	return partsOf(m)
}

// shares is the parts by domain: runThrottles' shares.
func (b *bidBook) shares() map[string]float64 {
	shares := map[string]float64{}
	for g, q := range b.parts() {
		shares[b.prefix+g] = q
	}
	return shares
}

// partsOf turns rates into each one's part of their sum.
func partsOf(rates map[string]float64) map[string]float64 {
	var sum float64
	for _, r := range rates {
		sum += r
	}
	out := map[string]float64{}
	for n, r := range rates {
		if sum > 0 {
			out[n] = r / sum
		}
	}
	return out
}

// checkParts asserts each guest's part of the throughput is within tol of
// its target, and logs the measurement as the closing note's tables read.
func checkParts(t *testing.T, what string, rates, target map[string]float64, tol float64) {
	t.Helper()
	got := partsOf(rates)
	names := make([]string, 0, len(target))
	for n := range target {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	var total float64
	for _, n := range names {
		total += rates[n]
		parts = append(parts, fmt.Sprintf("%s %.3f (target %.3f, %.1f MiB/s)", n, got[n], target[n], rates[n]))
		if math.Abs(got[n]-target[n]) > tol {
			t.Errorf("%s: %s has %.3f of the throughput, target %.3f ± %.2f", what, n, got[n], target[n], tol)
		}
	}
	t.Logf("%s: %s; total %.1f MiB/s", what, strings.Join(parts, ", "), total)
}
