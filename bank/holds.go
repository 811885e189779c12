package bank

import (
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// OpenHolds lists the open holds whose memo starts with req.MemoPrefix,
// placed before req.Before, oldest first: what a broker that lost its plan
// store recovers plans from (broker.Broker's recovery).
func (b *Bank) OpenHolds(ctx context.Context, req *wire.OpenHoldsRequest) (wire.OpenHoldsReply, error) {
	if err := req.Validate(); err != nil {
		return wire.OpenHoldsReply{}, err
	}
	rep := wire.OpenHoldsReply{Holds: []wire.OpenHold{}}
	err := b.st.run(ctx, func(t tx) error {
		rep.Holds = rep.Holds[:0]
		var found []wire.OpenHold
		err := eachRow(ctx, t, func(r *sql.Rows) error {
			var h wire.OpenHold
			var created int64
			if err := r.Scan(&h.ID, &h.User, &h.Memo, &created); err != nil {
				return err
			}
			h.Created = time.Unix(0, created)
			if strings.HasPrefix(h.Memo, req.MemoPrefix) && len(found) < wire.MaxOpenHolds {
				found = append(found, h)
			}
			return nil
		}, `SELECT h.id, h.user_id, t.memo, h.created FROM holds h JOIN transfers t ON t.scope = 'user:' || h.user_id AND t.id = 'hold:' || h.id
			WHERE h.status = 'open' AND h.created < ? ORDER BY h.created, h.id, h.user_id`, req.Before.UnixNano())
		if err != nil {
			return err
		}
		for _, h := range found {
			info, err := getHold(ctx, t, h.User, h.ID)
			if err != nil {
				return err
			}
			h.HoldInfo = info
			rep.Holds = append(rep.Holds, h)
		}
		return nil
	})
	return rep, err
}

// Holds reads the holds req.IDs (those the bank knows), in one
// transaction: a consistent view of what each has captured and released.
// Hold ids are each user's own, so an id may name holds of several users:
// all of them are in the reply, in user order (HoldInfo.User tells them
// apart).
func (b *Bank) Holds(ctx context.Context, req *wire.HoldsRequest) (wire.HoldsReply, error) {
	if err := req.Validate(); err != nil {
		return wire.HoldsReply{}, err
	}
	rep := wire.HoldsReply{Holds: []wire.HoldInfo{}}
	err := b.st.run(ctx, func(t tx) error {
		rep.Holds = rep.Holds[:0]
		for _, id := range req.IDs {
			err := eachRow(ctx, t, func(r *sql.Rows) error {
				h, err := scanHold(r)
				if err == nil {
					rep.Holds = append(rep.Holds, h)
				}
				return err
			}, `SELECT `+holdColumns+` FROM holds WHERE id = ? ORDER BY user_id`, id)
			if err != nil {
				return err
			}
		}
		return nil
	})
	return rep, err
}
