package daemon

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// BankConfig configures the bank daemon.
type BankConfig struct {
	Env
	// Store is the ledger: sqlite:PATH (or a bare path) or postgres://….
	Store string
	// Signer is the bank's own key: it signs every reply.
	Signer *signing.Signer
	// OnPrincipal hears every principal stored (the embedded NATS server
	// reloads its users).
	OnPrincipal func(wire.Principal)
	// Tick is how often Run expires holds, pays income and forgets nonces.
	Tick time.Duration
}

// Bank is the bank daemon: the ledger on its store, served on NATS once
// Serve is called.
type Bank struct {
	*bank.Bank
	cfg BankConfig
	// NC is the bank's connection and Assets what it opened, after Serve.
	NC     *nats.Conn
	Assets *natsutil.Assets
}

// OpenBank opens the bank's store. It is not on NATS yet: the caller
// registers the principals first (the NATS server may admit exactly them),
// then calls Serve.
func OpenBank(cfg BankConfig) (*Bank, error) {
	b, err := bank.Open(cfg.Store, bank.Options{Now: cfg.Now, Metrics: cfg.Metrics, Logger: cfg.Logger, OnPrincipal: cfg.OnPrincipal,
		AdminKey: cfg.AdminKey, Signer: cfg.Signer})
	if err != nil {
		return nil, err
	}
	cfg.Stopper.AddCloser(func() { _ = b.Close() })
	return &Bank{Bank: b, cfg: cfg}, nil
}

// Serve connects the bank as connAs (its own key once registered; the
// admin's before), opens the audit stream it publishes into (the admin's)
// and answers its subjects.
func (b *Bank) Serve(ctx context.Context, connAs *signing.Signer) error {
	nc, err := b.cfg.connect("mrmarket-bank", connAs)
	if err != nil {
		return err
	}
	assets, err := natsutil.OpenBankAssets(ctx, nc, b.cfg.AssetsWait)
	if err != nil {
		return unavailable(err)
	}
	stopServing, err := bank.Serve(nc, b.Bank)
	if err != nil {
		return err
	}
	b.cfg.Stopper.AddCloser(stopServing)
	b.NC, b.Assets = nc, assets
	// Its gauges are read when scraped, while it serves.
	b.cfg.Stopper.AddCloser(b.cfg.Metrics.SetBank(b.Gauges))
	return nil
}

// Run ticks the bank every BankConfig.Tick (bank.Run) in a task of the
// stopper, until ctx ends or the stopper stops.
func (b *Bank) Run(ctx context.Context) error {
	return b.cfg.Stopper.RunTask(ctx, "bank", func(ctx context.Context) { bank.Run(ctx, b.Bank, b.cfg.Tick) })
}
