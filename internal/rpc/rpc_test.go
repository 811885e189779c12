package rpc_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// seen is what the echo service saw of a request.
type seen struct {
	Key   string `json:"key"`
	Nonce string `json:"nonce"`
	Order string `json:"order"`
	Body  string `json:"body"`
}

// echo answers on subject what it saw of each request, after checking its
// signature; an invalid one is refused.
func echo(t *testing.T, nc *nats.Conn, subject string) {
	t.Helper()
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		c, err := signing.VerifyMsg(m, time.Now())
		_ = m.Respond(wire.EncodeReply(seen{Key: c.Key, Nonce: c.Nonce, Order: m.Header.Get(wire.HeaderOrder), Body: string(m.Data)}, err))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// keyring is a Keyring of fixed signers.
type keyring map[string]*signing.Signer

func (k keyring) Signer(role, name string) (*signing.Signer, error) {
	if s, ok := k[role+"/"+name]; ok {
		return s, nil
	}
	return nil, wire.Errorf(wire.ErrForbidden, "no credentials for %s %s", role, name)
}

// TestRequestSignsAsTold: unsigned without a signer, signed by the fixed
// signer, or by the keyring's credentials of the principal named; always
// stamped with this version; with the extra headers asked for.
func TestRequestSignsAsTold(t *testing.T) {
	_, nc := natstest.Start(t)
	echo(t, nc, "svc")
	fixed, alice := signer(t), signer(t)
	keys := keyring{"user/alice": alice}
	ctx := context.Background()
	req := func() *wire.BalanceRequest { return &wire.BalanceRequest{User: "alice"} } // version 0: Request stamps it
	for _, c := range []struct {
		what string
		opts []rpc.Option
		key  string
	}{
		{"no signer", nil, ""},
		{"a nil signer", []rpc.Option{rpc.SignedBy(nil)}, ""},
		{"a fixed signer", []rpc.Option{rpc.SignedBy(fixed)}, fixed.Public()},
		{"as alice, from the keyring", []rpc.Option{rpc.SignedAs(rpc.As{Role: wire.RoleUser, Name: "alice"}, nil, keys)}, alice.Public()},
		{"as alice, by a fixed signer", []rpc.Option{rpc.SignedAs(rpc.As{Role: wire.RoleUser, Name: "alice"}, fixed, keys)}, fixed.Public()},
		{"as nobody", []rpc.Option{rpc.SignedAs(rpc.As{}, fixed, keys)}, ""},
		{"the last signing option", []rpc.Option{rpc.SignedBy(fixed), rpc.SignedAs(rpc.As{Role: wire.RoleUser, Name: "alice"}, nil, keys)}, alice.Public()},
	} {
		got, err := rpc.Request[seen](ctx, nc, "svc", req(), c.opts...)
		if err != nil || got.Key != c.key || got.Body != `{"v":1,"user":"alice"}` {
			t.Errorf("%s: %+v %v, want signed by %q", c.what, got, err, c.key)
		}
	}
	got, err := rpc.Request[seen](ctx, nc, "svc", req(), rpc.SignedBy(fixed), rpc.Header(wire.HeaderOrder, "p-1"))
	if err != nil || got.Order != "p-1" || got.Key != fixed.Public() {
		t.Errorf("with an order: %+v %v", got, err)
	}
	// Credentials the keyring does not have: nothing is sent.
	if _, err := rpc.Request[seen](ctx, nc, "svc", req(), rpc.SignedAs(rpc.As{Role: wire.RoleUser, Name: "bob"}, nil, keys)); !errors.Is(err, wire.ErrForbidden) {
		t.Errorf("bob without credentials: %v", err)
	}
	if _, err := rpc.Request[seen](ctx, nc, "svc", nil); !errors.Is(err, wire.ErrBadRequest) {
		t.Errorf("no request: %v", err)
	}
}

// TestVerbatim sends a message's headers and body as they are: a replay
// carries the first signature and nonce.
func TestVerbatim(t *testing.T) {
	_, nc := natstest.Start(t)
	echo(t, nc, "svc")
	s := signer(t)
	m, err := s.Sign("svc", []byte(`{"v":9}`))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		got, err := rpc.Request[seen](context.Background(), nc, "svc", nil, rpc.Verbatim(m))
		if err != nil || got.Key != s.Public() || got.Nonce != m.Header.Get(signing.HeaderNonce) || got.Body != `{"v":9}` {
			t.Fatalf("verbatim: %+v %v", got, err)
		}
	}
	// Sent on another subject than it was signed for, it is refused there:
	// the message's own subject is not what Verbatim sends on.
	echo(t, nc, "moved")
	_, err = rpc.Request[seen](context.Background(), nc, "moved", nil, rpc.Verbatim(m))
	if !errors.Is(err, wire.ErrForbidden) || !strings.Contains(err.Error(), signing.ErrBadSignature.Error()) {
		t.Fatalf("a signature moved to another subject: %v", err)
	}
}

