package bank

import (
	"context"
	"log/slog"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// OpenAtMigration opens target migrated only up to migration number last
// ("0002"): a store as a bank of that schema left it.
func OpenAtMigration(target, last string) (*Bank, error) {
	st, err := openStore(target)
	if err != nil {
		return nil, err
	}
	b := &Bank{st: st, now: time.Now, logger: slog.New(slog.DiscardHandler), outboxKick: make(chan struct{}, 1)}
	if err := b.migrateTo(context.Background(), last); err != nil {
		st.db.Close()
		return nil, err
	}
	return b, nil
}

// Fingerprint is what the bank compares a request's retry by, for rows a
// test writes as an older bank did.
var Fingerprint = fingerprint

// CaptureAlone commits batch in a transaction of its own, whatever else is
// waiting: the bank before group commit, for the benchmark to compare.
func (b *Bank) CaptureAlone(ctx context.Context, batch *wire.CaptureBatch) (wire.CaptureReply, error) {
	if err := batch.Validate(); err != nil {
		return wire.CaptureReply{}, err
	}
	reps, err := b.commitCaptureTx(ctx, []*captureCall{{ctx: ctx, batch: batch}})
	if err != nil {
		return wire.CaptureReply{}, err
	}
	return reps[0], nil
}

// CaptureTries is how many capture transactions ran and how many times they
// began in all.
func (b *Bank) CaptureTries() (txs, tries int64) { return b.captureTxs.Load(), b.captureTries.Load() }
