package bank

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Terms (migration 0006): a hold a broker placed with its user's mandate
// keeps what the mandate allows, and every capture leg is checked against
// it in the capture's transaction:
//
//   - placement: the leg's VM is one the hold's placement puts on the
//     capturing host (the broker placed it from its registry; every VM
//     one the mandate names), else the leg is refused (ErrNotPlaced);
//   - schedule: what the hold has paid after the leg is at most
//     mandate.Allowed(its terms, now) — the hold's amount from its
//     creation on the bank's clock over the mandate's pace, each extension
//     from when it was made over what is left of that pace — and what the
//     leg's VM has taken at most its VM share of that (mandate.ShareOf);
//     a leg asking more is cut to the bound by the capture rule
//     (CaptureLeg) and its result says so (LegResult.Cut), the rest left
//     for a later leg of the same cumulative total once it is allowed.
//
// So the most a host's agent (or a thief with its key) takes from a hold by
// time t is its VMs' shares of the schedule Slack ahead, what the honest
// agent could have charged by then. A hold without terms — a user's own,
// or a broker's placed without identities — follows the old rule (the
// hold's remainder, its hosts, its expiry) only where the bank knows no
// identities (the simulator, tests); a bank with an admin key lets no
// agent capture it (ErrNoTerms). Holds placed before the migration keep
// the old rule until they close.

// The kinds of a hold's terms (holds.terms).
const (
	termsOld     = "old"     // placed before migration 0006
	termsNone    = "none"    // no mandate
	termsMandate = "mandate" // bound to its user's mandate
)

// Errors of the leg check.
var (
	ErrNoTerms   = fmt.Errorf("%w: the hold has no mandate's terms: agents capture only a hold its user's mandate placed", wire.ErrForbidden)
	ErrNotPlaced = fmt.Errorf("%w: the hold's mandate does not place the VM on this host", wire.ErrForbidden)
)

// NoBound is the bound of a leg on a hold without terms: only the hold's
// remainder cuts it.
const NoBound = money.Micro(1<<63 - 1)

// signingNow is now on the signers' clock (Options.SigningClock).
func (b *Bank) signingNow() time.Time {
	if b.signingClock != nil {
		return b.signingClock()
	}
	return time.Now()
}

// writeTerms records the terms of a new hold m funds, at now: its
// schedule's first term and its placement.
func writeTerms(ctx context.Context, t tx, req *wire.HoldRequest, m *mandate.Mandate, now time.Time) error {
	if _, err := t.exec(ctx, `INSERT INTO hold_terms (hold_user, hold, ext, amount, start, pace) VALUES (?, ?, '', ?, ?, ?)`,
		req.User, req.ID, int64(req.Amount), now.UnixNano(), int64(m.Pace)); err != nil {
		return err
	}
	if len(req.Placement) == 0 {
		return nil
	}
	n := len(req.Placement)
	users, ids, vms, hosts := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, p := range req.Placement {
		users[i], ids[i], vms[i], hosts[i] = req.User, req.ID, p.VM, p.Host
	}
	src, args := t.s.table(textCol("hu", users), textCol("hid", ids), textCol("vm", vms), textCol("host", hosts))
	_, err := t.exec(ctx, `INSERT INTO hold_vms (hold_user, hold, vm, host) SELECT hu, hid, vm, host FROM (`+src+`) AS p`, args...)
	return err
}

// extendTerms adds an extension's term to h's schedule, when h has terms:
// amount from now over what is left of the first term's pace.
func extendTerms(ctx context.Context, t tx, h wire.HoldInfo, ext string, amount money.Micro, now time.Time) error {
	var kind string
	if err := t.queryRow(ctx, `SELECT terms FROM holds WHERE user_id = ? AND id = ?`, h.User, h.ID).Scan(&kind); err != nil || kind != termsMandate {
		return err
	}
	var start, pace int64
	err := t.queryRow(ctx, `SELECT start, pace FROM hold_terms WHERE hold_user = ? AND hold = ? AND ext = ''`, h.User, h.ID).Scan(&start, &pace)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: hold %q has terms but no schedule", wire.ErrInternal, h.ID)
	}
	if err != nil {
		return err
	}
	first := mandate.Term{Start: time.Unix(0, start), Pace: time.Duration(pace)}
	_, err = t.exec(ctx, `INSERT INTO hold_terms (hold_user, hold, ext, amount, start, pace) VALUES (?, ?, ?, ?, ?, ?)`,
		h.User, h.ID, ext, int64(amount), now.UnixNano(), int64(mandate.ExtensionPace(first, now)))
	return err
}

