package service_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestReadsMineOwnAsAndReplayable: a replayable read answers a replayed
// signature again (no nonce stored) while a mutating endpoint still
// refuses it; OpMine gives a user asking for nobody its own, refuses it
// another's, and lets an admin read everyone's; OwnAs admits an agent only
// for the account its name maps to, never a user named like the host.
func TestReadsMineOwnAsAndReplayable(t *testing.T) {
	nc := connect(t)
	s := newSigners(t)
	hostNamed, err := signing.NewUserSigner() // a user named like a host
	if err != nil {
		t.Fatal(err)
	}
	s.ids.ps[hostNamed.Public()] = wire.Principal{Key: hostNamed.Public(), Name: "host-1", Role: wire.RoleUser}
	provider := func(name string) string { return "provider:" + name }
	asked := make(chan string, 16)
	table := service.Table{
		service.OpMine(service.Endpoint{Name: "plans", Subject: "t.plans", Signed: true, Replayable: true, What: "list the plans of",
			Allow: []service.Allow{service.Role(wire.RoleAdmin), service.Own(wire.RoleUser)}},
			func(r *wire.PlansRequest) *string { return &r.User },
			func(_ context.Context, r *wire.PlansRequest) (wire.PlansReply, error) {
				asked <- r.User
				return wire.PlansReply{}, nil
			}),
		service.Op(service.Endpoint{Name: "statement", Subject: "t.statement", Signed: true, Replayable: true, What: "read",
			Allow: []service.Allow{service.Role(wire.RoleAdmin), service.OwnAs(wire.RoleAgent, provider)}},
			func(r *wire.StatementRequest) string { return r.Account },
			func(context.Context, *wire.StatementRequest) (wire.StatementReply, error) {
				return wire.StatementReply{}, nil
			}),
	}
	serve(t, nc, table, service.Options{Auth: &service.Authorizer{Identities: s.ids}, Fair: &service.Fair{}})
	ctx := context.Background()
	plans := func(user string) *wire.PlansRequest {
		return &wire.PlansRequest{Versioned: wire.Versioned{V: 1}, User: user}
	}
	call := func(m *nats.Msg) error { return send(ctx, nc, m) }

	if err := call(signed(t, s.alice, "t.plans", plans(""))); err != nil || <-asked != "alice" {
		t.Fatalf("alice asking for nobody reads her own: %v", err)
	}
	if err := call(signed(t, s.admin, "t.plans", plans(""))); err != nil || <-asked != "" {
		t.Fatalf("admin reads everyone's: %v", err)
	}
	if err := call(signed(t, s.alice, "t.plans", plans("bob"))); !refusedAs(err, signing.ErrRole) {
		t.Fatalf("alice reads bob's: %v", err)
	}
	if err := call(signed(t, nil, "t.plans", plans(""))); !refusedAs(err, signing.ErrUnsigned) {
		t.Fatalf("unsigned read: %v", err)
	}
	again := signed(t, s.alice, "t.plans", plans("alice"))
	for i := range 2 {
		if err := call(again); err != nil {
			t.Fatalf("replayable read, time %d: %v", i+1, err)
		}
		<-asked
	}

	st := func(account string) *wire.StatementRequest {
		return &wire.StatementRequest{Versioned: wire.Versioned{V: 1}, Account: account}
	}
	if err := call(signed(t, s.agent1, "t.statement", st("provider:host-1"))); err != nil {
		t.Fatalf("agent reads its provider account: %v", err)
	}
	if err := call(signed(t, s.agent1, "t.statement", st("provider:host-2"))); !refusedAs(err, signing.ErrRole) {
		t.Fatalf("agent reads another's: %v", err)
	}
	if err := call(signed(t, hostNamed, "t.statement", st("provider:host-1"))); !refusedAs(err, signing.ErrRole) {
		t.Fatalf("a user named like the host reads its provider account: %v", err)
	}
	if err := call(signed(t, s.agent1, "t.statement", st("host-1"))); !refusedAs(err, signing.ErrRole) {
		t.Fatalf("agent reads the account named like itself: %v", err)
	}
}

// TestTableRefusesAReplayableOpenEndpoint: replayable is for signed reads.
func TestTableRefusesAReplayableOpenEndpoint(t *testing.T) {
	tb := service.Table{service.Op(service.Endpoint{Name: "r", Subject: "t.r", Replayable: true}, nil, nop[*wire.StateRequest])}
	if err := tb.Check(); !errors.Is(err, service.ErrReplayableOpen) {
		t.Fatalf("check: %v", err)
	}
}

// recorder is an Auditor keeping what it hears.
type recorder struct {
	mu     sync.Mutex
	events []wire.Event
}

func (r *recorder) Audit(ev wire.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

func (r *recorder) all() []wire.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]wire.Event(nil), r.events...)
}

// TestAuditHearsSuccessesOnly: an Audit endpoint's success is heard once,
// with the signed request as sent (it verifies), the principal and the
// result; a refusal and a non-audit endpoint are not.
func TestAuditHearsSuccessesOnly(t *testing.T) {
	nc := connect(t)
	s := newSigners(t)
	var handled atomic.Int64
	table := authTable(&handled)
	table[0].Audit = true // grant
	rec := &recorder{}
	serve(t, nc, table, service.Options{Auth: &service.Authorizer{Identities: s.ids}, Audit: rec, Fair: &service.Fair{}})
	hold := &wire.HoldRequest{Versioned: wire.Versioned{V: 1}, ID: "h", User: "alice", Amount: 5, Expires: time.Now().Add(time.Hour)}
	ok := signed(t, s.admin, "t.grant", hold)
	if err := send(context.Background(), nc, ok); err != nil {
		t.Fatal(err)
	}
	if err := send(context.Background(), nc, signed(t, s.alice, "t.grant", hold)); !refusedAs(err, signing.ErrRole) {
		t.Fatalf("refused grant: %v", err)
	}
	if err := send(context.Background(), nc, signed(t, s.alice, "t.hold", hold)); err != nil {
		t.Fatal(err)
	}
	testpoll.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if len(rec.all()) == 0 {
			return errors.New("no audit event")
		}
		return nil
	})
	evs := rec.all()
	if len(evs) != 1 {
		t.Fatalf("events %+v", evs)
	}
	ev := evs[0]
	c, err := signing.CheckRequest(ev.Request)
	if err != nil || c.Key != s.admin.Public() || ev.Principal.Name != "admin" || ev.Component != "test" || ev.Op != "grant" ||
		ev.ID != wire.EventID(c.Key, c.Nonce) || string(ev.Request.Body) != string(ok.Data) || len(ev.Result) == 0 {
		t.Fatalf("event %+v (check %v)", ev, err)
	}
}

// refusedAs reports a refusal with want's code and message, as a client
// decodes it.
func refusedAs(err, want error) bool {
	return err != nil && wire.ToError(err).Code == wire.ToError(want).Code && strings.Contains(err.Error(), want.Error())
}
