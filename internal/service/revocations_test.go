package service_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestRevocationNoticesForgetKeys: a component caching alice forgets her
// at once when the bank's notice of her revocation comes — a forged
// notice (sealed by another key) or a registration passed off as one is
// ignored — and forgets everyone when its connection comes back (notices
// published meanwhile were lost). Without notices, the cache's TTL is the
// bound.
func TestRevocationNoticesForgetKeys(t *testing.T) {
	admin, alice, bob, mallory := newKey(t), newKey(t), newKey(t), newKey(t)
	ns, bank := natstest.Start(t)
	follower, err := nats.Connect(ns.ClientURL(), nats.ReconnectWait(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(follower.Close)
	now := time.Now()
	cache := service.NewWhoisCache(time.Minute, 16)
	for _, s := range []*signing.Signer{alice, bob} {
		cache.Put(s.Public(), wire.Principal{Key: s.Public(), Name: "x", Role: wire.RoleUser}, now)
	}
	heard, lost := service.Forgetting(cache)
	stop, err := service.FollowRevocations(follower, admin.Public(), heard, lost)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := follower.Flush(); err != nil {
		t.Fatal(err)
	}
	cached := func(s *signing.Signer) bool { _, ok := cache.Get(s.Public(), now); return ok }
	notice := func(cert *wire.Sealed) wire.RevokedNotice {
		return wire.RevokedNotice{Key: alice.Public(), Name: "alice", Role: wire.RoleUser, Record: cert}
	}
	for name, n := range map[string]wire.RevokedNotice{
		"sealed by mallory": notice(signing.SealRevocation(mallory, alice.Public(), "alice", wire.RoleUser)),
		"a registration":    notice(signing.SealPrincipal(admin, alice.Public(), "alice", wire.RoleUser)),
		"no record":         notice(nil),
	} {
		if err := service.PublishRevoked(bank, n); err != nil {
			t.Fatal(err)
		}
		_ = bank.Flush()
		_ = follower.Flush()
		time.Sleep(50 * time.Millisecond)
		if !cached(alice) {
			t.Fatalf("a notice %s made the cache forget alice", name)
		}
	}
	start := time.Now()
	if err := service.PublishRevoked(bank, notice(signing.SealRevocation(admin, alice.Public(), "alice", wire.RoleUser))); err != nil {
		t.Fatal(err)
	}
	testpoll.CheckFor(t, time.Second, time.Millisecond, func() error {
		if cached(alice) {
			return fmt.Errorf("alice still cached %s after her revocation's notice", time.Since(start))
		}
		return nil
	})
	if !cached(bob) {
		t.Fatal("bob forgotten with alice")
	}

	// A reconnection: whatever was announced meanwhile is lost, so the
	// cache starts over.
	cid, err := follower.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.DisconnectClientByID(cid); err != nil {
		t.Fatal(err)
	}
	testpoll.CheckFor(t, 5*time.Second, time.Millisecond, func() error {
		if cached(bob) {
			return errors.New("bob still cached after the follower reconnected")
		}
		return nil
	})

	// The TTL bounds what no notice reaches.
	cache.Put(bob.Public(), wire.Principal{Key: bob.Public()}, now)
	if _, ok := cache.Get(bob.Public(), now.Add(time.Minute)); ok {
		t.Fatal("an entry outlived the cache's TTL")
	}
}

// TestCertifiedRefusesARevocation: a registry answering with the admin's
// revocation record of the asked key makes nobody a principal: whoever
// checks records refuses a revoked key without being told.
func TestCertifiedRefusesARevocation(t *testing.T) {
	admin, alice := newKey(t), newKey(t)
	reg := answers{alice.Public(): {Key: alice.Public(), Name: "alice", Role: wire.RoleUser,
		Cert: signing.SealRevocation(admin, alice.Public(), "alice", wire.RoleUser)}}
	_, err := service.Certified(reg, admin.Public(), nil).Whois(context.Background(), alice.Public())
	if !errors.Is(err, signing.ErrUnknownKey) || !strings.Contains(err.Error(), signing.ErrRevoked.Error()) {
		t.Fatalf("a revoked key's record: %v", err)
	}
}

// A daemon's connection logs its reconnects, and following revocations
// keeps that: the follower's reconnect handler runs after the one the
// connection was made with.
func TestReconnectsLoggedWhileFollowingRevocations(t *testing.T) {
	c := natstest.StartCluster(t, 2)
	var out syncBuf
	nc, err := natsutil.ConnectWith(c.URL(), natsutil.ConnectOptions{Name: "mrmarket-broker", Logger: slog.New(slog.NewTextHandler(&out, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	lost := make(chan struct{}, 1)
	stop, err := service.FollowRevocations(nc, "", func(wire.RevokedNotice) {}, func() { lost <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c.Kill(c.Index(nc.ConnectedServerName()))
	select {
	case <-lost:
	case <-time.After(20 * time.Second):
		t.Fatal("the follower did not hear the reconnect")
	}
	testpoll.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if got := out.String(); !strings.Contains(got, `msg="nats: connection lost; reconnecting" conn=mrmarket-broker err=`) ||
			!strings.Contains(got, `msg="nats: reconnected" conn=mrmarket-broker`) {
			return fmt.Errorf("log: %s", got)
		}
		return nil
	})
	nc.Close()
	if strings.Count(out.String(), "connection lost") != 1 {
		t.Errorf("a close on purpose logged as a lost connection: %s", out.String())
	}
}
