package bank

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

var (
	errBadRequest   = wire.ErrBadRequest
	errNotFound     = wire.ErrNotFound
	errForbidden    = wire.ErrForbidden
	errConflict     = wire.ErrConflict
	errInsufficient = wire.ErrInsufficient
	errExpired      = wire.ErrExpired
	errUnavailable  = wire.ErrUnavailable
)

// fingerprint is the canonical content of a request, compared on replay.
func fingerprint(parts ...any) string { return fmt.Sprint(parts...) }

// Grant mints req.Amount into req.User's account, creating it.
func (b *Bank) Grant(ctx context.Context, req *wire.GrantRequest) (wire.GrantReply, error) {
	if err := req.Validate(); err != nil {
		return wire.GrantReply{}, err
	}
	rep := wire.GrantReply{Transfer: "grant:" + req.ID, User: req.User, Amount: req.Amount}
	fp := fingerprint("grant", req.User, int64(req.Amount), req.Memo)
	acct := UserAccount(req.User)
	err := b.tx(ctx, func(tx *sql.Tx) error {
		replayed, err := checkReplay(ctx, tx, `SELECT fingerprint FROM transfers WHERE id = ?`, rep.Transfer, fp)
		if err != nil {
			return err
		}
		if !replayed {
			if _, err := tx.ExecContext(ctx, `INSERT INTO accounts (id, kind, balance) VALUES (?, 'user', 0) ON CONFLICT DO NOTHING`, acct); err != nil {
				return err
			}
			if err := transfer(ctx, tx, rep.Transfer, "grant", MintAccount, acct, req.Amount, fp, b.now()); err != nil {
				return err
			}
		}
		rep.Replayed = replayed
		rep.Balance, err = balance(ctx, tx, acct)
		return err
	})
	return rep, err
}

// checkReplay looks an id up with query: not there → false; there with the
// same fingerprint → true; there with another → ErrIDReused.
func checkReplay(ctx context.Context, tx *sql.Tx, query, id, fp string) (bool, error) {
	var got string
	switch err := tx.QueryRowContext(ctx, query, id).Scan(&got); {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, err
	case got != fp:
		return false, fmt.Errorf("%w: %q", ErrIDReused, id)
	}
	return true, nil
}

// transfer moves amount from debit to credit and records it under id. The
// accounts must exist; a debit below zero (except the mint) is refused.
func transfer(ctx context.Context, tx *sql.Tx, id, kind, debit, credit string, amount money.Micro, fp string, at time.Time) error {
	if amount <= 0 {
		return fmt.Errorf("%w: transfer %s of %s", errBadRequest, id, amount)
	}
	from, err := balance(ctx, tx, debit)
	if err != nil {
		return err
	}
	to, err := balance(ctx, tx, credit)
	if err != nil {
		return err
	}
	if debit != MintAccount && from < amount {
		return fmt.Errorf("%w: %s has %s, needs %s", ErrInsufficient, debit, from, amount)
	}
	newFrom, err1 := money.Sub(from, amount)
	newTo, err2 := money.Add(to, amount)
	if err1 != nil || err2 != nil || newTo > money.Max*8 {
		return fmt.Errorf("%w: %s of %s", ErrOverflow, credit, amount)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = ? WHERE id = ?`, int64(newFrom), debit); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = ? WHERE id = ?`, int64(newTo), credit); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO transfers (id, kind, debit, credit, amount, fingerprint, at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		id, kind, debit, credit, int64(amount), fp, at.UnixNano())
	return err
}

func balance(ctx context.Context, tx *sql.Tx, account string) (money.Micro, error) {
	var b int64
	err := tx.QueryRowContext(ctx, `SELECT balance FROM accounts WHERE id = ?`, account).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w %q", ErrUnknownAccount, account)
	}
	return money.Micro(b), err
}

