package bank

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// holdRef names a hold: its user and its id in that user's namespace.
type holdRef struct{ user, id string }

// capKey names a total captured: (hold, host, vm).
type capKey struct {
	holdRef
	host, vm string
}

// legKey names a capture leg: its id in its host's namespace.
type legKey struct{ host, id string }

type seenLeg struct {
	hold       holdRef
	vm         string
	cumulative money.Micro
}

// ErrOwnerNeeded refuses a capture leg naming a hold id several users
// have, without the VM's owner to say whose.
var ErrOwnerNeeded = fmt.Errorf("%w: several users have a hold of this id: the leg must name the VM's owner", wire.ErrBadRequest)

// Capture applies one agent tick's batch. Each leg raises the total
// captured for (hold, batch host, vm) to its Cumulative, cut to what the
// hold has left; a leg that fails (unknown, closed or expired hold, a host
// the hold does not allow) reports its error and the others still apply.
// The batch moves money once, as one transfer from escrow to the host's
// provider account. Batches arriving together are committed together, in
// one transaction (group.go): the reply is this batch's alone, as if it
// had been committed by itself.
func (b *Bank) Capture(ctx context.Context, batch *wire.CaptureBatch) (wire.CaptureReply, error) {
	if err := batch.Validate(); err != nil {
		return wire.CaptureReply{}, err
	}
	return b.captures.submit(ctx, b, batch)
}

// captureInput is everything a group of batches touches, read before
// anything is decided. A hold is one *capHold for every batch, so a batch
// sees what the batches decided before it took from the hold.
type captureInput struct {
	holds  map[string][]*capHold  // by id: every user's hold of that id
	totals map[capKey]money.Micro // captured so far
	stored map[capKey]bool        // the totals that have a row
	seen   map[legKey]seenLeg     // legs already applied
}

// hold is the hold leg captures from: the VM owner's hold of that id when
// the leg names the owner, else the one hold of that id.
func (in *captureInput) hold(leg wire.CaptureLeg) (*capHold, error) {
	cands := in.holds[leg.Hold]
	switch {
	case len(cands) == 0:
		return nil, fmt.Errorf("%w %q", ErrUnknownHold, leg.Hold)
	case leg.Owner != "":
		for _, h := range cands {
			if h.User == leg.Owner {
				return h, nil
			}
		}
		return nil, fmt.Errorf("%w: VM %q is %s's, hold %q is another user's", ErrNotOwner, leg.VM, leg.Owner, leg.Hold)
	case len(cands) > 1:
		return nil, fmt.Errorf("%w (hold %q, VM %q)", ErrOwnerNeeded, leg.Hold, leg.VM)
	}
	return cands[0], nil
}

// readCapture reads what batches touch in a constant number of statements
// whatever their number and size: the holds, their terms, the totals of
// the batches' hosts and the legs already applied.
func readCapture(ctx context.Context, t tx, batches []*wire.CaptureBatch) (*captureInput, error) {
	in := &captureInput{holds: map[string][]*capHold{}, totals: map[capKey]money.Micro{}, stored: map[capKey]bool{}, seen: map[legKey]seenLeg{}}
	var holdIDs, legHosts, legIDs []string
	for _, b := range batches {
		for _, l := range b.Legs {
			holdIDs = append(holdIDs, l.Hold)
			legHosts, legIDs = append(legHosts, b.Host), append(legIDs, l.ID)
		}
	}
	slices.Sort(holdIDs)
	holdIDs = slices.Compact(holdIDs)
	ids, args := t.s.table(textCol("id", holdIDs))
	err := eachRow(ctx, t, func(r *sql.Rows) error {
		h, err := scanCapHold(r)
		if err == nil {
			in.holds[h.ID] = append(in.holds[h.ID], h)
		}
		return err
	}, `SELECT `+capHoldColumns+` FROM holds WHERE id IN (`+ids+`) ORDER BY id, user_id`, args...)
	if err != nil {
		return nil, err
	}
	if err := readTerms(ctx, t, in, batches); err != nil {
		return nil, err
	}
	var users, holds, hosts []string
	for _, hh := range hostHolds(in, batches) {
		for _, h := range in.holds[hh.id] {
			users, holds, hosts = append(users, h.User), append(holds, h.ID), append(hosts, hh.host)
		}
	}
	if len(users) > 0 {
		keys, args := t.s.table(textCol("hu", users), textCol("hid", holds), textCol("hhost", hosts))
		err = eachRow(ctx, t, func(r *sql.Rows) error {
			var k capKey
			var total int64
			if err := r.Scan(&k.user, &k.id, &k.host, &k.vm, &total); err != nil {
				return err
			}
			in.totals[k], in.stored[k] = money.Micro(total), true
			return nil
		}, `SELECT c.hold_user, c.hold, c.host, c.vm, c.total FROM (`+keys+`) AS k
			JOIN captures c ON c.hold_user = k.hu AND c.hold = k.hid AND c.host = k.hhost`, args...)
		if err != nil {
			return nil, err
		}
	}
	keys, args := t.s.table(textCol("lhost", legHosts), textCol("lid", legIDs))
	err = eachRow(ctx, t, func(r *sql.Rows) error {
		var k legKey
		var s seenLeg
		var cum int64
		if err := r.Scan(&k.host, &k.id, &s.hold.user, &s.hold.id, &s.vm, &cum); err != nil {
			return err
		}
		s.cumulative = money.Micro(cum)
		in.seen[k] = s
		return nil
	}, `SELECT l.host, l.id, l.hold_user, l.hold, l.vm, l.cumulative FROM (`+keys+`) AS k
		JOIN capture_legs l ON l.host = k.lhost AND l.id = k.lid`, args...)
	if err != nil {
		return nil, err
	}
	return in, nil
}

