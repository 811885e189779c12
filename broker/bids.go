package broker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// bidChange is one host's part of a plan's round: the request it is sent.
type bidChange struct {
	host string
	req  *wire.BidRequest
}

// replan runs one round of a plan outside Tick (Spend, Adjust): allocate,
// then apply the bid changes.
func (b *Broker) replan(ctx context.Context, rec *planRecord, now time.Time, v roundView) (changed bool, errs []error) {
	d := b.allocate(rec, now, v)
	return b.apply(ctx, rec, now, d.Stage, d.Held, bidChanges(rec, d.Allocs, now))
}

// apply sends a plan's bid changes, one request per host, and applies to
// rec the stages and what the hosts took. It reports whether rec changed,
// and the errors of the hosts that did not take their change.
func (b *Broker) apply(ctx context.Context, rec *planRecord, now time.Time, stage []int, held []bool, changes []bidChange) (changed bool, errs []error) {
	return b.took(rec, now, stage, held, changes, b.send(ctx, changes))
}

// took applies to rec the stages and what the hosts took of its changes
// (results, each change's error): apply's second half, which a round runs
// once every plan's changes have been sent together.
func (b *Broker) took(rec *planRecord, now time.Time, stage []int, held []bool, changes []bidChange, results []error) (changed bool, errs []error) {
	for i, err := range results {
		if err != nil {
			b.cfg.Metrics.Error("broker", "bids")
			errs = append(errs, fmt.Errorf("%s: %w", changes[i].host, err))
		}
	}
	changed = settleRound(rec, now, stage, held, changes, results)
	if accountRun(rec, now, changed, func() float64 { return b.heldShare(rec) }) {
		changed = true
	}
	return changed, errs
}

// bidChanges is what takes rec from its bids in force to want: for each
// host, in order, the bids to set (those whose rate moves past the
// tolerance, or all of them if keeping any would commit more than the
// plan has left) and the plan's bids to cancel.
func bidChanges(rec *planRecord, want []strategies.Allocation, now time.Time) []bidChange {
	type change struct {
		set    []wire.Bid
		cancel []string
	}
	changes := map[string]*change{}
	at := func(h string) *change {
		if changes[h] == nil {
			changes[h] = &change{}
		}
		return changes[h]
	}
	wanted := make(map[string]bool, len(want))
	for _, a := range want {
		wanted[a.VM] = true
	}
	for vm, cur := range rec.Bids {
		if !wanted[vm] && !cur.ended(now) {
			at(cur.Host).cancel = append(at(cur.Host).cancel, vm)
		}
	}
	keepAny := !overCommits(rec, want, now) // else every bid is sent anew
	for _, a := range want {
		if cur, ok := rec.Bids[a.VM]; ok && keepAny && keeps(cur, a, now) {
			continue
		}
		at(a.Host).set = append(at(a.Host).set, wire.Bid{VM: a.VM, Owner: rec.Plan.User, Plan: rec.Plan.ID, Hold: rec.Plan.Hold,
			Budget: a.Budget, Duration: wire.Duration(a.Duration)})
	}
	out := make([]bidChange, 0, len(changes))
	for _, h := range slices.Sorted(maps.Keys(changes)) {
		c := changes[h]
		sort.Slice(c.set, func(i, j int) bool { return c.set[i].VM < c.set[j].VM })
		if len(c.set) > 0 {
			// The request's other bids take them from this one.
			c.set[0].Mandate, c.set[0].More = rec.Mandate, rec.More
		}
		sort.Strings(c.cancel)
		req := &wire.BidRequest{Versioned: wire.Versioned{V: wire.Version}, Set: c.set, Cancel: c.cancel}
		if len(c.cancel) > 0 {
			req.Plan = rec.Plan.ID
		}
		out = append(out, bidChange{h, req})
	}
	return out
}

// send sends the changes, one batch per host (changes of several plans to
// one host travel together, in the order given; batches), and gives each
// change's error: many batches in flight (at most maxInFlight), since a
// round over thousands of hosts must not wait for each agent in turn.
func (b *Broker) send(ctx context.Context, changes []bidChange) []error {
	results := make([]error, len(changes))
	answered, _ := ctx.Value(answeredKey{}).(*atomic.Int64)
	all := batches(changes)
	b.parallel(len(all), maxInFlight, func(k int) {
		at := all[k]
		reqs := make([]*wire.BidRequest, len(at))
		for j, i := range at {
			reqs[j] = changes[i].req
		}
		for j, err := range b.cfg.Agents.Bid(ctx, changes[at[0]].host, reqs) {
			results[at[j]] = err
		}
		if answered != nil {
			answered.Add(1)
		}
	})
	return results
}

// maxBatchBytes bounds a batch's size, as far as it can be told before
// encoding (approxBytes): a host whose VMs serve many plans of huge
// mandates (a spend over 100,000 VMs signs 2 MB) gets them in several
// batches rather than one past NATS's largest message. A change is never
// split.
const maxBatchBytes = 4 << 20