// TestRefusalsAndSilence: a refusal is its *wire.Error; nobody there and
// no answer in time are unavailable, told apart by NoAnswer and TimedOut.
func TestRefusalsAndSilence(t *testing.T) {
	_, nc := natstest.Start(t)
	sub, err := nc.Subscribe("refuses", func(m *nats.Msg) { _ = m.Respond(wire.EncodeReply(nil, wire.Errorf(wire.ErrNotFound, "no such hold"))) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	silent, err := nc.Subscribe("silent", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Unsubscribe()
	ctx := context.Background()
	_, err = rpc.Request[seen](ctx, nc, "refuses", &wire.LedgerRequest{})
	if !errors.Is(err, wire.ErrNotFound) || err.Error() != "not found: no such hold" || rpc.NoAnswer(err) {
		t.Errorf("a refusal: %v", err)
	}
	_, err = rpc.Request[seen](ctx, nc, "nobody", &wire.LedgerRequest{})
	if !errors.Is(err, wire.ErrUnavailable) || !rpc.NoAnswer(err) || rpc.TimedOut(err) {
		t.Errorf("nobody there: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = rpc.Request[seen](short, nc, "silent", &wire.LedgerRequest{})
	if !errors.Is(err, wire.ErrUnavailable) || !rpc.NoAnswer(err) || !rpc.TimedOut(err) {
		t.Errorf("no answer in time: %v", err)
	}
}

// TestNoResultWanted: Request[struct{}] decodes no result, whatever it is.
func TestNoResultWanted(t *testing.T) {
	_, nc := natstest.Start(t)
	sub, err := nc.Subscribe("list", func(m *nats.Msg) { _ = m.Respond(wire.EncodeReply([]int{1, 2}, nil)) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if _, err := rpc.Request[struct{}](context.Background(), nc, "list", &wire.LedgerRequest{}); err != nil {
		t.Fatal(err)
	}
	if got, err := rpc.Request[[]int](context.Background(), nc, "list", &wire.LedgerRequest{}); err != nil || len(got) != 2 {
		t.Fatalf("the result: %v %v", got, err)
	}
}

// TestRetriedSignsEachTryAfresh: a try whose answer was lost is sent again
// after its attempt, with a new signature and nonce, and the second answers.
func TestRetriedSignsEachTryAfresh(t *testing.T) {
	_, nc := natstest.Start(t)
	var mu sync.Mutex
	var nonces []string
	sub, err := nc.Subscribe("flaky", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		nonces = append(nonces, m.Header.Get(signing.HeaderNonce))
		if len(nonces) > 1 { // the first is lost
			_ = m.Respond(wire.EncodeReply(map[string]int{"tries": len(nonces)}, nil))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	got, err := rpc.Request[map[string]int](context.Background(), nc, "flaky", &wire.LedgerRequest{}, rpc.SignedBy(signer(t)),
		rpc.Retried(100*time.Millisecond, rpc.TimedOut))
	mu.Lock()
	defer mu.Unlock()
	if err != nil || got["tries"] != 2 || len(nonces) != 2 || nonces[0] == nonces[1] || nonces[0] == "" {
		t.Fatalf("%v %v, nonces %q", got, err, nonces)
	}
	raw, _ := json.Marshal(got)
	if string(raw) != `{"tries":2}` {
		t.Fatalf("result %s", raw)
	}
}

// A request whose connection to NATS is lost before its answer comes is
// answered unavailable at once — the request or its answer may have gone
// down with the server — as a try that timed out (TimedOut: sent again by
// Retried), not after the rest of its attempt, so its retry goes out on the
// next connection. Mutation: Request without natsutil.WhileConnected waits
// out the 10 s and fails the test.
func TestRequestEndsWhenItsConnectionIsLost(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []rpc.Option
	}{
		{"plain", nil},
		{"trusted", []rpc.Option{rpc.Trusted(nil, nil)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := natstest.Server(t)
			got := make(chan struct{}, 1)
			silent := natstest.Connect(t, ns)
			if _, err := silent.Subscribe("silent", func(*nats.Msg) { got <- struct{}{} }); err != nil {
				t.Fatal(err)
			}
			if err := silent.Flush(); err != nil {
				t.Fatal(err)
			}
			nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			answered := make(chan error, 1)
			go func() {
				_, err := rpc.Request[struct{}](ctx, nc, "silent", &wire.LedgerRequest{}, c.opts...)
				answered <- err
			}()
			<-got
			lost := time.Now()
			ns.Shutdown()
			select {
			case err := <-answered:
				if !errors.Is(err, wire.ErrUnavailable) || !rpc.TimedOut(err) {
					t.Fatalf("answered %v: want unavailable, as a try that timed out", err)
				}
				t.Logf("answered %s after the server went: %v", time.Since(lost).Round(time.Millisecond), err)
			case <-time.After(5 * time.Second):
				t.Fatal("the request still waits 5 s after its connection was lost")
			}
		})
	}
}
