package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

func connect(t *testing.T) *nats.Conn {
	t.Helper()
	_, nc := natstest.Start(t)
	return nc
}

// send sends msg as it is (signed, replayed, forged, malformed) and
// decodes the reply.
func send(ctx context.Context, nc *nats.Conn, msg *nats.Msg) error {
	_, err := rpc.Request[struct{}](ctx, nc, msg.Subject, nil, rpc.Verbatim(msg))
	return err
}

func serve(t *testing.T, nc *nats.Conn, table service.Table, opts service.Options) micro.Service {
	t.Helper()
	svc, err := service.Serve(nc, "test", "1.0.0", table, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	return svc
}

// TestServeAndCallOverNATS: a handler's result and errors come back as
// envelopes, a panic is an internal error, a bad request never reaches the
// handler, and a subject nobody serves is unavailable. (It was wire's test
// of wire.Serve, with the same assertions.)
func TestServeAndCallOverNATS(t *testing.T) {
	nc := connect(t)
	calls := 0
	serve(t, nc, service.Table{service.Op(service.Endpoint{Name: "grant", Subject: "test.grant", Queue: "q"}, nil,
		func(_ context.Context, req *wire.GrantRequest) (wire.GrantReply, error) {
			calls++
			if req.User == "panic" {
				panic("boom")
			}
			if req.User == "nobody" {
				return wire.GrantReply{}, wire.Errorf(wire.ErrNotFound, "unknown user %q", req.User)
			}
			return wire.GrantReply{User: req.User, Amount: req.Amount}, nil
		})}, service.Options{})
	ctx := context.Background()

	if rep, err := rpc.Request[wire.GrantReply](ctx, nc, "test.grant", &wire.GrantRequest{Versioned: wire.Versioned{V: 1}, ID: "g", User: "alice", Amount: 3}); err != nil || rep.Amount != 3 {
		t.Fatalf("call: %+v %v", rep, err)
	}
	_, err := rpc.Request[wire.GrantReply](ctx, nc, "test.grant", &wire.GrantRequest{Versioned: wire.Versioned{V: 1}, ID: "g", User: "nobody", Amount: 3})
	if !errors.Is(err, wire.ErrNotFound) || !strings.Contains(err.Error(), "nobody") {
		t.Fatalf("not found: %v", err)
	}
	_, err = rpc.Request[wire.GrantReply](ctx, nc, "test.grant", &wire.GrantRequest{Versioned: wire.Versioned{V: 1}, ID: "g", User: "panic", Amount: 3})
	if !errors.Is(err, wire.ErrInternal) {
		t.Fatalf("panic: %v", err)
	}
	before := calls
	err = send(ctx, nc, &nats.Msg{Subject: "test.grant", Data: []byte(`{"v":1,"id":"g","user":"alice","amount_micro":-3}`)})
	if !errors.Is(err, wire.ErrBadRequest) || calls != before {
		t.Fatalf("bad request reached the handler or was accepted: %v", err)
	}
	_, err = rpc.Request[wire.GrantReply](ctx, nc, "test.nobody", &wire.GrantRequest{})
	if !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("no responders: %v", err)
	}
}