// capHold is a hold as a capture decides on it: the hold, its terms and,
// for a mandate hold, its schedule and the VMs placed on the capturing
// batches' hosts.
type capHold struct {
	wire.HoldInfo
	terms    string
	vmShare  int64
	schedule []mandate.Term
	placed   map[string]string // VM → its host, for the hosts of the batches read
	allowed  money.Micro       // mandate.Allowed(schedule, now), once per batch
	reckoned bool
}

// bound is the most the (hold, vm) total k may reach now: the VM's share
// of what the schedule allows, and what the hold may still pay of it.
func (h *capHold) bound(total money.Micro, now time.Time) money.Micro {
	if h.terms != termsMandate {
		return NoBound
	}
	if !h.reckoned {
		h.allowed, h.reckoned = mandate.Allowed(h.schedule, now), true
	}
	return min(mandate.ShareOf(h.allowed, h.vmShare), total+max(h.allowed-h.Captured, 0))
}

// refusal is why a fresh leg on h for vm may not capture under its terms,
// or nil; strict: the bank knows identities.
func (h *capHold) refusal(vm, host string, strict bool) error {
	switch {
	case h.terms == termsNone && strict:
		return fmt.Errorf("%w (hold %q)", ErrNoTerms, h.ID)
	case h.terms == termsMandate && h.placed[vm] != host:
		return fmt.Errorf("%w: VM %q, host %s, hold %q", ErrNotPlaced, vm, host, h.ID)
	}
	return nil
}

const capHoldColumns = holdColumns + `, terms, vm_share`

func scanCapHold(r *sql.Rows) (*capHold, error) {
	h := &capHold{}
	var (
		amount, captured, released int64
		expires                    int64
		benef                      string
	)
	if err := r.Scan(&h.ID, &h.User, &amount, &captured, &released, &expires, &h.Status, &benef, &h.terms, &h.vmShare); err != nil {
		return nil, err
	}
	h.HoldInfo = holdInfo(h.ID, h.User, amount, captured, released, expires, h.Status, benef)
	return h, nil
}

// readTerms reads, for the mandate holds in, their schedules and the VMs
// placed on the hosts of the batches capturing from them.
func readTerms(ctx context.Context, t tx, in *captureInput, batches []*wire.CaptureBatch) error {
	byRef := map[holdRef]*capHold{}
	var users, ids []string
	for _, hs := range in.holds {
		for _, h := range hs {
			if h.terms == termsMandate {
				byRef[holdRef{h.User, h.ID}] = h
				h.placed = map[string]string{}
				users, ids = append(users, h.User), append(ids, h.ID)
			}
		}
	}
	if len(byRef) == 0 {
		return nil
	}
	refs, args := t.s.table(textCol("hu", users), textCol("hid", ids))
	err := eachRow(ctx, t, func(r *sql.Rows) error {
		var ref holdRef
		var amount, start, pace int64
		if err := r.Scan(&ref.user, &ref.id, &amount, &start, &pace); err != nil {
			return err
		}
		if h := byRef[ref]; h != nil {
			h.schedule = append(h.schedule, mandate.Term{Amount: money.Micro(amount), Start: time.Unix(0, start), Pace: time.Duration(pace)})
		}
		return nil
	}, `SELECT t.hold_user, t.hold, t.amount, t.start, t.pace FROM (`+refs+`) AS k
		JOIN hold_terms t ON t.hold_user = k.hu AND t.hold = k.hid ORDER BY t.hold_user, t.hold, t.ext`, args...)
	if err != nil {
		return err
	}
	var hosts []string
	ids = ids[:0]
	for _, hh := range hostHolds(in, batches) {
		for _, h := range in.holds[hh.id] {
			if h.terms == termsMandate {
				hosts, ids = append(hosts, hh.host), append(ids, hh.id)
				break
			}
		}
	}
	pairs, args := t.s.table(textCol("vhost", hosts), textCol("hid", ids))
	return eachRow(ctx, t, func(r *sql.Rows) error {
		var ref holdRef
		var vm, host string
		if err := r.Scan(&ref.user, &ref.id, &vm, &host); err != nil {
			return err
		}
		if h := byRef[ref]; h != nil {
			h.placed[vm] = host
		}
		return nil
	}, `SELECT v.hold_user, v.hold, v.vm, v.host FROM (`+pairs+`) AS k JOIN hold_vms v ON v.host = k.vhost AND v.hold = k.hid`, args...)
}

// placementOf is a placement in one canonical form, for fingerprints.
func placementOf(placement []wire.Placed) string {
	parts := make([]string, len(placement))
	for i, p := range placement {
		parts[i] = p.VM + "@" + p.Host
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}
