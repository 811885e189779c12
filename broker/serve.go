package broker

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// Serve feeds b with every host's state (the live subject, after catching
// up from the MRM_HOSTS bucket when it exists) and answers the broker's
// subjects in the broker's queue group. stop unsubscribes.
func Serve(nc *nats.Conn, b *Broker) (stop func(), err error) {
	var subs []*nats.Subscription
	stop = func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}
	states, err := nc.Subscribe(wire.AllHostStates, func(m *nats.Msg) {
		var st wire.HostState
		if err := wire.Decode(m.Data, &st); err != nil {
			b.cfg.Metrics.Error("broker", "bad_state")
			return
		}
		b.Observe(st)
	})
	if err != nil {
		return nil, err
	}
	subs = append(subs, states)
	if err := catchUp(nc, b); err != nil {
		stop()
		return nil, err
	}
	observe := func(op string) func(string) {
		return func(code string) { b.cfg.Metrics.Request("broker", op, code) }
	}
	add := func(s *nats.Subscription, err error) error {
		if err == nil {
			subs = append(subs, s)
		}
		return err
	}
	q := wire.QueueBroker
	for _, err := range []error{
		add(wire.ServeSigned(nc, wire.BrokerSpend, q, observe("spend"), func(ctx context.Context, r *wire.SpendRequest, c wire.Caller) (any, error) {
			if err := b.authorize(ctx, c, r.User); err != nil {
				return nil, err
			}
			return b.Spend(ctx, r)
		})),
		add(wire.ServeSigned(nc, wire.BrokerCancel, q, observe("cancel"), func(ctx context.Context, r *wire.CancelRequest, c wire.Caller) (any, error) {
			if err := b.authorize(ctx, c, r.User); err != nil {
				return nil, err
			}
			return b.Cancel(ctx, r)
		})),
		add(wire.ServeSigned(nc, wire.BrokerAdjust, q, observe("adjust"), func(ctx context.Context, r *wire.AdjustRequest, c wire.Caller) (any, error) {
			if err := b.authorize(ctx, c, r.User); err != nil {
				return nil, err
			}
			return b.Adjust(ctx, r)
		})),
		add(wire.ServeSigned(nc, wire.BrokerQuote, q, observe("quote"), func(ctx context.Context, r *wire.QuoteRequest, c wire.Caller) (any, error) {
			if err := b.authorize(ctx, c, r.User); err != nil {
				return nil, err
			}
			return b.Quote(ctx, r)
		})),
		add(wire.ServeSigned(nc, wire.BrokerSubmit, q, observe("submit"), func(ctx context.Context, r *wire.SubmitRequest, c wire.Caller) (any, error) {
			if err := b.authorize(ctx, c, r.User); err != nil {
				return nil, err
			}
			return b.Submit(ctx, r)
		})),
		add(wire.ServeSigned(nc, wire.BrokerProgress, q, observe("progress"), func(ctx context.Context, r *wire.ProgressRequest, c wire.Caller) (any, error) {
			if err := b.authorize(ctx, c, r.User); err != nil {
				return nil, err
			}
			return b.JobProgress(ctx, r)
		})),
		add(wire.ServeObserved(nc, wire.BrokerJobs, q, observe("jobs"), func(_ context.Context, r *wire.JobsRequest) (any, error) { return b.Jobs(r), nil })),
		add(wire.ServeObserved(nc, wire.BrokerPredict, q, observe("predict"), func(_ context.Context, r *wire.PredictRequest) (any, error) { return b.Predict(r) })),
		add(wire.ServeObserved(nc, wire.BrokerPlans, q, observe("plans"), func(_ context.Context, r *wire.PlansRequest) (any, error) { return b.Plans(r), nil })),
		add(wire.ServeObserved(nc, wire.BrokerPrice, q, observe("price"), func(_ context.Context, r *wire.PriceRequest) (any, error) { return b.Price(r) })),
		add(wire.ServeObserved(nc, wire.BrokerVMs, q, observe("vms"), func(_ context.Context, r *wire.VMsRequest) (any, error) { return b.VMs(r), nil })),
	} {
		if err != nil {
			stop()
			return nil, err
		}
	}
	if err := nc.Flush(); err != nil {
		stop()
		return nil, err
	}
	return stop, nil
}

