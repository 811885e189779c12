package natstest

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Bid sends host's agent req alone, a batch of one (wire.OneBid), as a
// test acting for a broker does, and gives the request's error or, if the
// agent answered, the change's.
func Bid(ctx context.Context, nc *nats.Conn, host string, req *wire.BidRequest, opts ...rpc.Option) error {
	res, err := rpc.Request[wire.BidResults](ctx, nc, wire.AgentBidSubject(host), wire.OneBid(req), opts...)
	if err != nil {
		return err
	}
	return res.Err(0)
}
