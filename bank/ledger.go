package bank

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// maxBalance bounds every account (and the mint below zero), so that sums
// of balances never overflow int64.
const maxBalance = 8 * money.Max

// fingerprint is the canonical content of a request, compared on replay.
func fingerprint(parts ...any) string { return fmt.Sprint(parts...) }

// checkReplay looks id up with query (its arguments: the id's namespace and
// the id): not there → false; there with the same fingerprint → true; there
// with another → ErrIDReused.
func checkReplay(ctx context.Context, t tx, query, fp string, scope, id string) (bool, error) {
	var got string
	switch err := t.queryRow(ctx, query, scope, id).Scan(&got); {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, err
	case got != fp:
		return false, fmt.Errorf("%w: %q", ErrIDReused, id)
	}
	return true, nil
}

func ensureAccount(ctx context.Context, t tx, id, kind string, now time.Time) error {
	_, err := t.exec(ctx, `INSERT INTO accounts (id, kind, balance, created) VALUES (?, ?, 0, ?) ON CONFLICT DO NOTHING`, id, kind, now.UnixNano())
	return err
}

// replayedTransfer is checkReplay of transfer id in scope (transferScope).
func replayedTransfer(ctx context.Context, t tx, scope, id, fp string) (bool, error) {
	return checkReplay(ctx, t, `SELECT fingerprint FROM transfers WHERE scope = ? AND id = ?`, fp, scope, id)
}

// transferScope is the namespace of a transfer's id: the account of whoever
// chose it. A release (or expiry) is named after its hold, so it is the
// hold owner's, credited; a capture after its agent's legs, so it is the
// host's provider account, credited; everything else is the debited
// account's (the payer of a transfer, the user of a hold or extension, the
// mint for grants and income). Migration 0003 gives existing rows the same.
func transferScope(kind, debit, credit string) string {
	switch kind {
	case "release", "expire", "capture":
		return credit
	}
	return debit
}

