package daemon

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/signing"
)

// BrokerConfig configures a broker replica.
type BrokerConfig struct {
	Env
	// Signer is the broker's key: it connects, seals plan records and
	// signs holds and bids with it.
	Signer *signing.Signer
	// Tick, Settle, DeadlineShare, JobOrder and Replica are
	// broker.Config's (zero: its defaults).
	Tick          time.Duration
	Settle        time.Duration
	DeadlineShare float64
	JobOrder      string
	Replica       string
	// RecreatePlans is broker.Config's: who makes a deleted plans bucket
	// again (nil: the admin, by hand).
	RecreatePlans func(ctx context.Context) error
}

// Broker is a broker replica, serving.
type Broker struct {
	*broker.Broker
	cfg    BrokerConfig
	NC     *nats.Conn
	Assets *natsutil.Assets
}

// StartBroker connects the broker, opens the plans and nonces buckets (the
// admin's), and serves its subjects, taking host states from the agents and
// checking users' signatures through the bank.
func StartBroker(ctx context.Context, cfg BrokerConfig) (*Broker, error) {
	nc, err := cfg.connect("mrmarket-broker", cfg.Signer)
	if err != nil {
		return nil, err
	}
	assets, err := natsutil.OpenBrokerAssets(ctx, nc, cfg.AssetsWait)
	if err != nil {
		return nil, unavailable(err)
	}
	signed, identities := cfg.bankClients(nc, cfg.Signer, "broker")
	b, err := broker.New(broker.Config{NC: nc, Signer: cfg.Signer, AdminKey: cfg.AdminKey, Bank: signed, Identities: identities,
		Now: cfg.Now, Metrics: cfg.Metrics, Logger: cfg.Logger, Plans: assets.Plans, RecreatePlans: cfg.RecreatePlans,
		Nonces: service.KVNonces{KV: assets.Nonces, NC: nc}, Tick: cfg.Tick, Settle: cfg.Settle,
		DeadlineShare: cfg.DeadlineShare, JobOrder: cfg.JobOrder, Replica: cfg.Replica})
	if err != nil {
		return nil, err
	}
	cfg.Stopper.AddCloser(b.Close)
	stopServing, err := broker.Serve(nc, b)
	if err != nil {
		return nil, err
	}
	cfg.Stopper.AddCloser(stopServing)
	// Its gauges are read when scraped, while it serves.
	cfg.Stopper.AddCloser(cfg.Metrics.SetBroker(b.Gauges))
	return &Broker{Broker: b, cfg: cfg, NC: nc, Assets: assets}, nil
}

// Run ticks the broker every BrokerConfig.Tick (broker.Run) in a task of
// the stopper, until ctx ends or the stopper stops.
func (b *Broker) Run(ctx context.Context) error {
	return b.cfg.Stopper.RunTask(ctx, "broker", func(ctx context.Context) { broker.Run(ctx, b.Broker) })
}
