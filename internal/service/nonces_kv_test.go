package service_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/signing"
)

// TestKVNoncesAreShared: two stores over one MRM_NONCES bucket (two
// replicas, or one before and after a restart) refuse a nonce either used.
func TestKVNoncesAreShared(t *testing.T) {
	ctx := context.Background()
	ns := natstest.Server(t)
	open := func() service.KVNonces {
		js, err := jetstream.New(natstest.Connect(t, ns))
		if err != nil {
			t.Fatal(err)
		}
		kv, err := natsutil.EnsureNonces(ctx, js)
		if err != nil {
			t.Fatal(err)
		}
		return service.KVNonces{KV: kv}
	}
	a, b := open(), open()
	now := time.Now()
	c := signing.Caller{Key: "UKEY", Time: now, Nonce: "n1"}
	if err := a.Use(ctx, c, now); err != nil {
		t.Fatal(err)
	}
	if err := b.Use(ctx, c, now); !errors.Is(err, signing.ErrReplay) {
		t.Fatalf("replay to the other store: %v", err)
	}
	if err := open().Use(ctx, c, now); !errors.Is(err, signing.ErrReplay) {
		t.Fatalf("replay after a restart: %v", err)
	}
	if err := b.Use(ctx, signing.Caller{Key: "UKEY", Time: now, Nonce: "n2"}, now); err != nil {
		t.Fatalf("a new nonce: %v", err)
	}
}
