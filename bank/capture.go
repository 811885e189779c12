package bank

import (
	"context"
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
	rep := wire.CaptureReply{Legs: make([]wire.LegResult, len(batch.Legs))}
	now := b.now()
	provider := ProviderAccount(batch.Host)

	// Read everything the batch touches.
	var holdIDs, legIDs []string
	for _, l := range batch.Legs {
		holdIDs = append(holdIDs, l.Hold)
		legIDs = append(legIDs, l.ID)
	}
	slices.Sort(holdIDs)
	holdIDs = slices.Compact(holdIDs)
	holds := map[string]*wire.HoldInfo{}
	totals := map[capKey]money.Micro{}
	for part := range slices.Chunk(holdIDs, chunk) {
		rows, err := t.query(ctx, `SELECT `+holdColumns+` FROM holds WHERE id IN (`+inList(len(part))+`)`, anys(part)...)
		if err != nil {
			return rep, err
		}
		for rows.Next() {
			h, err := scanHold(rows)
			if err != nil {
				rows.Close()
				return rep, err
			}
			holds[h.ID] = &h
		}
		if err := rows.Close(); err != nil {
			return rep, err
		}
		rows, err = t.query(ctx, `SELECT hold, vm, total FROM captures WHERE host = ? AND hold IN (`+inList(len(part))+`)`, append([]any{batch.Host}, anys(part)...)...)
		if err != nil {
			return rep, err
		}
		for rows.Next() {
			var k capKey
			var total int64
			if err := rows.Scan(&k.hold, &k.vm, &total); err != nil {
				rows.Close()
				return rep, err
			}
			totals[k] = money.Micro(total)
		}
		if err := rows.Close(); err != nil {
			return rep, err
		}
	}
	seen := map[string]seenLeg{}
	for part := range slices.Chunk(legIDs, chunk) {
		rows, err := t.query(ctx, `SELECT id, hold, host, vm, cumulative FROM capture_legs WHERE id IN (`+inList(len(part))+`)`, anys(part)...)
		if err != nil {
			return rep, err
		}
		for rows.Next() {
			var id string
			var s seenLeg
			var cum int64
			if err := rows.Scan(&id, &s.hold, &s.host, &s.vm, &cum); err != nil {
				rows.Close()
				return rep, err
			}
			s.cumulative = money.Micro(cum)
			seen[id] = s
		}
		if err := rows.Close(); err != nil {
			return rep, err
		}
	}

	// Decide every leg.
	type newLeg struct {
		wire.CaptureLeg
		applied money.Micro
	}
	var (
		fresh     []newLeg
		changed   []capKey
		holdDelta = map[string]money.Micro{}
		firstID   string
	)
	for i, leg := range batch.Legs {
		res := wire.LegResult{ID: leg.ID, Hold: leg.Hold, VM: leg.VM}
		h := holds[leg.Hold]
		k := capKey{leg.Hold, leg.VM}
		if h == nil {
			res.Error = wire.ToError(fmt.Errorf("%w %q", ErrUnknownHold, leg.Hold))
			rep.Legs[i] = res
			continue
		}
		res.Captured, res.Exhausted = totals[k], h.Remaining() == 0
		if s, ok := seen[leg.ID]; ok {
			if s.hold != leg.Hold || s.host != batch.Host || s.vm != leg.VM || s.cumulative != leg.Cumulative {
				res.Error = wire.ToError(fmt.Errorf("%w: capture leg %q", ErrIDReused, leg.ID))
			}
			rep.Legs[i] = res // a replay moves nothing
			continue
		}
		var refusal error
		switch {
		case h.Status != wire.HoldOpen:
			refusal = fmt.Errorf("%w: %q", ErrHoldClosed, leg.Hold)
		case !now.Before(h.Expires):
			refusal = fmt.Errorf("%w: %q at %s", ErrHoldExpired, leg.Hold, h.Expires.Format(time.RFC3339))
		case len(h.Hosts) > 0 && !slices.Contains(h.Hosts, batch.Host):
			refusal = fmt.Errorf("%w: %s on hold %q", ErrNotBeneficiary, batch.Host, leg.Hold)
		case h.Remaining() == 0 && leg.Cumulative > totals[k]:
			refusal = fmt.Errorf("%w: hold %q is exhausted (%s captured of %s)", ErrHoldExhausted, leg.Hold, h.Captured, h.Amount)
		}
		if refusal != nil {
			res.Error = wire.ToError(refusal)
			rep.Legs[i] = res
			continue
		}
		delta := min(max(leg.Cumulative-totals[k], 0), h.Remaining())
		if delta > 0 {
			h.Captured += delta
			totals[k] += delta
			holdDelta[leg.Hold] += delta
			changed = append(changed, k)
			rep.Applied += delta
			if firstID == "" {
				firstID = leg.ID
			}
		}
		fresh = append(fresh, newLeg{leg, delta})
		res.Applied, res.Captured, res.Exhausted = delta, totals[k], h.Remaining() == 0
		rep.Legs[i] = res
	}

	// Write: one transfer, the holds, the totals, the legs.
	if rep.Applied > 0 {
		if err := ensureAccount(ctx, t, provider, wire.AccountProvider, now); err != nil {
			return rep, err
		}
		fp := fingerprint("capture", batch.Host, batch.Tick, len(fresh))
		memo := fmt.Sprintf("%d legs, round %d", len(fresh), batch.Tick)
		if err := transfer(ctx, t, "capture:"+firstID, "capture", EscrowAccount, provider, rep.Applied, fp, memo, now); err != nil {
			return rep, err
		}
	}
	for id, d := range holdDelta {
		if _, err := t.exec(ctx, `UPDATE holds SET captured = captured + ? WHERE id = ?`, int64(d), id); err != nil {
			return rep, err
		}
	}
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
			return rep, err
		}
	}
	for part := range slices.Chunk(fresh, chunk) {
		args := make([]any, 0, 7*len(part))
		for _, l := range part {
			args = append(args, l.ID, l.Hold, batch.Host, l.VM, int64(l.Cumulative), int64(l.applied), now.UnixNano())
		}
		if _, err := t.exec(ctx, `INSERT INTO capture_legs (id, hold, host, vm, cumulative, applied, at) VALUES `+rowsOf(len(part), 7), args...); err != nil {
			return rep, err
		}
	}
	return rep, nil
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
