package bank

import (
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

type capKey struct{ hold, vm string }

type seenLeg struct {
	hold, host, vm string
	cumulative     money.Micro
}

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
	err := b.st.run(ctx, func(t tx) error {
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
	d := decideCapture(batch, in, now)
	return d.rep, writeCapture(ctx, t, batch, in.totals, d, now)
}

// captureInput is everything a batch touches, read before anything is decided.
type captureInput struct {
	holds  map[string]*wire.HoldInfo
	totals map[capKey]money.Micro // captured so far on the batch's host
	seen   map[string]seenLeg     // legs of the batch already applied, by id
}

func readCapture(ctx context.Context, t tx, batch *wire.CaptureBatch) (*captureInput, error) {
	in := &captureInput{holds: map[string]*wire.HoldInfo{}, totals: map[capKey]money.Micro{}, seen: map[string]seenLeg{}}
	var holdIDs, legIDs []string
	for _, l := range batch.Legs {
		holdIDs = append(holdIDs, l.Hold)
		legIDs = append(legIDs, l.ID)
	}
	slices.Sort(holdIDs)
	holdIDs = slices.Compact(holdIDs)
	for part := range slices.Chunk(holdIDs, chunk) {
		err := eachRow(ctx, t, func(r *sql.Rows) error {
			h, err := scanHold(r)
			if err == nil {
				in.holds[h.ID] = &h
			}
			return err
		}, `SELECT `+holdColumns+` FROM holds WHERE id IN (`+inList(len(part))+`)`, anys(part)...)
		if err != nil {
			return nil, err
		}
		err = eachRow(ctx, t, func(r *sql.Rows) error {
			var k capKey
			var total int64
			if err := r.Scan(&k.hold, &k.vm, &total); err != nil {
				return err
			}
			in.totals[k] = money.Micro(total)
			return nil
		}, `SELECT hold, vm, total FROM captures WHERE host = ? AND hold IN (`+inList(len(part))+`)`, append([]any{batch.Host}, anys(part)...)...)
		if err != nil {
			return nil, err
		}
	}
	for part := range slices.Chunk(legIDs, chunk) {
		err := eachRow(ctx, t, func(r *sql.Rows) error {
			var id string
			var s seenLeg
			var cum int64
			if err := r.Scan(&id, &s.hold, &s.host, &s.vm, &cum); err != nil {
				return err
			}
			s.cumulative = money.Micro(cum)
			in.seen[id] = s
			return nil
		}, `SELECT id, hold, host, vm, cumulative FROM capture_legs WHERE id IN (`+inList(len(part))+`)`, anys(part)...)
		if err != nil {
			return nil, err
		}
	}
	return in, nil
}

// captureDecision is a batch decided: the reply, and what to write.
type captureDecision struct {
	rep       wire.CaptureReply
	fresh     []newLeg               // legs to record
	changed   []capKey               // totals that moved
	holdDelta map[string]money.Micro // captured per hold
	firstID   string                 // the first leg that moved money names the transfer
}

type newLeg struct {
	wire.CaptureLeg
	applied money.Micro
}

// decideCapture applies the capture rule to every leg in order, updating
// in's holds and totals as it goes (later legs of a hold see earlier ones).
func decideCapture(batch *wire.CaptureBatch, in *captureInput, now time.Time) captureDecision {
	d := captureDecision{rep: wire.CaptureReply{Legs: make([]wire.LegResult, len(batch.Legs))}, holdDelta: map[string]money.Micro{}}
	for i, leg := range batch.Legs {
		res := wire.LegResult{ID: leg.ID, Hold: leg.Hold, VM: leg.VM}
		h := in.holds[leg.Hold]
		k := capKey{leg.Hold, leg.VM}
		if h == nil {
			res.Error = wire.ToError(fmt.Errorf("%w %q", ErrUnknownHold, leg.Hold))
			d.rep.Legs[i] = res
			continue
		}
		res.Captured, res.Exhausted = in.totals[k], h.Remaining() == 0
		if s, ok := in.seen[leg.ID]; ok {
			if s.hold != leg.Hold || s.host != batch.Host || s.vm != leg.VM || s.cumulative != leg.Cumulative {
				res.Error = wire.ToError(fmt.Errorf("%w: capture leg %q", ErrIDReused, leg.ID))
			}
			d.rep.Legs[i] = res // a replay moves nothing
			continue
		}
		c := CaptureLeg(in.totals[k], leg.Cumulative, h.Remaining())
		refusal := refuseLeg(h, batch.Host, now, c)
		if leg.Owner != "" && leg.Owner != h.User {
			refusal = fmt.Errorf("%w: VM %q is %s's, hold %q is another user's", ErrNotOwner, leg.VM, leg.Owner, h.ID)
		}
		if refusal != nil {
			res.Error = wire.ToError(refusal)
			d.rep.Legs[i] = res
			continue
		}
		if c.Applied > 0 {
			h.Captured += c.Applied
			in.totals[k] = c.Total
			d.holdDelta[leg.Hold] += c.Applied
			d.changed = append(d.changed, k)
			d.rep.Applied += c.Applied
			if d.firstID == "" {
				d.firstID = leg.ID
			}
		}
		d.fresh = append(d.fresh, newLeg{leg, c.Applied})
		res.Applied, res.Captured, res.Exhausted = c.Applied, c.Total, c.Exhausted
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
	for id, delta := range d.holdDelta {
		if _, err := t.exec(ctx, `UPDATE holds SET captured = captured + ? WHERE id = ?`, int64(delta), id); err != nil {
			return err
		}
	}
	changed := d.changed
	slices.SortFunc(changed, func(a, b capKey) int {
		if a.hold != b.hold {
			return compare(a.hold, b.hold)
		}
		return compare(a.vm, b.vm)
	})
	changed = slices.Compact(changed)
	for part := range slices.Chunk(changed, chunk) {
		args := make([]any, 0, 4*len(part))
		for _, k := range part {
			args = append(args, k.hold, batch.Host, k.vm, int64(totals[k]))
		}
		if _, err := t.exec(ctx, `INSERT INTO captures (hold, host, vm, total) VALUES `+rowsOf(len(part), 4)+
			` ON CONFLICT (hold, host, vm) DO UPDATE SET total = excluded.total`, args...); err != nil {
			return err
		}
	}
	for part := range slices.Chunk(d.fresh, chunk) {
		args := make([]any, 0, 7*len(part))
		for _, l := range part {
			args = append(args, l.ID, l.Hold, batch.Host, l.VM, int64(l.Cumulative), int64(l.applied), now.UnixNano())
		}
		if _, err := t.exec(ctx, `INSERT INTO capture_legs (id, hold, host, vm, cumulative, applied, at) VALUES `+rowsOf(len(part), 7), args...); err != nil {
			return err
		}
	}
	return nil
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
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