// Hold moves req.Amount of req.User's money into escrow under hold req.ID.
func (b *Bank) Hold(ctx context.Context, req *wire.HoldRequest) (wire.HoldReply, error) {
	if err := req.Validate(); err != nil {
		return wire.HoldReply{}, err
	}
	fp := fingerprint("hold", req.User, int64(req.Amount), req.Expires.UnixNano(), req.Memo)
	var rep wire.HoldReply
	err := b.tx(ctx, func(tx *sql.Tx) error {
		replayed, err := checkReplay(ctx, tx, `SELECT fingerprint FROM holds WHERE id = ?`, req.ID, fp)
		if err != nil {
			return err
		}
		acct := UserAccount(req.User)
		if !replayed {
			now := b.now()
			if !req.Expires.After(now) {
				return fmt.Errorf("%w (%s)", ErrPastExpiry, req.Expires.Format(time.RFC3339))
			}
			if err := transfer(ctx, tx, "hold:"+req.ID, "hold", acct, EscrowAccount, req.Amount, fp, now); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO holds (id, user_id, amount, expires, status, fingerprint, created) VALUES (?, ?, ?, ?, 'open', ?, ?)`,
				req.ID, req.User, int64(req.Amount), req.Expires.UnixNano(), fp, now.UnixNano()); err != nil {
				return err
			}
		}
		rep.Replayed = replayed
		if rep.Hold, err = getHold(ctx, tx, req.ID); err != nil {
			return err
		}
		rep.Balance, err = balance(ctx, tx, acct)
		return err
	})
	return rep, err
}

const holdColumns = `id, user_id, amount, captured, released, expires, status`

func scanHold(row interface{ Scan(...any) error }) (wire.HoldInfo, error) {
	var (
		h                          wire.HoldInfo
		amount, captured, released int64
		expires                    int64
	)
	if err := row.Scan(&h.ID, &h.User, &amount, &captured, &released, &expires, &h.Status); err != nil {
		return h, err
	}
	h.Amount, h.Captured, h.Released = money.Micro(amount), money.Micro(captured), money.Micro(released)
	h.Expires = time.Unix(0, expires).UTC()
	return h, nil
}

func getHold(ctx context.Context, tx *sql.Tx, id string) (wire.HoldInfo, error) {
	h, err := scanHold(tx.QueryRowContext(ctx, `SELECT `+holdColumns+` FROM holds WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return h, fmt.Errorf("%w %q", ErrUnknownHold, id)
	}
	return h, err
}

// Capture applies one agent tick's batch in one transaction. Each leg raises
// the total captured for (hold, batch host, vm) to its Cumulative, cut to
// what the hold has left; a leg that fails (unknown, closed or expired hold)
// reports its error and the others still apply.
func (b *Bank) Capture(ctx context.Context, batch *wire.CaptureBatch) (wire.CaptureReply, error) {
	if err := batch.Validate(); err != nil {
		return wire.CaptureReply{}, err
	}
	var rep wire.CaptureReply
	err := b.tx(ctx, func(tx *sql.Tx) error {
		rep = wire.CaptureReply{Legs: make([]wire.LegResult, len(batch.Legs))}
		provider := ProviderAccount(batch.Host)
		if _, err := tx.ExecContext(ctx, `INSERT INTO accounts (id, kind, balance) VALUES (?, 'provider', 0) ON CONFLICT DO NOTHING`, provider); err != nil {
			return err
		}
		now := b.now()
		for i, leg := range batch.Legs {
			res, err := b.captureLeg(ctx, tx, batch.Host, provider, leg, now)
			if err != nil {
				var we *wire.Error
				if !errors.As(err, &we) {
					return err // the store failed: the whole batch rolls back
				}
				res.Error = wire.ToError(err)
			}
			rep.Legs[i] = res
			rep.Applied += res.Applied
		}
		return nil
	})
	return rep, err
}

func (b *Bank) captureLeg(ctx context.Context, tx *sql.Tx, host, provider string, leg wire.CaptureLeg, now time.Time) (wire.LegResult, error) {
	res := wire.LegResult{ID: leg.ID, Hold: leg.Hold, VM: leg.VM}
	h, err := getHold(ctx, tx, leg.Hold)
	if err != nil {
		return res, err
	}
	var total int64
	err = tx.QueryRowContext(ctx, `SELECT total FROM captures WHERE hold = ? AND host = ? AND vm = ?`, leg.Hold, host, leg.VM).Scan(&total)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return res, err
	}
	res.Captured = money.Micro(total)
	res.Exhausted = h.Remaining() == 0

	// A leg seen before moves nothing, whatever it asks now.
	var seenCum int64
	var seenHost, seenVM, seenHold string
	switch err := tx.QueryRowContext(ctx, `SELECT hold, host, vm, cumulative FROM capture_legs WHERE id = ?`, leg.ID).Scan(&seenHold, &seenHost, &seenVM, &seenCum); {
	case err == nil:
		if seenHold != leg.Hold || seenHost != host || seenVM != leg.VM || money.Micro(seenCum) != leg.Cumulative {
			return res, fmt.Errorf("%w: capture leg %q", ErrIDReused, leg.ID)
		}
		return res, nil
	case !errors.Is(err, sql.ErrNoRows):
		return res, err
	}

	switch {
	case h.Status != wire.HoldOpen:
		return res, fmt.Errorf("%w: %q", ErrHoldClosed, leg.Hold)
	case !now.Before(h.Expires):
		return res, fmt.Errorf("%w: %q at %s", ErrHoldExpired, leg.Hold, h.Expires.Format(time.RFC3339))
	}
	delta := max(leg.Cumulative-money.Micro(total), 0)
	delta = min(delta, h.Remaining())
	if delta > 0 {
		fp := fingerprint("capture", host, leg.VM, int64(leg.Cumulative))
		if err := transfer(ctx, tx, "capture:"+leg.ID, "capture", EscrowAccount, provider, delta, fp, now); err != nil {
			return res, err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE holds SET captured = captured + ? WHERE id = ?`, int64(delta), leg.Hold); err != nil {
			return res, err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO captures (hold, host, vm, total) VALUES (?, ?, ?, ?)
			ON CONFLICT (hold, host, vm) DO UPDATE SET total = total + excluded.total`, leg.Hold, host, leg.VM, int64(delta)); err != nil {
			return res, err
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO capture_legs (id, hold, host, vm, cumulative, applied, at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		leg.ID, leg.Hold, host, leg.VM, int64(leg.Cumulative), int64(delta), now.UnixNano()); err != nil {
		return res, err
	}
	res.Applied = delta
	res.Captured = money.Micro(total) + delta
	res.Exhausted = h.Remaining()-delta == 0
	return res, nil
}

// Release closes hold req.Hold of req.User and returns what it has left.
// Releasing a closed hold changes nothing and replies with the hold.
func (b *Bank) Release(ctx context.Context, req *wire.ReleaseRequest) (wire.ReleaseReply, error) {
	if err := req.Validate(); err != nil {
		return wire.ReleaseReply{}, err
	}
	var rep wire.ReleaseReply
	err := b.tx(ctx, func(tx *sql.Tx) error {
		h, err := getHold(ctx, tx, req.Hold)
		if err != nil {
			return err
		}
		if h.User != req.User {
			return fmt.Errorf("%w: hold %q belongs to another user", ErrNotOwner, req.Hold)
		}
		if rep.Released, err = b.release(ctx, tx, h, "release"); err != nil {
			return err
		}
		if rep.Hold, err = getHold(ctx, tx, req.Hold); err != nil {
			return err
		}
		rep.Balance, err = balance(ctx, tx, UserAccount(h.User))
		return err
	})
	return rep, err
}

// release closes an open hold, returning its remainder to its owner.
func (b *Bank) release(ctx context.Context, tx *sql.Tx, h wire.HoldInfo, why string) (money.Micro, error) {
	if h.Status != wire.HoldOpen {
		return 0, nil
	}
	rest := h.Remaining()
	if rest > 0 {
		if err := transfer(ctx, tx, "release:"+h.ID, why, EscrowAccount, UserAccount(h.User), rest, fingerprint(why, h.ID), b.now()); err != nil {
			return 0, err
		}
	}
	_, err := tx.ExecContext(ctx, `UPDATE holds SET released = released + ?, status = 'closed' WHERE id = ?`, int64(rest), h.ID)
	return rest, err
}

// Tick releases every open hold whose expiry is at or before now and
// reports how many it released.
func (b *Bank) Tick(ctx context.Context, now time.Time) (int, error) {
	n := 0
	err := b.tx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT `+holdColumns+` FROM holds WHERE status = 'open' AND expires <= ? ORDER BY id`, now.UnixNano())
		if err != nil {
			return err
		}
		var expired []wire.HoldInfo
		for rows.Next() {
			h, err := scanHold(rows)
			if err != nil {
				rows.Close()
				return err
			}
			expired = append(expired, h)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		for _, h := range expired {
			if _, err := b.release(ctx, tx, h, "expire"); err != nil {
				return err
			}
		}
		n = len(expired)
		return nil
	})
	return n, err
}

// Balance reports req.User's account and open holds.
func (b *Bank) Balance(ctx context.Context, req *wire.BalanceRequest) (wire.BalanceReply, error) {
	if err := req.Validate(); err != nil {
		return wire.BalanceReply{}, err
	}
	rep := wire.BalanceReply{User: req.User, Holds: []wire.HoldInfo{}}
	err := b.tx(ctx, func(tx *sql.Tx) error {
		acct := UserAccount(req.User)
		var err error
		if rep.Balance, err = balance(ctx, tx, acct); err != nil {
			return err
		}
		var granted, spent int64
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(amount), 0) FROM transfers WHERE kind = 'grant' AND credit = ?`, acct).Scan(&granted); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(captured), 0) FROM holds WHERE user_id = ?`, req.User).Scan(&spent); err != nil {
			return err
		}
		rep.Granted, rep.Spent = money.Micro(granted), money.Micro(spent)
		rows, err := tx.QueryContext(ctx, `SELECT `+holdColumns+` FROM holds WHERE user_id = ? AND status = 'open' ORDER BY created, id`, req.User)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			h, err := scanHold(rows)
			if err != nil {
				return err
			}
			rep.Holds = append(rep.Holds, h)
			rep.Held += h.Remaining()
		}
		return rows.Err()
	})
	return rep, err
}

// Ledger returns every account and checks the invariants: Σ user and
// provider balances + Σ open holds = Σ granted; no account but the mint
// below zero; escrow equals the open holds; the accounts sum to zero; every
// hold's captures add up.
func (b *Bank) Ledger(ctx context.Context) (wire.LedgerReply, error) {
	rep := wire.LedgerReply{Accounts: []wire.Account{}, Violations: []string{}}
	err := b.tx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT id, kind, balance FROM accounts ORDER BY kind, id`)
		if err != nil {
			return err
		}
		var sum, escrow money.Micro
		for rows.Next() {
			var a wire.Account
			var bal int64
			if err := rows.Scan(&a.ID, &a.Kind, &bal); err != nil {
				rows.Close()
				return err
			}
			a.Balance = money.Micro(bal)
			rep.Accounts = append(rep.Accounts, a)
			sum += a.Balance
			switch a.Kind {
			case wire.AccountUser, wire.AccountProvider:
				rep.Balances += a.Balance
			case wire.AccountEscrow:
				escrow = a.Balance
			}
			if a.Kind != wire.AccountMint && a.Balance < 0 {
				rep.Violations = append(rep.Violations, fmt.Sprintf("account %s is below zero: %s", a.ID, a.Balance))
			}
		}
		if err := rows.Close(); err != nil {
			return err
		}
		var granted, open int64
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(amount), 0) FROM transfers WHERE kind = 'grant'`).Scan(&granted); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(amount - captured - released), 0) FROM holds WHERE status = 'open'`).Scan(&open); err != nil {
			return err
		}
		rep.Granted, rep.OpenHolds = money.Micro(granted), money.Micro(open)
		if rep.Balances+rep.OpenHolds != rep.Granted {
			rep.Violations = append(rep.Violations, fmt.Sprintf("Σ balances %s + Σ open holds %s ≠ Σ granted %s", rep.Balances, rep.OpenHolds, rep.Granted))
		}
		if escrow != rep.OpenHolds {
			rep.Violations = append(rep.Violations, fmt.Sprintf("escrow %s ≠ Σ open holds %s", escrow, rep.OpenHolds))
		}
		if sum != 0 {
			rep.Violations = append(rep.Violations, fmt.Sprintf("accounts sum to %s, not zero", sum))
		}
		var bad int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM holds h WHERE h.captured <> coalesce((SELECT sum(total) FROM captures c WHERE c.hold = h.id), 0)
			OR (h.status = 'closed' AND h.captured + h.released <> h.amount)`).Scan(&bad); err != nil {
			return err
		}
		if bad > 0 {
			rep.Violations = append(rep.Violations, strconv.Itoa(bad)+" holds whose captures or release do not add up")
		}
		return nil
	})
	return rep, err
}
