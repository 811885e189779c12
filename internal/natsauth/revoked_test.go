package natsauth_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestPrincipalRemovedIsDisconnected: a principal dropped from the users
// (a revoked key) loses the connection it holds at the reload, and is
// refused when it reconnects or connects anew; the others keep theirs.
func TestPrincipalRemovedIsDisconnected(t *testing.T) {
	s := world(t)
	alice := s.Signer(t, wire.RoleUser, "alice")
	held := s.Connect(t, wire.RoleUser, "alice")
	dropped := make(chan struct{}, 1)
	held.SetDisconnectErrHandler(func(*nats.Conn, error) {
		select {
		case dropped <- struct{}{}:
		default:
		}
	})
	held.SetErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}) // the refusals are expected
	bob := s.Connect(t, wire.RoleUser, "bob")

	s.Remove(t, alice.Public())
	select {
	case <-dropped:
	case <-time.After(time.Second):
		t.Fatalf("alice's connection not dropped within 1s of the reload: %s", held.Status())
	}
	// nats.go keeps trying (mrmarket's reconnect policy); the server
	// refuses every try. Wait for a refused try rather than a guessed time:
	// under load the first reconnect may come late.
	testpoll.CheckFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		if held.IsConnected() {
			return errors.New("alice's connection reconnected after her key was removed")
		}
		if err := held.LastError(); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			return fmt.Errorf("alice's reconnects: last error %v, want an authorization violation", err)
		}
		return nil
	})
	if held.IsConnected() {
		t.Fatal("alice's connection reconnected after her key was removed")
	}
	if _, err := s.ConnectAs(t, alice); err == nil || !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("alice connecting anew: %v", err)
	}
	if !bob.IsConnected() {
		t.Fatalf("bob's connection: %s", bob.Status())
	}
}