// transfer moves amount from debit to credit and records it under id, in
// the namespace transferScope gives it. Both accounts must exist; no
// account but the mint goes below zero and none beyond maxBalance.
func transfer(ctx context.Context, t tx, id, kind, debit, credit string, amount money.Micro, fp, memo string, at time.Time) error {
	if amount <= 0 || amount > money.Max {
		return fmt.Errorf("%w: transfer %s of %s", wire.ErrBadRequest, id, amount)
	}
	floor := amount // debit balance must stay ≥ 0
	if debit == MintAccount {
		floor = amount - maxBalance
	}
	debitRow := func() error {
		if derived(debit) {
			return nil
		}
		return debitAccount(ctx, t, debit, amount, floor)
	}
	creditRow := func() error {
		if derived(credit) {
			return nil
		}
		return creditAccount(ctx, t, credit, amount)
	}
	// Rows are updated in account-id order, so two transfers between the
	// same accounts in opposite directions lock them in the same order
	// instead of deadlocking (PostgreSQL would abort one after
	// deadlock_timeout, a second's stall).
	first, second := debitRow, creditRow
	if credit < debit {
		first, second = creditRow, debitRow
	}
	if err := first(); err != nil {
		return err
	}
	if err := second(); err != nil {
		return err
	}
	_, err := t.exec(ctx, `INSERT INTO transfers (scope, id, kind, debit, credit, amount, fingerprint, memo, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		transferScope(kind, debit, credit), id, kind, debit, credit, int64(amount), fp, memo, at.UnixNano())
	return err
}

// derived says account's balance is not kept in its row but summed from
// its transfers: the escrow. Every hold, capture and release moves money
// in or out of it; kept in one row, that row is written by all of them,
// and under SERIALIZABLE concurrent writers of one row abort each other
// ("could not serialize access due to concurrent update": thousands of
// aborted attempts in a fault run, and slow captures; docs/HA.md has the
// count). What the escrow holds is already in the holds — each
// open hold's amount less its captures and releases — so nothing is lost:
// Ledger checks that the escrow summed from the transfers is Σ open holds.
// Its row stays (transfers reference it); its stored balance is unused.
func derived(account string) bool { return account == EscrowAccount }

// escrowBalance is what the transfers moved into the escrow less what they
// moved out.
func escrowBalance(ctx context.Context, t tx) (money.Micro, error) {
	var in, out int64
	if err := t.queryRow(ctx, `SELECT CAST(coalesce(sum(amount), 0) AS BIGINT) FROM transfers WHERE credit = ?`, EscrowAccount).Scan(&in); err != nil {
		return 0, err
	}
	if err := t.queryRow(ctx, `SELECT CAST(coalesce(sum(amount), 0) AS BIGINT) FROM transfers WHERE debit = ?`, EscrowAccount).Scan(&out); err != nil {
		return 0, err
	}
	return money.Micro(in - out), nil
}

// debitAccount takes amount from account unless its balance would fall
// below amount-floor.
func debitAccount(ctx context.Context, t tx, account string, amount, floor money.Micro) error {
	res, err := t.exec(ctx, `UPDATE accounts SET balance = balance - ? WHERE id = ? AND balance >= ?`, int64(amount), account, int64(floor))
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if err != nil {
			return err
		}
		have, err := balance(ctx, t, account)
		if err != nil {
			return err
		}
		if account == MintAccount {
			return fmt.Errorf("%w: total granted", ErrOverflow)
		}
		return fmt.Errorf("%w: %s has %s, needs %s", ErrInsufficient, account, have, amount)
	}
	return nil
}

// creditAccount adds amount to account unless it would exceed maxBalance.
func creditAccount(ctx context.Context, t tx, account string, amount money.Micro) error {
	res, err := t.exec(ctx, `UPDATE accounts SET balance = balance + ? WHERE id = ? AND balance <= ?`, int64(amount), account, int64(maxBalance-amount))
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if err != nil {
			return err
		}
		if _, err := balance(ctx, t, account); err != nil {
			return err
		}
		return fmt.Errorf("%w: %s", ErrOverflow, account)
	}
	return nil
}

func balance(ctx context.Context, t tx, account string) (money.Micro, error) {
	if derived(account) {
		return escrowBalance(ctx, t)
	}
	var b int64
	err := t.queryRow(ctx, `SELECT balance FROM accounts WHERE id = ?`, account).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w %q", ErrUnknownAccount, account)
	}
	return money.Micro(b), err
}

// checkUser refuses money for a user that is not a registered principal of
// role user with a live key (ErrUnknownUser), when the bank knows its
// principals (it has an admin key): a grant, an income or a transfer to a
// name nobody holds — or whose keys are all revoked — would put money in
// an account no key can spend from or be refunded from. A bank without an
// admin key (tests, the simulator) takes any name.
func (b *Bank) checkUser(ctx context.Context, t tx, user string) error {
	if b.adminKey == "" {
		return nil
	}
	var n int
	if err := t.queryRow(ctx, `SELECT count(*) FROM principals WHERE name = ? AND role = ? AND revoked = 0`, user, wire.RoleUser).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: %q", ErrUnknownUser, user)
	}
	return nil
}

// Grant mints req.Amount into req.User's account, creating it. A user
// the bank does not know is refused (checkUser).
func (b *Bank) Grant(ctx context.Context, req *wire.GrantRequest) (wire.GrantReply, error) {
	if err := req.Validate(); err != nil {
		return wire.GrantReply{}, err
	}
	rep := wire.GrantReply{Transfer: "grant:" + req.ID, User: req.User, Amount: req.Amount}
	err := b.audited(ctx, func() any { return rep }, func(t tx) error {
		if err := b.checkUser(ctx, t, req.User); err != nil {
			return err
		}
		var err error
		rep.Replayed, err = grant(ctx, t, rep.Transfer, "grant", req.User, req.Amount, req.Memo, b.now())
		if err != nil {
			return err
		}
		rep.Balance, err = balance(ctx, t, UserAccount(req.User))
		return err
	})
	return rep, err
}

// grant mints amount into user's account under transfer id, once.
func grant(ctx context.Context, t tx, id, kind, user string, amount money.Micro, memo string, now time.Time) (replayed bool, err error) {
	fp := fingerprint(kind, user, int64(amount), memo)
	if replayed, err := replayedTransfer(ctx, t, MintAccount, id, fp); err != nil || replayed {
		return replayed, err
	}
	acct := UserAccount(user)
	if err := ensureAccount(ctx, t, acct, wire.AccountUser, now); err != nil {
		return false, err
	}
	return false, transfer(ctx, t, id, "grant", MintAccount, acct, amount, fp, memo, now)
}

// Transfer moves money between two users; one to a user the bank does not
// know is refused (checkUser).
func (b *Bank) Transfer(ctx context.Context, req *wire.TransferRequest) (wire.TransferReply, error) {
	if err := req.Validate(); err != nil {
		return wire.TransferReply{}, err
	}
	rep := wire.TransferReply{Transfer: "transfer:" + req.ID}
	fp := fingerprint("transfer", req.From, req.To, int64(req.Amount), req.Memo)
	err := b.audited(ctx, func() any { return rep }, func(t tx) error {
		var err error
		if rep.Replayed, err = replayedTransfer(ctx, t, UserAccount(req.From), rep.Transfer, fp); err != nil {
			return err
		}
		if !rep.Replayed {
			if err := b.checkUser(ctx, t, req.To); err != nil {
				return err
			}
			if err := transfer(ctx, t, rep.Transfer, "transfer", UserAccount(req.From), UserAccount(req.To), req.Amount, fp, req.Memo, b.now()); err != nil {
				return err
			}
		}
		rep.Balance, err = balance(ctx, t, UserAccount(req.From))
		return err
	})
	return rep, err
}

// Hold moves req.Amount of req.User's money into escrow under hold req.ID.
func (b *Bank) Hold(ctx context.Context, req *wire.HoldRequest) (wire.HoldReply, error) {
	if err := req.Validate(); err != nil {
		return wire.HoldReply{}, err
	}
	m, err := b.checkHoldMandate(ctx, req)
	if err != nil {
		return wire.HoldReply{}, err
	}
	hosts := slices.Clone(req.Hosts)
	slices.Sort(hosts)
	hosts = slices.Compact(hosts)
	benef := strings.Join(hosts, ",")
	fp := fingerprint("hold", req.User, int64(req.Amount), req.Expires.UnixNano(), benef, req.Memo)
	terms, share := termsNone, int64(0)
	if m != nil {
		// The terms count in the fingerprint: a retry placing the VMs
		// elsewhere, or under another pace, is another request.
		terms, share = termsMandate, m.VMShare
		fp = fingerprint("hold", req.User, int64(req.Amount), req.Expires.UnixNano(), benef, req.Memo, placementOf(req.Placement), int64(m.Pace), share)
	}
	var rep wire.HoldReply
	err = b.audited(ctx, func() any { return rep }, func(t tx) error {
		replayed, err := checkReplay(ctx, t, `SELECT fingerprint FROM holds WHERE user_id = ? AND id = ?`, fp, req.User, req.ID)
		if err != nil {
			return err
		}
		acct := UserAccount(req.User)
		if !replayed {
			now := b.now()
			if !req.Expires.After(now) {
				return fmt.Errorf("%w (%s)", ErrPastExpiry, req.Expires.Format(time.RFC3339))
			}
			if err := transfer(ctx, t, "hold:"+req.ID, "hold", acct, EscrowAccount, req.Amount, fp, req.Memo, now); err != nil {
				return err
			}
			if _, err := t.exec(ctx, `INSERT INTO holds (user_id, id, amount, expires, status, beneficiaries, fingerprint, created, terms, vm_share)
				VALUES (?, ?, ?, ?, 'open', ?, ?, ?, ?, ?)`,
				req.User, req.ID, int64(req.Amount), req.Expires.UnixNano(), benef, fp, now.UnixNano(), terms, share); err != nil {
				return err
			}
			if m != nil {
				if err := writeTerms(ctx, t, req, m, now); err != nil {
					return err
				}
			}
		}
		rep.Replayed = replayed
		if rep.Hold, err = getHold(ctx, t, req.User, req.ID); err != nil {
			return err
		}
		rep.Balance, err = balance(ctx, t, acct)
		return err
	})
	return rep, err
}

const holdColumns = `id, user_id, amount, captured, released, expires, status, beneficiaries`

func scanHold(row interface{ Scan(...any) error }) (wire.HoldInfo, error) {
	var (
		id, user, status, benef    string
		amount, captured, released int64
		expires                    int64
	)
	if err := row.Scan(&id, &user, &amount, &captured, &released, &expires, &status, &benef); err != nil {
		return wire.HoldInfo{}, err
	}
	return holdInfo(id, user, amount, captured, released, expires, status, benef), nil
}

// holdInfo is a hold from its row's columns (holdColumns).
func holdInfo(id, user string, amount, captured, released, expires int64, status, benef string) wire.HoldInfo {
	h := wire.HoldInfo{ID: id, User: user, Amount: money.Micro(amount), Captured: money.Micro(captured), Released: money.Micro(released),
		Expires: time.Unix(0, expires).UTC(), Status: status}
	if benef != "" {
		h.Hosts = strings.Split(benef, ",")
	}
	return h
}

// getHold is user's hold id.
func getHold(ctx context.Context, t tx, user, id string) (wire.HoldInfo, error) {
	h, err := scanHold(t.queryRow(ctx, `SELECT `+holdColumns+` FROM holds WHERE user_id = ? AND id = ?`, user, id))
	if errors.Is(err, sql.ErrNoRows) {
		return h, fmt.Errorf("%w %q", ErrUnknownHold, id)
	}
	return h, err
}

// ownHold is user's hold id for a request of user's: a hold id only
// another user has is refused as theirs (ErrNotOwner), as it was when hold
// ids were global, rather than as unknown.
func ownHold(ctx context.Context, t tx, user, id string) (wire.HoldInfo, error) {
	h, err := getHold(ctx, t, user, id)
	if !errors.Is(err, ErrUnknownHold) {
		return h, err
	}
	var others int
	if err := t.queryRow(ctx, `SELECT count(*) FROM holds WHERE id = ? AND user_id <> ?`, id, user).Scan(&others); err != nil {
		return h, err
	}
	if others > 0 {
		return h, fmt.Errorf("%w: hold %q belongs to another user", ErrNotOwner, id)
	}
	return h, fmt.Errorf("%w %q", ErrUnknownHold, id)
}

// Release closes hold req.Hold of req.User and returns what it has left.
// Releasing a closed hold changes nothing and replies with the hold. With
// req.Amount it returns only that much and the hold stays open (spend
// --less), once per req.ID: a retry changes nothing, and more than the
// hold has left is refused.
func (b *Bank) Release(ctx context.Context, req *wire.ReleaseRequest) (wire.ReleaseReply, error) {
	if err := req.Validate(); err != nil {
		return wire.ReleaseReply{}, err
	}
	var rep wire.ReleaseReply
	err := b.audited(ctx, func() any { return rep }, func(t tx) error {
		h, err := ownHold(ctx, t, req.User, req.Hold)
		if err != nil {
			return err
		}
		if req.Amount > 0 {
			rep.Released, err = b.releasePart(ctx, t, h, req)
		} else {
			rep.Released, err = b.release(ctx, t, h, "release")
		}
		if err != nil {
			return err
		}
		if rep.Hold, err = getHold(ctx, t, h.User, h.ID); err != nil {
			return err
		}
		rep.Balance, err = balance(ctx, t, UserAccount(h.User))
		return err
	})
	return rep, err
}

// releasePart returns req.Amount of an open hold to its owner and leaves it
// open; a replay of req.ID changes nothing and answers 0.
func (b *Bank) releasePart(ctx context.Context, t tx, h wire.HoldInfo, req *wire.ReleaseRequest) (money.Micro, error) {
	id := "release:" + h.ID + "/" + req.ID
	fp := fingerprint("release-part", h.ID, req.User, int64(req.Amount))
	replayed, err := replayedTransfer(ctx, t, UserAccount(h.User), id, fp)
	if err != nil || replayed {
		return 0, err
	}
	switch {
	case h.Status != wire.HoldOpen:
		return 0, fmt.Errorf("%w: %q", ErrHoldClosed, h.ID)
	case req.Amount > h.Remaining():
		return 0, fmt.Errorf("%w: hold %q has %s left, not %s", ErrInsufficient, h.ID, h.Remaining(), req.Amount)
	}
	if err := transfer(ctx, t, id, "release", EscrowAccount, UserAccount(h.User), req.Amount, fp, "", b.now()); err != nil {
		return 0, err
	}
	_, err = t.exec(ctx, `UPDATE holds SET released = released + ? WHERE user_id = ? AND id = ? AND status = 'open'`, int64(req.Amount), h.User, h.ID)
	return req.Amount, err
}

// release closes an open hold, returning its remainder to its owner.
func (b *Bank) release(ctx context.Context, t tx, h wire.HoldInfo, why string) (money.Micro, error) {
	if h.Status != wire.HoldOpen {
		return 0, nil
	}
	rest := h.Remaining()
	if rest > 0 {
		if err := transfer(ctx, t, "release:"+h.ID, why, EscrowAccount, UserAccount(h.User), rest, fingerprint(why, h.ID), "", b.now()); err != nil {
			return 0, err
		}
	}
	_, err := t.exec(ctx, `UPDATE holds SET released = released + ?, status = 'closed' WHERE user_id = ? AND id = ? AND status = 'open'`, int64(rest), h.User, h.ID)
	return rest, err
}

// Balance reports req.User's account and open holds.
func (b *Bank) Balance(ctx context.Context, req *wire.BalanceRequest) (wire.BalanceReply, error) {
	if err := req.Validate(); err != nil {
		return wire.BalanceReply{}, err
	}
	rep := wire.BalanceReply{User: req.User, Holds: []wire.HoldInfo{}}
	err := b.st.run(ctx, func(t tx) error {
		rep.Holds, rep.Held = rep.Holds[:0], 0
		acct := UserAccount(req.User)
		var err error
		if rep.Balance, err = balance(ctx, t, acct); err != nil {
			return err
		}
		var granted, spent int64
		if err := t.queryRow(ctx, `SELECT CAST(coalesce(sum(amount), 0) AS BIGINT) FROM transfers WHERE kind = 'grant' AND credit = ?`, acct).Scan(&granted); err != nil {
			return err
		}
		if err := t.queryRow(ctx, `SELECT CAST(coalesce(sum(captured), 0) AS BIGINT) FROM holds WHERE user_id = ?`, req.User).Scan(&spent); err != nil {
			return err
		}
		rep.Granted, rep.Spent = money.Micro(granted), money.Micro(spent)
		rows, err := t.query(ctx, `SELECT `+holdColumns+` FROM holds WHERE user_id = ? AND status = 'open' ORDER BY created, id`, req.User)
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

// Statement lists an account's transfers, newest first.
func (b *Bank) Statement(ctx context.Context, req *wire.StatementRequest) (wire.StatementReply, error) {
	if err := req.Validate(); err != nil {
		return wire.StatementReply{}, err
	}
	acct := req.Account
	if req.User != "" {
		acct = UserAccount(req.User)
	}
	limit := req.Limit
	if limit == 0 {
		limit = wire.DefaultStatement
	}
	rep := wire.StatementReply{Account: acct}
	err := b.st.run(ctx, func(t tx) error {
		rep.Entries = []wire.StatementEntry{}
		var err error
		if rep.Balance, err = balance(ctx, t, acct); err != nil {
			return err
		}
		rows, err := t.query(ctx, `SELECT id, kind, debit, credit, amount, at, memo FROM transfers WHERE debit = ? OR credit = ? ORDER BY at DESC, id DESC LIMIT ?`, acct, acct, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var e wire.StatementEntry
			var debit, credit string
			var amount, at int64
			if err := rows.Scan(&e.Transfer, &e.Kind, &debit, &credit, &amount, &at, &e.Memo); err != nil {
				return err
			}
			e.Amount, e.Counterparty = money.Micro(amount), debit
			if debit == acct {
				e.Amount, e.Counterparty = -e.Amount, credit
			}
			e.At = time.Unix(0, at).UTC()
			rep.Entries = append(rep.Entries, e)
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
	var rep wire.LedgerReply
	err := b.st.run(ctx, func(t tx) error {
		rep = wire.LedgerReply{Accounts: []wire.Account{}, Violations: []string{}}
		escrowed, err := escrowBalance(ctx, t)
		if err != nil {
			return err
		}
		var sum, escrow money.Micro
		if err := eachRow(ctx, t, func(r *sql.Rows) error {
			var a wire.Account
			var bal int64
			if err := r.Scan(&a.ID, &a.Kind, &bal); err != nil {
				return err
			}
			a.Balance = money.Micro(bal)
			if derived(a.ID) {
				a.Balance = escrowed
			}
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
			return nil
		}, `SELECT id, kind, balance FROM accounts ORDER BY kind, id`); err != nil {
			return err
		}
		var granted, open int64
		if err := t.queryRow(ctx, `SELECT CAST(coalesce(sum(amount), 0) AS BIGINT) FROM transfers WHERE kind = 'grant'`).Scan(&granted); err != nil {
			return err
		}
		if err := t.queryRow(ctx, `SELECT CAST(coalesce(sum(amount - captured - released), 0) AS BIGINT) FROM holds WHERE status = 'open'`).Scan(&open); err != nil {
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
		if err := t.queryRow(ctx, `SELECT count(*) FROM holds h
			WHERE h.captured <> coalesce((SELECT sum(total) FROM captures c WHERE c.hold_user = h.user_id AND c.hold = h.id), 0)
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

// Extend adds req.Amount of the user's money to an open hold (a running
// plan given more budget). Idempotent by req.ID.
func (b *Bank) Extend(ctx context.Context, req *wire.ExtendRequest) (wire.HoldReply, error) {
	if err := req.Validate(); err != nil {
		return wire.HoldReply{}, err
	}
	if err := b.checkExtendMandate(ctx, req); err != nil {
		return wire.HoldReply{}, err
	}
	id := "extend:" + req.ID
	fp := fingerprint("extend", req.Hold, req.User, int64(req.Amount))
	var rep wire.HoldReply
	err := b.audited(ctx, func() any { return rep }, func(t tx) error {
		h, err := ownHold(ctx, t, req.User, req.Hold)
		if err != nil {
			return err
		}
		replayed, err := replayedTransfer(ctx, t, UserAccount(req.User), id, fp)
		if err != nil {
			return err
		}
		if !replayed {
			if h.Status != wire.HoldOpen {
				return fmt.Errorf("%w: %q", ErrHoldClosed, req.Hold)
			}
			if h.Amount+req.Amount > money.Max {
				return fmt.Errorf("%w: hold %q", ErrOverflow, req.Hold)
			}
			if err := transfer(ctx, t, id, "hold", UserAccount(req.User), EscrowAccount, req.Amount, fp, "", b.now()); err != nil {
				return err
			}
			if _, err := t.exec(ctx, `UPDATE holds SET amount = amount + ? WHERE user_id = ? AND id = ?`, int64(req.Amount), req.User, req.Hold); err != nil {
				return err
			}
			if err := extendTerms(ctx, t, h, req.ID, req.Amount, b.now()); err != nil {
				return err
			}
		}
		rep.Replayed = replayed
		if rep.Hold, err = getHold(ctx, t, req.User, req.Hold); err != nil {
			return err
		}
		rep.Balance, err = balance(ctx, t, UserAccount(req.User))
		return err
	})
	return rep, err
}