// TestRepliesAreTheEnvelope: a reply's body is exactly wire.EncodeReply of
// the result or the error, so clients from before the service table decode
// it; a refusal also carries micro's error headers, and micro counts it.
func TestRepliesAreTheEnvelope(t *testing.T) {
	nc := connect(t)
	svc := serve(t, nc, service.Table{service.Op(service.Endpoint{Name: "echo", Subject: "test.echo"}, nil,
		func(_ context.Context, r *wire.BalanceRequest) (wire.BalanceReply, error) {
			if r.User == "nobody" {
				return wire.BalanceReply{}, wire.Errorf(wire.ErrNotFound, "unknown user %q\nsecond line", r.User)
			}
			return wire.BalanceReply{User: r.User, Balance: 7}, nil
		})}, service.Options{})

	ok, err := nc.Request("test.echo", []byte(`{"v":1,"user":"alice"}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if want := wire.EncodeReply(wire.BalanceReply{User: "alice", Balance: 7}, nil); string(ok.Data) != string(want) {
		t.Fatalf("reply %s, want %s", ok.Data, want)
	}
	refused, err := nc.Request("test.echo", []byte(`{"v":1,"user":"nobody"}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := wire.EncodeReply(nil, wire.Errorf(wire.ErrNotFound, "unknown user %q\nsecond line", "nobody"))
	if string(refused.Data) != string(want) {
		t.Fatalf("refusal %s, want %s", refused.Data, want)
	}
	if code, desc := refused.Header.Get(micro.ErrorCodeHeader), refused.Header.Get(micro.ErrorHeader); code != "404" || strings.ContainsAny(desc, "\r\n") || !strings.Contains(desc, "nobody") {
		t.Fatalf("micro error headers %q %q", code, desc)
	}
	// micro counts a request once its handler returns, which is after the
	// reply went out: the second may not be counted yet.
	testpoll.CheckFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		if st := svc.Stats().Endpoints[0]; st.NumRequests != 2 || st.NumErrors != 1 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
}

// TestDiscovery: the service answers micro's $SRV.INFO with its endpoints,
// their subjects, queue groups and who may call them.
func TestDiscovery(t *testing.T) {
	nc := connect(t)
	serve(t, nc, service.Table{
		service.Op(service.Endpoint{Name: "hold", Subject: "test.hold", Queue: "mrm-test", Signed: true, What: "hold money of",
			Allow: []service.Allow{service.Role(wire.RoleAdmin), service.Own(wire.RoleUser)}}, func(r *wire.HoldRequest) string { return r.User }, nop[*wire.HoldRequest]),
		service.Op(service.Endpoint{Name: "state", Subject: "test.state"}, nil, nop[*wire.StateRequest]),
	}, service.Options{})
	m, err := nc.Request("$SRV.INFO.test", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(m.Data, &info); err != nil {
		t.Fatal(err)
	}
	if len(info.Endpoints) != 2 {
		t.Fatalf("info %+v", info)
	}
	hold, state := info.Endpoints[0], info.Endpoints[1]
	if hold.Subject != "test.hold" || hold.QueueGroup != "mrm-test" || hold.Metadata["roles"] != "admin, user (own)" || hold.Metadata["signed"] != "true" {
		t.Fatalf("hold %+v", hold)
	}
	if state.Subject != "test.state" || state.Metadata["signed"] != "false" || state.Metadata["request"] != "wire.StateRequest" {
		t.Fatalf("state %+v", state)
	}
}

func nop[PT any](context.Context, PT) (struct{}, error) { return struct{}{}, nil }

// TestOneConnectionManyServices: several components (agents of a process)
// serve their tables on one connection, each answering its own subjects,
// and stopping one leaves the others.
func TestOneConnectionManyServices(t *testing.T) {
	nc := connect(t)
	stops := map[string]func(){}
	for _, host := range []string{"h1", "h2", "h3"} {
		svc, err := service.Serve(nc, "agent", "1.0.0", service.Table{service.Op(service.Endpoint{Name: "state", Subject: wire.AgentStateSubject(host)}, nil,
			func(context.Context, *wire.StateRequest) (wire.HostState, error) {
				return wire.HostState{Host: host}, nil
			})}, service.Options{})
		if err != nil {
			t.Fatal(err)
		}
		stops[host] = func() { _ = svc.Stop() }
		t.Cleanup(stops[host])
	}
	ctx := context.Background()
	for _, host := range []string{"h1", "h2", "h3"} {
		if st, err := rpc.Request[wire.HostState](ctx, nc, wire.AgentStateSubject(host), &wire.StateRequest{Versioned: wire.Versioned{V: 1}}); err != nil || st.Host != host {
			t.Fatalf("%s: %+v %v", host, st, err)
		}
	}
	stops["h2"]()
	if _, err := rpc.Request[struct{}](ctx, nc, wire.AgentStateSubject("h2"), &wire.StateRequest{Versioned: wire.Versioned{V: 1}}); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("stopped h2 still answers: %v", err)
	}
	if st, err := rpc.Request[wire.HostState](ctx, nc, wire.AgentStateSubject("h3"), &wire.StateRequest{Versioned: wire.Versioned{V: 1}}); err != nil || st.Host != "h3" {
		t.Fatalf("h3 after h2 stopped: %+v %v", st, err)
	}
}

// TestObserveHearsEveryOutcome: the observe hook hears refusals the handler
// never sees.
func TestObserveHearsEveryOutcome(t *testing.T) {
	nc := connect(t)
	var seen []string
	done := make(chan struct{}, 8)
	serve(t, nc, service.Table{service.Op(service.Endpoint{Name: "balance", Subject: "test.balance"}, nil,
		func(_ context.Context, r *wire.BalanceRequest) (wire.BalanceReply, error) {
			return wire.BalanceReply{}, nil
		})},
		service.Options{Observe: func(op, code string, _ time.Duration) { seen = append(seen, op+":"+code); done <- struct{}{} }})
	ctx := context.Background()
	_ = send(ctx, nc, &nats.Msg{Subject: "test.balance", Data: []byte(`{"v":1,"user":"alice"}`)})
	_ = send(ctx, nc, &nats.Msg{Subject: "test.balance", Data: []byte(`{"v":1,"user":"a.b"}`)})
	<-done
	<-done
	if got := strings.Join(seen, " "); got != "balance:ok balance:bad_request" {
		t.Fatalf("observed %q", got)
	}
}

// TestCheckRefusesBadTables: a table that cannot be served is refused
// before anything subscribes.
func TestCheckRefusesBadTables(t *testing.T) {
	own := []service.Allow{service.Own(wire.RoleUser)}
	h := nop[*wire.BalanceRequest]
	cases := map[string]struct {
		t    service.Table
		want error
	}{
		"no handler": {service.Table{{Name: "a", Subject: "s"}}, service.ErrNoHandler},
		"bad name":   {service.Table{service.Op(service.Endpoint{Name: "a.b", Subject: "s"}, nil, h)}, service.ErrBadName},
		"twice": {service.Table{service.Op(service.Endpoint{Name: "a", Subject: "s"}, nil, h),
			service.Op(service.Endpoint{Name: "b", Subject: "s"}, nil, h)}, service.ErrDuplicate},
		"signed, nobody": {service.Table{service.Op(service.Endpoint{Name: "a", Subject: "s", Signed: true}, nil, h)}, service.ErrNoRoles},
		"open, roles":    {service.Table{service.Op(service.Endpoint{Name: "a", Subject: "s", Allow: own}, nil, h)}, service.ErrOpenRoles},
		"own, no actsFor": {service.Table{service.Op(service.Endpoint{Name: "a", Subject: "s", Signed: true, Allow: own}, nil, h)},
			service.ErrNoActsFor},
	}
	for name, c := range cases {
		if err := c.t.Check(); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

// counting is Identities over a fixed map, counting lookups.
type counting struct {
	ps    map[string]wire.Principal
	calls atomic.Int64
}

func (c *counting) Whois(_ context.Context, key string) (wire.Principal, error) {
	c.calls.Add(1)
	p, ok := c.ps[key]
	if !ok {
		return p, fmt.Errorf("%w %s", signing.ErrUnknownKey, key)
	}
	return p, nil
}

// syncBuf is a log's output, written by the service's goroutines.
type syncBuf struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestMoneyMovingRequestsLoggedOneLineEach: a request that moves money is
// one line whatever came of it — who, the op, its id and amount, the
// result — and a refused one is not logged a second time as a refusal.
func TestMoneyMovingRequestsLoggedOneLineEach(t *testing.T) {
	nc := connect(t)
	var out syncBuf
	serve(t, nc, service.Table{service.Op(service.Endpoint{Name: "transfer", Subject: "test.transfer", Audit: true}, nil,
		func(_ context.Context, r *wire.TransferRequest) (wire.TransferReply, error) {
			if r.To == "nobody" {
				return wire.TransferReply{}, wire.Errorf(wire.ErrNotFound, "unknown user %q", r.To)
			}
			return wire.TransferReply{Transfer: r.ID}, nil
		})}, service.Options{Logger: slog.New(slog.NewTextHandler(&out, nil))})
	ctx := context.Background()
	_ = send(ctx, nc, &nats.Msg{Subject: "test.transfer", Data: []byte(`{"v":1,"id":"t1","from":"alice","to":"bob","amount_micro":5}`)})
	_ = send(ctx, nc, &nats.Msg{Subject: "test.transfer", Data: []byte(`{"v":1,"id":"t2","from":"alice","to":"nobody","amount_micro":7}`)})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want two lines:\n%s", out.String())
	}
	for i, want := range []string{`msg="test: transfer" principal=unsigned op=transfer id=t1 from=alice to=bob amount_micro=5 result=ok`,
		`msg="test: transfer" principal=unsigned op=transfer id=t2 from=alice to=nobody amount_micro=7 result=not_found err=`} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d: %s\nwant %s", i, lines[i], want)
		}
	}
}