// hostHold is a hold id some batch of host captures from.
type hostHold struct{ host, id string }

// hostHolds lists, once each, the (host, hold id) pairs of batches whose
// hold id names a hold in.
func hostHolds(in *captureInput, batches []*wire.CaptureBatch) []hostHold {
	seen := map[hostHold]bool{}
	var out []hostHold
	for _, b := range batches {
		for _, l := range b.Legs {
			hh := hostHold{b.Host, l.Hold}
			if !seen[hh] && len(in.holds[l.Hold]) > 0 {
				seen[hh] = true
				out = append(out, hh)
			}
		}
	}
	return out
}

// captureDecision is a batch decided: the reply, and what to write.
type captureDecision struct {
	rep       wire.CaptureReply
	fresh     []newLeg                // legs to record
	changed   []capKey                // totals that moved
	holdDelta map[holdRef]money.Micro // captured per hold
	firstID   string                  // the first leg that moved money names the transfer
}

type newLeg struct {
	wire.CaptureLeg
	holdUser string
	applied  money.Micro
}

// decideCapture applies the capture rule to every leg in order, updating
// in's holds, totals and legs as it goes (later legs of a hold, and later
// batches of a group, see earlier ones);
// strict: the bank knows identities (a hold without terms is not captured).
func decideCapture(batch *wire.CaptureBatch, in *captureInput, now time.Time, strict bool) captureDecision {
	d := captureDecision{rep: wire.CaptureReply{Legs: make([]wire.LegResult, len(batch.Legs))}, holdDelta: map[holdRef]money.Micro{}}
	for i, leg := range batch.Legs {
		res := wire.LegResult{ID: leg.ID, Hold: leg.Hold, VM: leg.VM}
		h, err := in.hold(leg)
		if err != nil {
			res.Error = wire.ToError(err)
			d.rep.Legs[i] = res
			continue
		}
		ref := holdRef{h.User, h.ID}
		k := capKey{ref, batch.Host, leg.VM}
		res.Captured, res.Exhausted = in.totals[k], h.Remaining() == 0
		if s, ok := in.seen[legKey{batch.Host, leg.ID}]; ok {
			if s.hold != ref || s.vm != leg.VM || s.cumulative != leg.Cumulative {
				res.Error = wire.ToError(fmt.Errorf("%w: capture leg %q", ErrIDReused, leg.ID))
			}
			d.rep.Legs[i] = res // a replay moves nothing
			continue
		}
		c := CaptureLeg(in.totals[k], leg.Cumulative, h.Remaining(), h.bound(in.totals[k], now))
		refusal := refuseLeg(&h.HoldInfo, batch.Host, now, c)
		if refusal == nil {
			refusal = h.refusal(leg.VM, batch.Host, strict)
		}
		if refusal != nil {
			res.Error = wire.ToError(refusal)
			d.rep.Legs[i] = res
			continue
		}
		if c.Applied > 0 {
			h.Captured += c.Applied
			in.totals[k] = c.Total
			d.holdDelta[ref] += c.Applied
			d.changed = append(d.changed, k)
			d.rep.Applied += c.Applied
			if d.firstID == "" {
				d.firstID = leg.ID
			}
		}
		d.fresh = append(d.fresh, newLeg{leg, h.User, c.Applied})
		in.seen[legKey{batch.Host, leg.ID}] = seenLeg{ref, leg.VM, leg.Cumulative} // for a later batch of the group
		res.Applied, res.Captured, res.Exhausted, res.Cut = c.Applied, c.Total, c.Exhausted, c.Cut
		d.rep.Legs[i] = res
	}
	return d
}

