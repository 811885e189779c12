package bank_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// ledgerOps is what a test client drives: the bank in this process, or a
// bank.Client over NATS.
type ledgerOps interface {
	Transfer(context.Context, *wire.TransferRequest) (wire.TransferReply, error)
	Hold(context.Context, *wire.HoldRequest) (wire.HoldReply, error)
	Capture(context.Context, *wire.CaptureBatch) (wire.CaptureReply, error)
	Release(context.Context, *wire.ReleaseRequest) (wire.ReleaseReply, error)
}

// clientLoad is one client of the crash and failover tests: a random mix of
// transfers to the other users and holds partly captured by host-1's agent,
// then released. Each step is retried by its id (do) until it has an
// answer, and recorded in the model once acknowledged (and told to ack,
// when set).
type clientLoad struct {
	user, agent ledgerOps // the user's requests; host-1's captures
	id          int
	prefix      string // of the operation ids
	seed        uint64
	users       []string
	do          func(op func(ctx context.Context) error) error
	ack         func(op string, began, at time.Time)
}

// run runs operations, at least minOps of them and until stop closes, and
// gives how many.
func (c clientLoad) run(minOps int, stop <-chan struct{}, m *model) (int, error) {
	rng := rand.New(rand.NewPCG(uint64(c.id), c.seed))
	me := c.users[c.id%len(c.users)]
	acked := func(op string, began time.Time) {
		if c.ack != nil {
			c.ack(op, began, time.Now())
		}
	}
	for n := 0; ; n++ {
		if n >= minOps {
			select {
			case <-stop:
				return n, nil
			default:
			}
		}
		opID := fmt.Sprintf("%s%d-%d", c.prefix, c.id, n)
		amount := money.Micro(1 + rng.IntN(100))
		began := time.Now()
		if rng.IntN(2) == 0 {
			to := c.users[(c.id+1+rng.IntN(len(c.users)-1))%len(c.users)]
			req := &wire.TransferRequest{ID: opID, From: me, To: to, Amount: amount}
			if err := c.do(func(ctx context.Context) error { _, err := c.user.Transfer(ctx, req); return err }); err != nil {
				return n, fmt.Errorf("transfer %s: %w", opID, err)
			}
			acked("transfer:"+opID, began)
			m.apply(func() {
				m.balance[me] -= amount
				m.balance[to] += amount
				m.ids[me] = append(m.ids[me], "transfer:"+opID)
				m.ids[to] = append(m.ids[to], "transfer:"+opID)
			})
			continue
		}
		hreq := &wire.HoldRequest{ID: opID, User: me, Amount: amount, Expires: time.Now().Add(time.Hour), Hosts: []string{"host-1"}}
		if err := c.do(func(ctx context.Context) error { _, err := c.user.Hold(ctx, hreq); return err }); err != nil {
			return n, fmt.Errorf("hold %s: %w", opID, err)
		}
		acked("hold:"+opID, began)
		captured := money.Micro(rng.IntN(int(amount) + 1))
		if captured > 0 {
			began := time.Now()
			batch := &wire.CaptureBatch{Host: "host-1", Tick: int64(n), Legs: []wire.CaptureLeg{{ID: opID + "/host-1/vm/1", Hold: opID, VM: "vm", Cumulative: captured}}}
			err := c.do(func(ctx context.Context) error {
				rep, err := c.agent.Capture(ctx, batch)
				if err == nil && rep.Legs[0].Error != nil {
					return rep.Legs[0].Error
				}
				if err == nil && rep.Legs[0].Captured != captured {
					return fmt.Errorf("leg captured %s, want %s", rep.Legs[0].Captured, captured)
				}
				return err
			})
			if err != nil {
				return n, fmt.Errorf("capture %s: %w", opID, err)
			}
			acked("capture:"+opID, began)
		}
		began = time.Now()
		rreq := &wire.ReleaseRequest{Hold: opID, User: me}
		if err := c.do(func(ctx context.Context) error { _, err := c.user.Release(ctx, rreq); return err }); err != nil {
			return n, fmt.Errorf("release %s: %w", opID, err)
		}
		acked("release:"+opID, began)
		m.apply(func() {
			m.balance[me] -= captured
			m.provider += captured
			m.ids[me] = append(m.ids[me], "hold:"+opID)
			if captured < amount {
				m.ids[me] = append(m.ids[me], "release:"+opID)
			}
		})
	}
}
