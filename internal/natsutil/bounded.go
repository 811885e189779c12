package natsutil

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Bounded is kv with each read and write given at most attempt, and ended
// at once if nc (the connection kv is on; nil: not watched) loses its
// server meanwhile (WhileConnected). A write in flight when its stream's
// leader dies gets no acknowledgement, ever: the new leader does not answer
// for the old one. Unbounded, it waits out the whole request's deadline
// (5 s) while its client retried long ago; bounded, it fails as no answer
// after one attempt and the request is answered unavailable, to be retried
// by its id — what every caller of a bucket does with "no response from
// stream" (no leader yet) already. Watches and the other methods are kv's
// own.
func Bounded(kv jetstream.KeyValue, nc *nats.Conn, attempt time.Duration) jetstream.KeyValue {
	return boundedKV{kv, nc, attempt}
}

type boundedKV struct {
	jetstream.KeyValue
	nc      *nats.Conn
	attempt time.Duration
}

// bound is one read's or write's context, and what to make of its error.
func (b boundedKV) bound(ctx context.Context) (context.Context, func(error) error) {
	ctx, cancel := context.WithTimeout(ctx, b.attempt)
	if b.nc == nil {
		return ctx, func(err error) error { cancel(); return err }
	}
	linked, unlink := WhileConnected(ctx, b.nc)
	return linked, func(err error) error {
		if err != nil && LinkLost(linked) {
			err = fmt.Errorf("%w (%v)", ErrLinkLost, err)
		}
		unlink()
		cancel()
		return err
	}
}

func (b boundedKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	ctx, end := b.bound(ctx)
	e, err := b.KeyValue.Get(ctx, key)
	return e, end(err)
}

func (b boundedKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	ctx, end := b.bound(ctx)
	rev, err := b.KeyValue.Put(ctx, key, value)
	return rev, end(err)
}

func (b boundedKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	ctx, end := b.bound(ctx)
	rev, err := b.KeyValue.Create(ctx, key, value, opts...)
	return rev, end(err)
}

func (b boundedKV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	ctx, end := b.bound(ctx)
	rev, err := b.KeyValue.Update(ctx, key, value, revision)
	return rev, end(err)
}

func (b boundedKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	ctx, end := b.bound(ctx)
	return end(b.KeyValue.Delete(ctx, key, opts...))
}

// WrongLastSequence reports whether err is JetStream refusing a write that
// expected another last sequence: a bucket's compare-and-set whose key
// changed, or a fenced publish another came before (single-replica and
// replicated streams answer with different codes).
func WrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