// refuseLeg is why a fresh leg on hold h may not capture, or nil.
func refuseLeg(h *wire.HoldInfo, host string, now time.Time, c LegCapture) error {
	switch {
	case h.Status != wire.HoldOpen:
		return fmt.Errorf("%w: %q", ErrHoldClosed, h.ID)
	case !now.Before(h.Expires):
		return fmt.Errorf("%w: %q at %s", ErrHoldExpired, h.ID, h.Expires.Format(time.RFC3339))
	case len(h.Hosts) > 0 && !slices.Contains(h.Hosts, host):
		return fmt.Errorf("%w: %s on hold %q", ErrNotBeneficiary, host, h.ID)
	case c.Refused:
		return fmt.Errorf("%w: hold %q is exhausted (%s captured of %s)", ErrHoldExhausted, h.ID, h.Captured, h.Amount)
	}
	return nil
}

// writeCapture writes decided batches (ds[i] decides batches[i]) in a
// constant number of statements: a transfer per batch that moved money,
// the provider accounts credited, the holds, the totals, the legs.
func writeCapture(ctx context.Context, t tx, batches []*wire.CaptureBatch, ds []captureDecision, in *captureInput, now time.Time) error {
	if err := writeCaptureTransfers(ctx, t, batches, ds, now); err != nil {
		return err
	}
	holdDelta := map[holdRef]money.Micro{}
	var changed []capKey
	for _, d := range ds {
		for ref, delta := range d.holdDelta {
			holdDelta[ref] += delta
		}
		changed = append(changed, d.changed...)
	}
	if len(holdDelta) > 0 {
		refs := slices.SortedFunc(maps.Keys(holdDelta), func(a, b holdRef) int { return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.user, b.user)) })
		var users, ids []string
		var deltas []int64
		for _, ref := range refs {
			users, ids, deltas = append(users, ref.user), append(ids, ref.id), append(deltas, int64(holdDelta[ref]))
		}
		src, args := t.s.table(textCol("hu", users), textCol("hid", ids), intCol("delta", deltas))
		if _, err := t.exec(ctx, `UPDATE holds SET captured = captured + p.delta FROM (`+src+`) AS p
			WHERE holds.user_id = p.hu AND holds.id = p.hid`, args...); err != nil {
			return err
		}
	}
	slices.SortFunc(changed, func(a, b capKey) int {
		return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.user, b.user), cmp.Compare(a.host, b.host), cmp.Compare(a.vm, b.vm))
	})
	changed = slices.Compact(changed)
	// The totals read are updated and the others inserted, each in one
	// statement: an upsert costs PostgreSQL a speculative insertion and its
	// conflict per row, about twice an update's work.
	var stored, fresh []capKey
	for _, k := range changed {
		if in.stored[k] {
			stored = append(stored, k)
		} else {
			fresh = append(fresh, k)
		}
	}
	if len(stored) > 0 {
		src, args := totalsTable(t, stored, in.totals)
		if _, err := t.exec(ctx, `UPDATE captures SET total = p.total FROM (`+src+`) AS p
			WHERE captures.hold_user = p.hu AND captures.hold = p.hid AND captures.host = p.host AND captures.vm = p.vm`, args...); err != nil {
			return err
		}
	}
	if len(fresh) > 0 {
		src, args := totalsTable(t, fresh, in.totals)
		if _, err := t.exec(ctx, `INSERT INTO captures (hold_user, hold, host, vm, total) SELECT hu, hid, host, vm, total FROM (`+src+`) AS p`, args...); err != nil {
			return err
		}
	}
	var hosts, ids, users, holds, vms []string
	var cums, applied, at []int64
	for i, d := range ds {
		for _, l := range d.fresh {
			hosts, ids, users, holds, vms = append(hosts, batches[i].Host), append(ids, l.ID), append(users, l.holdUser), append(holds, l.Hold), append(vms, l.VM)
			cums, applied, at = append(cums, int64(l.Cumulative)), append(applied, int64(l.applied)), append(at, now.UnixNano())
		}
	}
	if len(ids) == 0 {
		return nil
	}
	src, args := t.s.table(textCol("host", hosts), textCol("id", ids), textCol("hu", users), textCol("hid", holds), textCol("vm", vms),
		intCol("cumulative", cums), intCol("applied", applied), intCol("at", at))
	_, err := t.exec(ctx, `INSERT INTO capture_legs (host, id, hold_user, hold, vm, cumulative, applied, at)
		SELECT host, id, hu, hid, vm, cumulative, applied, at FROM (`+src+`) AS p`, args...)
	return err
}