// batches groups changes (by their index) into the batches send sends:
// by host, in the order the hosts first appear, each within maxBatchBytes
// and wire.MaxBidBatch.
func batches(changes []bidChange) [][]int {
	var out [][]int
	open := map[string]int{} // host → its batch being filled in out
	size := map[string]int{}
	for i, c := range changes {
		n := approxBytes(c.req)
		k, ok := open[c.host]
		if !ok || size[c.host]+n > maxBatchBytes || len(out[k]) == wire.MaxBidBatch {
			k = len(out)
			out = append(out, nil)
			open[c.host], size[c.host] = k, 0
		}
		out[k] = append(out[k], i)
		size[c.host] += n
	}
	return out
}

// approxBytes is about how many bytes req takes encoded: its bids and
// cancels, and the signed requests its bids carry (base64, a third more).
func approxBytes(req *wire.BidRequest) int {
	n := 64 + 32*len(req.Cancel)
	for i := range req.Set {
		b := &req.Set[i]
		n += 256
		if b.Mandate != nil {
			n += 256 + len(b.Mandate.Body)*4/3
		}
		for j := range b.More {
			n += 256 + len(b.More[j].Body)*4/3
		}
	}
	return n
}

// answeredKey is the context value send counts its hosts' answers in (a
// spend's start, for its progress).
type answeredKey struct{}

// settleRound applies to rec what the hosts took of a round: the active
// stages; on each host that took its change, the cancelled and replaced
// bids settled at what they charged and the new ones in force; bids that
// ran their course paid in full; and each of the plan's VMs showing its
// bid. It reports whether rec changed.
func settleRound(rec *planRecord, now time.Time, stage []int, held []bool, changes []bidChange, results []error) (changed bool) {
	changed = !slices.Equal(stage, rec.Plan.Stage) || !sameHeld(held, rec.Held)
	rec.Plan.Stage = stage
	rec.Held = held
	if !slices.Contains(held, true) {
		rec.Held = nil
	}
	for i, c := range changes {
		if results[i] != nil {
			continue
		}
		changed = true
		for _, vm := range c.req.Cancel {
			rec.Plan.Spent += rec.Bids[vm].charged(now)
			delete(rec.Bids, vm)
		}
		for _, bid := range c.req.Set {
			if cur, ok := rec.Bids[bid.VM]; ok {
				rec.Plan.Spent += cur.charged(now)
			}
			rec.Bids[bid.VM] = bidRec{Host: c.host, Budget: bid.Budget, Start: now, Duration: bid.Duration}
		}
	}
	for vm, cur := range rec.Bids {
		if cur.ended(now) {
			rec.Plan.Spent += cur.Budget
			delete(rec.Bids, vm)
			changed = true
		}
	}
	for i := range rec.Plan.VMs {
		v := &rec.Plan.VMs[i]
		if bid, ok := rec.Bids[v.VM]; ok {
			v.Host, v.Budget, v.Rate = bid.Host, bid.Budget, bid.rate()
		} else {
			v.Budget, v.Rate = 0, 0
		}
	}
	return changed
}

// cancelAll removes every bid of the plan from its hosts and settles
// them.
func (b *Broker) cancelAll(ctx context.Context, rec *planRecord, now time.Time) {
	b.stopBids(ctx, cancelChanges(rec))
	dropBids(rec, now)
}

// stopBids sends the bid cancellations, the hosts side by side. A host
// that does not answer keeps charging until the hold is released, which
// bounds it.
func (b *Broker) stopBids(ctx context.Context, stop []bidChange) {
	for _, err := range b.send(ctx, stop) {
		if err != nil {
			b.cfg.Metrics.Error("broker", "cancel_bids")
		}
	}
}

// cancelChanges are the requests that cancel all of rec's bids, by host:
// those it records and, for a plan still starting that a try of start may
// have bid for before its record was written, any on every VM it names
// (an agent ignores the cancel of a bid it does not have).
func cancelChanges(rec *planRecord) []bidChange {
	byHost := map[string][]string{}
	for vm, bid := range rec.Bids {
		byHost[bid.Host] = append(byHost[bid.Host], vm)
	}
	if rec.Plan.Status == planStarting && !rec.untried {
		for _, vm := range rec.Plan.VMs {
			if !slices.Contains(byHost[vm.Host], vm.VM) {
				byHost[vm.Host] = append(byHost[vm.Host], vm.VM)
			}
		}
	}
	out := make([]bidChange, 0, len(byHost))
	for _, h := range slices.Sorted(maps.Keys(byHost)) {
		vms := byHost[h]
		slices.Sort(vms)
		out = append(out, cancelOn(h, rec.Plan.ID, vms))
	}
	return out
}

// cancelOn is the request that cancels plan's bids on vms of host.
func cancelOn(host, plan string, vms []string) bidChange {
	return bidChange{host, &wire.BidRequest{Versioned: wire.Versioned{V: wire.Version}, Cancel: vms, Plan: plan}}
}

// dropBids settles all of rec's bids, and its VMs show none.
func dropBids(rec *planRecord, now time.Time) {
	payBids(rec, now)
	for i := range rec.Plan.VMs {
		rec.Plan.VMs[i].Budget, rec.Plan.VMs[i].Rate = 0, 0
	}
}

// payBids settles all of rec's bids at what they charged by now.
func payBids(rec *planRecord, now time.Time) {
	for vm, bid := range rec.Bids {
		rec.Plan.Spent += bid.charged(now)
		delete(rec.Bids, vm)
	}
}
