package bank

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// maxCatchUp bounds the missed income periods one Tick grants per schedule
// (a bank down for longer grants the most recent ones).
const maxCatchUp = 1000

// Tick does the bank's timed work at now: releases every open hold whose
// expiry passed, grants the income of every period begun since the last
// tick (once per period, whatever the number of ticks or bank replicas),
// and forgets nonces older than the signature window. It reports the holds
// it released.
func (b *Bank) Tick(ctx context.Context, now time.Time) (int, error) {
	released := 0
	err := b.st.run(ctx, func(t tx) error {
		var expired []wire.HoldInfo
		if err := eachRow(ctx, t, func(r *sql.Rows) error {
			h, err := scanHold(r)
			if err == nil {
				expired = append(expired, h)
			}
			return err
		}, `SELECT `+holdColumns+` FROM holds WHERE status = 'open' AND expires <= ? ORDER BY id, user_id`, now.UnixNano()); err != nil {
			return err
		}
		for _, h := range expired {
			if _, err := b.release(ctx, t, h, "expire"); err != nil {
				return err
			}
		}
		released = len(expired)
		return nil
	})
	if err != nil {
		return 0, err
	}
	if err := b.st.run(ctx, func(t tx) error { return b.payIncome(ctx, t, now) }); err != nil {
		return released, err
	}
	_, err = b.st.db.ExecContext(ctx, b.st.rebind(`DELETE FROM nonces WHERE at < ?`), now.Add(-2*wire.MaxSkew).UnixNano())
	if err != nil {
		return released, storeErr("purging nonces", err)
	}
	return released, nil
}

// payIncome grants every schedule's periods begun up to now.
func (b *Bank) payIncome(ctx context.Context, t tx, now time.Time) error {
	scheds, err := schedules(ctx, t)
	if err != nil {
		return err
	}
	for _, s := range scheds {
		period := int64(now.Sub(s.Anchor) / s.Every.D())
		if now.Before(s.Anchor) || period <= s.LastPeriod {
			continue
		}
		for p := max(s.LastPeriod+1, period-maxCatchUp+1); p <= period; p++ {
			if err := b.payPeriod(ctx, t, s, p, now); err != nil {
				return err
			}
		}
		if _, err := t.exec(ctx, `UPDATE income SET last_period = ? WHERE user_id = ?`, period, s.User); err != nil {
			return err
		}
	}
	return nil
}

func (b *Bank) payPeriod(ctx context.Context, t tx, s wire.IncomeSchedule, p int64, now time.Time) error {
	memo := fmt.Sprintf("income every %s, period %d", s.Every.D(), p)
	if s.User != wire.FairShareUser {
		_, err := grant(ctx, t, fmt.Sprintf("income:%s:%d", s.User, p), "income", s.User, s.Amount, memo, now)
		return err
	}
	var users []string
	if err := eachRow(ctx, t, func(r *sql.Rows) error {
		var id string
		if err := r.Scan(&id); err != nil {
			return err
		}
		users = append(users, id[len("user:"):])
		return nil
	}, `SELECT id FROM accounts WHERE kind = 'user' ORDER BY id`); err != nil || len(users) == 0 {
		return err
	}
	for i, part := range money.Split(s.Amount, len(users)) {
		if part == 0 {
			continue
		}
		if _, err := grant(ctx, t, fmt.Sprintf("income:*:%d:%s", p, users[i]), "income", users[i], part, memo+", fair share", now); err != nil {
			return err
		}
	}
	return nil
}

func schedules(ctx context.Context, t tx) ([]wire.IncomeSchedule, error) {
	rows, err := t.query(ctx, `SELECT user_id, amount, every, anchor, last_period FROM income ORDER BY user_id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []wire.IncomeSchedule{}
	for rows.Next() {
		var s wire.IncomeSchedule
		var amount, every, anchor int64
		if err := rows.Scan(&s.User, &amount, &every, &anchor, &s.LastPeriod); err != nil {
			return nil, err
		}
		s.Amount, s.Every, s.Anchor = money.Micro(amount), wire.Duration(every), time.Unix(0, anchor).UTC()
		out = append(out, s)
	}
	return out, rows.Err()
}

// SetIncome sets, changes or (Amount 0) removes an income schedule. A new
// or changed schedule starts its first period now; the next Tick grants it.
// A schedule for a user the bank does not know is refused (checkUser).
func (b *Bank) SetIncome(ctx context.Context, req *wire.IncomeSetRequest) (wire.IncomeSetReply, error) {
	if err := req.Validate(); err != nil {
		return wire.IncomeSetReply{}, err
	}
	var rep wire.IncomeSetReply
	err := b.audited(ctx, func() any { return rep }, func(t tx) error {
		if req.Amount == 0 {
			if _, err := t.exec(ctx, `DELETE FROM income WHERE user_id = ?`, req.User); err != nil {
				return err
			}
		} else {
			if req.User != wire.FairShareUser {
				if err := b.checkUser(ctx, t, req.User); err != nil {
					return err
				}
			}
			// A changed schedule restarts its periods at a new anchor; the
			// period index keeps growing so income ids never repeat.
			var last int64 = -1
			var oldEvery, oldAnchor int64
			err := t.queryRow(ctx, `SELECT every, anchor, last_period FROM income WHERE user_id = ?`, req.User).Scan(&oldEvery, &oldAnchor, &last)
			if err == nil {
				if _, err := t.exec(ctx, `DELETE FROM income WHERE user_id = ?`, req.User); err != nil {
					return err
				}
			}
			now := b.now()
			anchor := now.UnixNano()
			if last >= 0 {
				// Shift the anchor back so that period indexes continue after last.
				anchor -= (last + 1) * int64(req.Every.D())
			}
			if _, err := t.exec(ctx, `INSERT INTO income (user_id, amount, every, anchor, last_period) VALUES (?, ?, ?, ?, ?)`,
				req.User, int64(req.Amount), int64(req.Every.D()), anchor, last); err != nil {
				return err
			}
		}
		var err error
		rep.Schedules, err = schedules(ctx, t)
		return err
	})
	return rep, err
}