// totalsTable is the table of keys' totals.
func totalsTable(t tx, keys []capKey, totals map[capKey]money.Micro) (string, []any) {
	var users, ids, hosts, vms []string
	var sums []int64
	for _, k := range keys {
		users, ids, hosts, vms = append(users, k.user), append(ids, k.id), append(hosts, k.host), append(vms, k.vm)
		sums = append(sums, int64(totals[k]))
	}
	return t.s.table(textCol("hu", users), textCol("hid", ids), textCol("host", hosts), textCol("vm", vms), intCol("total", sums))
}

// writeCaptureTransfers records one transfer from escrow to its host's
// provider account for every batch that moved money, and credits each
// account once. The escrow's balance is derived (ledger.go), so
// no row is written for it.
func writeCaptureTransfers(ctx context.Context, t tx, batches []*wire.CaptureBatch, ds []captureDecision, now time.Time) error {
	credit := map[string]money.Micro{}
	var scopes, ids, fps, memos []string
	var amounts []int64
	for i, d := range ds {
		if d.rep.Applied == 0 {
			continue
		}
		provider := ProviderAccount(batches[i].Host)
		if d.rep.Applied > money.Max {
			return fmt.Errorf("%w: transfer %s of %s", wire.ErrBadRequest, "capture:"+d.firstID, d.rep.Applied)
		}
		credit[provider] += d.rep.Applied
		scopes, ids, amounts = append(scopes, provider), append(ids, "capture:"+d.firstID), append(amounts, int64(d.rep.Applied))
		fps = append(fps, fingerprint("capture", batches[i].Host, batches[i].Tick, len(d.fresh)))
		memos = append(memos, fmt.Sprintf("%d legs, round %d", len(d.fresh), batches[i].Tick))
	}
	if len(credit) == 0 {
		return nil
	}
	accounts := slices.Sorted(maps.Keys(credit))
	var sums []int64
	for _, a := range accounts {
		if credit[a] > maxBalance {
			return fmt.Errorf("%w: %s", ErrOverflow, a)
		}
		sums = append(sums, int64(credit[a]))
	}
	// One statement creates the accounts of hosts paid for the first time
	// and credits the others, unless that would pass maxBalance.
	src, args := t.s.table(textCol("id", accounts), intCol("amount", sums))
	res, err := t.exec(ctx, `INSERT INTO accounts (id, kind, balance, created) SELECT id, CAST(? AS TEXT), amount, CAST(? AS BIGINT) FROM (`+src+`) AS p
		WHERE true ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + excluded.balance WHERE accounts.balance <= ? - excluded.balance`,
		slices.Concat([]any{wire.AccountProvider, now.UnixNano()}, args, []any{int64(maxBalance)})...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(len(accounts)) {
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: %s", ErrOverflow, strings.Join(accounts, ", "))
	}
	src, args = t.s.table(textCol("scope", scopes), textCol("id", ids), intCol("amount", amounts), textCol("fp", fps), textCol("memo", memos))
	_, err = t.exec(ctx, `INSERT INTO transfers (scope, id, kind, debit, credit, amount, fingerprint, memo, at)
		SELECT scope, id, 'capture', CAST(? AS TEXT), scope, amount, fp, memo, CAST(? AS BIGINT) FROM (`+src+`) AS p`,
		append([]any{EscrowAccount, now.UnixNano()}, args...)...)
	return err
}
