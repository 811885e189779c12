package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// signers are the principals of the authorization tests.
type signers struct {
	admin, alice, broker, agent1, stranger *signing.Signer
	ids                                    *counting
}

func newSigners(t *testing.T) *signers {
	t.Helper()
	s := &signers{ids: &counting{ps: map[string]wire.Principal{}}}
	for _, p := range []struct {
		to         **signing.Signer
		role, name string
	}{{&s.admin, wire.RoleAdmin, "admin"}, {&s.alice, wire.RoleUser, "alice"}, {&s.broker, wire.RoleBroker, "broker"},
		{&s.agent1, wire.RoleAgent, "host-1"}, {&s.stranger, "", ""}} {
		k, err := signing.NewUserSigner()
		if err != nil {
			t.Fatal(err)
		}
		*p.to = k
		if p.role != "" {
			s.ids.ps[k.Public()] = wire.Principal{Key: k.Public(), Name: p.name, Role: p.role}
		}
	}
	return s
}

func signed(t *testing.T, s *signing.Signer, subject string, req any) *nats.Msg {
	t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if s == nil {
		m := nats.NewMsg(subject)
		m.Data = body
		return m
	}
	m, err := s.Sign(subject, body)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// authTable is a table with the shapes of the bank's, broker's and agent's
// roles: admin only, a user's own or the broker, an agent for its own host,
// and an open read.
func authTable(handled *atomic.Int64) service.Table {
	ok := func(_ context.Context, r *wire.HoldRequest) (wire.HoldReply, error) {
		handled.Add(1)
		return wire.HoldReply{}, nil
	}
	user := func(r *wire.HoldRequest) string { return r.User }
	return service.Table{
		service.Op(service.Endpoint{Name: "grant", Subject: "t.grant", Signed: true, What: "grant", Allow: []service.Allow{service.Role(wire.RoleAdmin)}}, nil, ok),
		service.Op(service.Endpoint{Name: "hold", Subject: "t.hold", Signed: true, What: "hold money of",
			Allow: []service.Allow{service.Role(wire.RoleAdmin), service.Own(wire.RoleUser), service.Role(wire.RoleBroker)}}, user, ok),
		service.Op(service.Endpoint{Name: "capture", Subject: "t.capture", Signed: true, What: "capture for host",
			Allow: []service.Allow{service.Own(wire.RoleAgent)}}, user, ok),
		service.Op(service.Endpoint{Name: "read", Subject: "t.read"}, nil, ok),
	}
}

// TestAuthorize: one function refuses the unsigned, the stale, the unknown,
// the wrong role and the replayed with today's errors and messages, on an
// injected clock, and admits the rest.
func TestAuthorize(t *testing.T) {
	nc := connect(t)
	s := newSigners(t)
	clock := time.Now()
	var handled atomic.Int64
	serve(t, nc, authTable(&handled), service.Options{Auth: &service.Authorizer{Identities: s.ids, Now: func() time.Time { return clock }}})
	hold := func(user string) *wire.HoldRequest {
		return &wire.HoldRequest{Versioned: wire.Versioned{V: 1}, ID: "h", User: user, Amount: 5, Expires: clock.Add(time.Hour)}
	}
	replayed := signed(t, s.admin, "t.grant", hold("alice"))
	if err := send(context.Background(), nc, replayed); err != nil {
		t.Fatal(err)
	}
	stale := signed(t, s.admin, "t.grant", hold("alice"))
	cases := []struct {
		name string
		msg  *nats.Msg
		want error
		msg2 string // the refusal's message, when it matters
	}{
		{"unsigned", signed(t, nil, "t.grant", hold("alice")), signing.ErrUnsigned, ""},
		{"unknown key", signed(t, s.stranger, "t.grant", hold("alice")), signing.ErrUnknownKey, ""},
		{"user grants", signed(t, s.alice, "t.grant", hold("alice")), signing.ErrRole, "alice (user) may not grant"},
		{"hold another's money", signed(t, s.alice, "t.hold", hold("bob")), signing.ErrRole, "alice (user) may not hold money of bob"},
		{"agent holds", signed(t, s.agent1, "t.hold", hold("alice")), signing.ErrRole, "host-1 (agent) may not hold money of alice"},
		{"agent for another host", signed(t, s.agent1, "t.capture", hold("host-2")), signing.ErrRole, "host-1 (agent) may not capture for host host-2"},
		{"admin captures", signed(t, s.admin, "t.capture", hold("host-1")), signing.ErrRole, "admin (admin) may not capture for host host-1"},
		{"replayed", replayed, signing.ErrReplay, ""},
		{"own money", signed(t, s.alice, "t.hold", hold("alice")), nil, ""},
		{"broker for a user", signed(t, s.broker, "t.hold", hold("alice")), nil, ""},
		{"admin for a user", signed(t, s.admin, "t.hold", hold("alice")), nil, ""},
		{"own host", signed(t, s.agent1, "t.capture", hold("host-1")), nil, ""},
		{"open read, unsigned", signed(t, nil, "t.read", hold("alice")), nil, ""},
		{"open read, unknown signer", signed(t, s.stranger, "t.read", hold("alice")), nil, ""},
	}
	for _, c := range cases {
		err := send(context.Background(), nc, c.msg)
		switch {
		case c.want == nil && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != nil && (err == nil || wire.ToError(err).Code != wire.ToError(c.want).Code || !strings.Contains(err.Error(), c.want.Error())):
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		case c.msg2 != "" && !strings.HasSuffix(err.Error(), c.msg2):
			t.Errorf("%s: message %q, want it to end %q", c.name, err, c.msg2)
		}
	}
	// The injected clock decides freshness: 3 minutes on, a message signed
	// now is stale.
	clock = clock.Add(3 * time.Minute)
	if err := send(context.Background(), nc, stale); err == nil || !strings.Contains(err.Error(), signing.ErrStale.Error()) {
		t.Fatalf("stale on the injected clock: %v", err)
	}
}

// TestNoIdentitiesAllowsAnything: without Identities every request passes,
// signed or not, by anyone (what tests and the simulator rely on); a bad
// signature is still refused.
func TestNoIdentitiesAllowsAnything(t *testing.T) {
	nc := connect(t)
	s := newSigners(t)
	var handled atomic.Int64
	serve(t, nc, authTable(&handled), service.Options{})
	for _, m := range []*nats.Msg{
		signed(t, nil, "t.grant", &wire.HoldRequest{Versioned: wire.Versioned{V: 1}, ID: "h", User: "alice", Amount: 5, Expires: time.Now().Add(time.Hour)}),
		signed(t, s.stranger, "t.capture", &wire.HoldRequest{Versioned: wire.Versioned{V: 1}, ID: "h", User: "x", Amount: 5, Expires: time.Now().Add(time.Hour)}),
	} {
		if err := send(context.Background(), nc, m); err != nil {
			t.Fatalf("%s: %v", m.Subject, err)
		}
	}
	// A bad signature is refused all the same.
	bad := signed(t, s.alice, "t.grant", &wire.HoldRequest{Versioned: wire.Versioned{V: 1}, ID: "h", User: "alice", Amount: 5, Expires: time.Now().Add(time.Hour)})
	bad.Header.Set(signing.HeaderKey, s.admin.Public())
	if err := send(context.Background(), nc, bad); err == nil || !strings.Contains(err.Error(), signing.ErrBadSignature.Error()) {
		t.Fatalf("forged: %v", err)
	}
	if handled.Load() != 2 {
		t.Fatalf("handled %d", handled.Load())
	}
}

// TestWhoisCacheOnTheInjectedClock: the Authorizer asks Identities once per
// key per TTL of its clock, and failures are not remembered.
func TestWhoisCacheOnTheInjectedClock(t *testing.T) {
	s := newSigners(t)
	clock := time.Unix(1_000_000, 0)
	a := &service.Authorizer{Identities: s.ids, Whois: service.NewWhoisCache(time.Minute, 10), Now: func() time.Time { return clock }}
	e := authTable(new(atomic.Int64))[0]
	ctx := context.Background()
	caller := func(k *signing.Signer) signing.Caller {
		return signing.Caller{Key: k.Public(), Time: clock, Nonce: fmt.Sprint(clock.UnixNano())}
	}
	for range 3 {
		clock = clock.Add(time.Second)
		if err := a.Authorize(ctx, &e, caller(s.admin), nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.ids.calls.Load(); n != 1 {
		t.Fatalf("%d lookups within the TTL, want 1", n)
	}
	clock = clock.Add(time.Minute)
	if err := a.Authorize(ctx, &e, caller(s.admin), nil); err != nil {
		t.Fatal(err)
	}
	if n := s.ids.calls.Load(); n != 2 {
		t.Fatalf("%d lookups after the TTL, want 2", n)
	}
	for range 2 {
		if err := a.Authorize(ctx, &e, caller(s.stranger), nil); !errors.Is(err, signing.ErrUnknownKey) {
			t.Fatalf("stranger: %v", err)
		}
	}
	if n := s.ids.calls.Load(); n != 4 {
		t.Fatalf("%d lookups: a failure was cached", n)
	}
}

// TestWhoisCacheIsBounded: past its size the least recently used key goes.
func TestWhoisCacheIsBounded(t *testing.T) {
	c := service.NewWhoisCache(time.Hour, 3)
	now := time.Unix(0, 0)
	for i := range 3 {
		c.Put(fmt.Sprint(i), wire.Principal{Name: fmt.Sprint(i)}, now)
	}
	if _, ok := c.Get("0", now); !ok { // 0 is now the most recently used
		t.Fatal("0 missing")
	}
	for i := 3; i < 1000; i++ {
		c.Put(fmt.Sprint(i), wire.Principal{Name: fmt.Sprint(i)}, now)
		if c.Len() > 3 {
			t.Fatalf("%d keys held, bound 3", c.Len())
		}
		if i == 3 {
			if _, ok := c.Get("1", now); ok {
				t.Fatal("1, the least recently used, was kept")
			}
			if _, ok := c.Get("0", now); !ok {
				t.Fatal("0, recently used, was evicted")
			}
		}
	}
	if p, ok := c.Get("999", now.Add(time.Hour-time.Nanosecond)); !ok || p.Name != "999" {
		t.Fatalf("999: %+v %v", p, ok)
	}
	if _, ok := c.Get("999", now.Add(time.Hour)); ok {
		t.Fatal("kept past its TTL")
	}
}
