package service_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestForgeriesDoNotTakeTheirVictimsQueue: requests naming alice's key
// with a bad signature are refused at once as bad signatures, before they
// are queued, so they never fill alice's queue: with one worker held by
// her first request and her bound at 2, 50 forgeries are all refused at
// once as forgeries (queued, they would wait behind her request, then be
// refused busy), and her second request is served, not refused busy.
func TestForgeriesDoNotTakeTheirVictimsQueue(t *testing.T) {
	nc := connect(t)
	alice := newKey(t)
	release := make(chan struct{})
	var served atomic.Int64
	serve(t, nc, service.Table{service.Op(service.Endpoint{Name: "echo", Subject: "test.echo", Queue: "q"}, nil,
		func(_ context.Context, r *wire.BalanceRequest) (wire.BalanceReply, error) {
			if served.Add(1) == 1 {
				<-release // alice's first request holds one of her two places
			}
			return wire.BalanceReply{User: r.User}, nil
		})}, service.Options{Fair: &service.Fair{Workers: 1, PerPrincipal: 2, Unordered: true}})
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		_, err := rpc.Request[struct{}](ctx, nc, "test.echo", &wire.BalanceRequest{Versioned: wire.Versioned{V: 1}, User: "alice"}, rpc.SignedBy(alice))
		first <- err
	}()
	for served.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	for i := range 50 {
		m, err := alice.Sign("test.echo", []byte(`{"v":1,"user":"alice"}`))
		if err != nil {
			t.Fatal(err)
		}
		m.Data = []byte(`{"v":1,"user":"mallory"}`) // her signature, another body
		short, cancel := context.WithTimeout(ctx, time.Second)
		err = send(short, nc, m)
		cancel()
		if !errors.Is(err, wire.ErrForbidden) || !strings.Contains(err.Error(), "signature") {
			t.Fatalf("forgery %d: %v, want refused at once for its signature", i, err)
		}
	}
	second := make(chan error, 1)
	go func() {
		_, err := rpc.Request[struct{}](ctx, nc, "test.echo", &wire.BalanceRequest{Versioned: wire.Versioned{V: 1}, User: "alice"}, rpc.SignedBy(alice))
		second <- err
	}()
	time.Sleep(50 * time.Millisecond) // queued behind her first (a busy refusal would be back by now)
	close(release)
	for _, c := range []chan error{first, second} {
		if err := <-c; err != nil {
			t.Fatalf("alice's request with 50 forgeries of her key sent: %v", err)
		}
	}
}

// TestHeadersAreBounded: an order key longer than an id, or headers past
// 4 KiB, are refused at once as bad requests; within them, served.
func TestHeadersAreBounded(t *testing.T) {
	nc := connect(t)
	serve(t, nc, service.Table{service.Op(service.Endpoint{Name: "echo", Subject: "test.echo"}, nil,
		func(_ context.Context, r *wire.BalanceRequest) (wire.BalanceReply, error) {
			return wire.BalanceReply{User: r.User}, nil
		})},
		service.Options{Fair: &service.Fair{}})
	ctx := context.Background()
	call := func(h nats.Header) error {
		m := nats.NewMsg("test.echo")
		m.Header, m.Data = h, []byte(`{"v":1,"user":"alice"}`)
		return send(ctx, nc, m)
	}
	if err := call(nats.Header{wire.HeaderOrder: {strings.Repeat("p", 200)}}); err != nil {
		t.Fatalf("an order key of 200 bytes: %v", err)
	}
	err := call(nats.Header{wire.HeaderOrder: {strings.Repeat("p", 100_000)}})
	if !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), wire.HeaderOrder) {
		t.Fatalf("an order key of 100 KB: %v, want a bad request", err)
	}
	if err := call(nats.Header{"X-Pad": {strings.Repeat("x", 5000)}}); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("5 KB of headers: %v, want a bad request", err)
	}
}