// catchUp reads the last state of every host from the MRM_HOSTS bucket.
// No JetStream or no bucket yet is not an error: states will come live.
func catchUp(nc *nats.Conn, b *Broker) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil
	}
	kv, err := js.KeyValue(ctx, wire.BucketHosts)
	if err != nil {
		return nil
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil
	}
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		var st wire.HostState
		if err := wire.Decode(e.Value(), &st); err != nil {
			b.cfg.Metrics.Error("broker", "bad_state")
			continue
		}
		b.Observe(st)
	}
	return nil
}

// Client is the broker over NATS. Its methods set each request's version
// and sign spends and cancels with Signer, or else with the credentials Keys
// holds for the request's user.
type Client struct {
	NC     *nats.Conn
	Signer *wire.Signer
	Keys   wire.Keyring
}

func (c Client) callAs(ctx context.Context, user, subject string, req, res any) error {
	s, err := wire.SignerFor(c.Signer, c.Keys, wire.RoleUser, user)
	if err != nil {
		return err
	}
	return wire.CallAs(ctx, c.NC, s, subject, req, res)
}

// Spend starts a plan.
func (c Client) Spend(ctx context.Context, req *wire.SpendRequest) (rep wire.SpendReply, err error) {
	req.V = wire.Version
	return rep, c.callAs(ctx, req.User, wire.BrokerSpend, req, &rep)
}

// Cancel ends a plan now.
func (c Client) Cancel(ctx context.Context, req *wire.CancelRequest) (rep wire.Plan, err error) {
	req.V = wire.Version
	return rep, c.callAs(ctx, req.User, wire.BrokerCancel, req, &rep)
}

// Adjust gives a running plan more or less budget.
func (c Client) Adjust(ctx context.Context, req *wire.AdjustRequest) (rep wire.Plan, err error) {
	req.V = wire.Version
	return rep, c.callAs(ctx, req.User, wire.BrokerAdjust, req, &rep)
}

// Predict asks a what-if question of a host's price history.
func (c Client) Predict(ctx context.Context, req *wire.PredictRequest) (rep wire.PredictReply, err error) {
	req.V = wire.Version
	return rep, wire.Call(ctx, c.NC, wire.BrokerPredict, req, &rep)
}

// Plans lists plans.
func (c Client) Plans(ctx context.Context, req *wire.PlansRequest) (rep wire.PlansReply, err error) {
	req.V = wire.Version
	return rep, wire.Call(ctx, c.NC, wire.BrokerPlans, req, &rep)
}

// Price reports host prices.
func (c Client) Price(ctx context.Context, req *wire.PriceRequest) (rep wire.PriceReply, err error) {
	req.V = wire.Version
	return rep, wire.Call(ctx, c.NC, wire.BrokerPrice, req, &rep)
}

// VMs lists VMs.
func (c Client) VMs(ctx context.Context, req *wire.VMsRequest) (rep wire.VMsReply, err error) {
	req.V = wire.Version
	return rep, wire.Call(ctx, c.NC, wire.BrokerVMs, req, &rep)
}

// Quote asks for a job's price-deadline curve.
func (c Client) Quote(ctx context.Context, req *wire.QuoteRequest) (rep wire.QuoteReply, err error) {
	req.V = wire.Version
	return rep, c.callAs(ctx, req.User, wire.BrokerQuote, req, &rep)
}

// Submit admits a job with a deadline.
func (c Client) Submit(ctx context.Context, req *wire.SubmitRequest) (rep wire.SubmitReply, err error) {
	req.V = wire.Version
	return rep, c.callAs(ctx, req.User, wire.BrokerSubmit, req, &rep)
}

// Progress reports a job's progress.
func (c Client) Progress(ctx context.Context, req *wire.ProgressRequest) (rep wire.Job, err error) {
	req.V = wire.Version
	return rep, c.callAs(ctx, req.User, wire.BrokerProgress, req, &rep)
}

// Jobs lists admitted jobs.
func (c Client) Jobs(ctx context.Context, req *wire.JobsRequest) (rep wire.JobsReply, err error) {
	req.V = wire.Version
	return rep, wire.Call(ctx, c.NC, wire.BrokerJobs, req, &rep)
}
