package bank

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// chunk bounds the rows of one multi-row statement (placeholders stay far
// below SQLite's 32,766 and PostgreSQL's 65,535).
const chunk = 1000

// holdRef names a hold: its user and its id in that user's namespace.
type holdRef struct{ user, id string }

type capKey struct {
	holdRef
	vm string
}

type seenLeg struct {
	hold       holdRef
	vm         string
	cumulative money.Micro
}

// ErrOwnerNeeded refuses a capture leg naming a hold id several users
// have, without the VM's owner to say whose.
var ErrOwnerNeeded = fmt.Errorf("%w: several users have a hold of this id: the leg must name the VM's owner", wire.ErrBadRequest)

// Capture applies one agent tick's batch in one transaction, set-wise: a
// handful of statements whatever the batch size. Each leg raises the total
// captured for (hold, batch host, vm) to its Cumulative, cut to what the hold
// has left; a leg that fails (unknown, closed or expired hold, a host the
// hold does not allow) reports its error and the others still apply. The
// batch moves money once, as one transfer from escrow to the host's provider
// account.
func (b *Bank) Capture(ctx context.Context, batch *wire.CaptureBatch) (wire.CaptureReply, error) {
	if err := batch.Validate(); err != nil {
		return wire.CaptureReply{}, err
	}
	var rep wire.CaptureReply
	err := b.audited(ctx, func() any { return rep }, func(t tx) error {
		var err error
		rep, err = b.capture(ctx, t, batch)
		return err
	})
	return rep, err
}

func (b *Bank) capture(ctx context.Context, t tx, batch *wire.CaptureBatch) (wire.CaptureReply, error) {
	now := b.now()
	in, err := readCapture(ctx, t, batch)
	if err != nil {
		return wire.CaptureReply{Legs: make([]wire.LegResult, len(batch.Legs))}, err
	}
	d := decideCapture(batch, in, now, b.adminKey != "")
	return d.rep, writeCapture(ctx, t, batch, in.totals, d, now)
}

// captureInput is everything a batch touches, read before anything is decided.
type captureInput struct {
	holds  map[string][]*capHold  // by id: every user's hold of that id
	totals map[capKey]money.Micro // captured so far on the batch's host
	seen   map[string]seenLeg     // legs of the batch's host already applied, by id
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

func readCapture(ctx context.Context, t tx, batch *wire.CaptureBatch) (*captureInput, error) {
	in := &captureInput{holds: map[string][]*capHold{}, totals: map[capKey]money.Micro{}, seen: map[string]seenLeg{}}
	var holdIDs, legIDs []string
	for _, l := range batch.Legs {
		holdIDs = append(holdIDs, l.Hold)
		legIDs = append(legIDs, l.ID)
	}
	slices.Sort(holdIDs)
	holdIDs = slices.Compact(holdIDs)
	for part := range slices.Chunk(holdIDs, chunk) {
		err := eachRow(ctx, t, func(r *sql.Rows) error {
			h, err := scanCapHold(r)
			if err == nil {
				in.holds[h.ID] = append(in.holds[h.ID], h)
			}
			return err
		}, `SELECT `+capHoldColumns+` FROM holds WHERE id IN (`+inList(len(part))+`) ORDER BY id, user_id`, anys(part)...)
		if err != nil {
			return nil, err
		}
		if err := readTerms(ctx, t, in, batch.Host, part); err != nil {
			return nil, err
		}
		err = eachRow(ctx, t, func(r *sql.Rows) error {
			var k capKey
			var total int64
			if err := r.Scan(&k.user, &k.id, &k.vm, &total); err != nil {
				return err
			}
			in.totals[k] = money.Micro(total)
			return nil
		}, `SELECT hold_user, hold, vm, total FROM captures WHERE host = ? AND hold IN (`+inList(len(part))+`)`, append([]any{batch.Host}, anys(part)...)...)
		if err != nil {
			return nil, err
		}
	}
	for part := range slices.Chunk(legIDs, chunk) {
		err := eachRow(ctx, t, func(r *sql.Rows) error {
			var id string
			var s seenLeg
			var cum int64
			if err := r.Scan(&id, &s.hold.user, &s.hold.id, &s.vm, &cum); err != nil {
				return err
			}
			s.cumulative = money.Micro(cum)
			in.seen[id] = s
			return nil
		}, `SELECT id, hold_user, hold, vm, cumulative FROM capture_legs WHERE host = ? AND id IN (`+inList(len(part))+`)`,
			append([]any{batch.Host}, anys(part)...)...)
		if err != nil {
			return nil, err
		}
	}
	return in, nil
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
// in's holds and totals as it goes (later legs of a hold see earlier ones);
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
		k := capKey{ref, leg.VM}
		res.Captured, res.Exhausted = in.totals[k], h.Remaining() == 0
		if s, ok := in.seen[leg.ID]; ok {
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

// writeCapture writes a decided batch: one transfer, the holds, the totals,
// the legs.
func writeCapture(ctx context.Context, t tx, batch *wire.CaptureBatch, totals map[capKey]money.Micro, d captureDecision, now time.Time) error {
	if d.rep.Applied > 0 {
		provider := ProviderAccount(batch.Host)
		if err := ensureAccount(ctx, t, provider, wire.AccountProvider, now); err != nil {
			return err
		}
		fp := fingerprint("capture", batch.Host, batch.Tick, len(d.fresh))
		memo := fmt.Sprintf("%d legs, round %d", len(d.fresh), batch.Tick)
		if err := transfer(ctx, t, "capture:"+d.firstID, "capture", EscrowAccount, provider, d.rep.Applied, fp, memo, now); err != nil {
			return err
		}
	}
	for ref, delta := range d.holdDelta {
		if _, err := t.exec(ctx, `UPDATE holds SET captured = captured + ? WHERE user_id = ? AND id = ?`, int64(delta), ref.user, ref.id); err != nil {
			return err
		}
	}
	changed := d.changed
	slices.SortFunc(changed, func(a, b capKey) int {
		return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(a.user, b.user), cmp.Compare(a.vm, b.vm))
	})
	changed = slices.Compact(changed)
	for part := range slices.Chunk(changed, chunk) {
		args := make([]any, 0, 5*len(part))
		for _, k := range part {
			args = append(args, k.user, k.id, batch.Host, k.vm, int64(totals[k]))
		}
		if _, err := t.exec(ctx, `INSERT INTO captures (hold_user, hold, host, vm, total) VALUES `+rowsOf(len(part), 5)+
			` ON CONFLICT (hold_user, hold, host, vm) DO UPDATE SET total = excluded.total`, args...); err != nil {
			return err
		}
	}
	for part := range slices.Chunk(d.fresh, chunk) {
		args := make([]any, 0, 8*len(part))
		for _, l := range part {
			args = append(args, batch.Host, l.ID, l.holdUser, l.Hold, l.VM, int64(l.Cumulative), int64(l.applied), now.UnixNano())
		}
		if _, err := t.exec(ctx, `INSERT INTO capture_legs (host, id, hold_user, hold, vm, cumulative, applied, at) VALUES `+rowsOf(len(part), 8), args...); err != nil {
			return err
		}
	}
	return nil
}

// rowsOf returns "(?, ?), (?, ?)" for n rows of cols values.
func rowsOf(n, cols int) string {
	row := "(" + inList(cols) + ")"
	out := make([]byte, 0, n*(len(row)+2))
	for i := range n {
		if i > 0 {
			out = append(out, ", "...)
		}
		out = append(out, row...)
	}
	return string(out)
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
