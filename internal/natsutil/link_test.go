package natsutil_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/natsutil"
)

// stalledKV is a bucket whose writes are never acknowledged: a write in
// flight with its server gone.
type stalledKV struct {
	jetstream.KeyValue
	writing chan struct{}
}

func (s stalledKV) Put(ctx context.Context, _ string, _ []byte) (uint64, error) {
	s.writing <- struct{}{}
	<-ctx.Done()
	return 0, ctx.Err()
}

// A bounded write whose connection loses its server ends at once as
// ErrLinkLost, not after its attempt; with no connection to watch it ends
// after the attempt. Mutation: Bounded ignoring nc waits out the 10 s
// attempt and fails the test.
func TestBoundedWriteEndsWhenItsConnectionIsLost(t *testing.T) {
	ns := natstest.Server(t)
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	kv := stalledKV{writing: make(chan struct{}, 1)}
	answered := make(chan error, 1)
	go func() {
		_, err := natsutil.Bounded(kv, nc, 10*time.Second).Put(context.Background(), "k", nil)
		answered <- err
	}()
	<-kv.writing
	ns.Shutdown()
	select {
	case err := <-answered:
		if !errors.Is(err, natsutil.ErrLinkLost) {
			t.Fatalf("the write ended with %v, want ErrLinkLost", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the write still waits 5 s after its connection lost its server")
	}

	unwatched := stalledKV{writing: make(chan struct{}, 1)}
	start := time.Now()
	if _, err := natsutil.Bounded(unwatched, nil, 50*time.Millisecond).Put(context.Background(), "k", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unwatched write: %v, want its attempt's deadline", err)
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Fatalf("unwatched write ended after %s, before its attempt", took)
	}
}
