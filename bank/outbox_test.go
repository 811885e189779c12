package bank_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// auditStream is what MRM_EVENTS holds of the bank's events, in order.
func auditStream(t *testing.T, nc *nats.Conn) []wire.Event {
	t.Helper()
	ctx := context.Background()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, wire.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []wire.Event
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted
		}
		if !strings.HasPrefix(m.Subject, "mrm.v1.events.bank.") {
			continue
		}
		var ev wire.Event
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatalf("event %d: %v", seq, err)
		}
		if m.Header.Get(jetstream.MsgIDHeader) != ev.ID {
			t.Fatalf("event %s stored with dedupe id %q", ev.ID, m.Header.Get(jetstream.MsgIDHeader))
		}
		out = append(out, ev)
	}
	return out
}

// waitEvents waits until the stream holds n bank events, and fails t if
// it holds more (a duplicate).
func waitEvents(t *testing.T, nc *nats.Conn, n int) []wire.Event {
	t.Helper()
	var evs []wire.Event
	testpoll.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		if evs = auditStream(t, nc); len(evs) < n {
			return fmt.Errorf("%d of %d events in the stream", len(evs), n)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond) // a duplicate would come now
	if evs = auditStream(t, nc); len(evs) != n {
		t.Fatalf("%d events in the stream, want %d: %v", len(evs), n, ops(evs))
	}
	return evs
}

func ops(evs []wire.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Op+":"+ev.Principal.Name)
	}
	return out
}

// TestAuditOutbox: every money movement over NATS reaches MRM_EVENTS once,
// in order, as the service used to publish it (the signed request, its
// principal, the result); with the stream gone the bank still serves, the
// events wait in its outbox, and arrive once the stream is back.
func TestAuditOutbox(t *testing.T) { eachStore(t, testAuditOutbox) }

func testAuditOutbox(t *testing.T, target string) {
	ctx := context.Background()
	s := serveBank(t, target)
	if _, err := natsutil.EnsureAssets(ctx, s.nc); err != nil {
		t.Fatal(err)
	}
	c := bank.Client{NC: s.nc, Keys: s.keys}
	host1 := bank.Client{NC: s.nc, Signer: s.signer(t, wire.RoleAgent, "host-1")}
	steps := []func() error{
		func() error {
			_, err := c.Grant(ctx, &wire.GrantRequest{ID: "g1", User: "alice", Amount: 100})
			return err
		},
		func() error { _, err := c.Grant(ctx, &wire.GrantRequest{ID: "g0", User: "bob", Amount: 1}); return err },
		func() error {
			_, err := c.Transfer(ctx, &wire.TransferRequest{ID: "t1", From: "alice", To: "bob", Amount: 10})
			return err
		},
		func() error {
			_, err := c.Hold(ctx, &wire.HoldRequest{ID: "h1", User: "alice", Amount: 50, Expires: t0.Add(time.Hour)})
			return err
		},
		func() error {
			_, err := host1.Capture(ctx, &wire.CaptureBatch{Host: "host-1", Tick: 1, Legs: []wire.CaptureLeg{{ID: "h1/host-1/v/1", Hold: "h1", VM: "v", Cumulative: 5}}})
			return err
		},
		func() error { _, err := c.Release(ctx, &wire.ReleaseRequest{Hold: "h1", User: "alice"}); return err },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	evs := waitEvents(t, s.nc, 6)
	want := []string{"grant:admin", "grant:admin", "transfer:alice", "hold:alice", "capture:host-1", "release:alice"}
	if got := ops(evs); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("events %v, want %v", got, want)
	}
	for _, ev := range evs {
		signer, err := signing.CheckRequest(ev.Request)
		if err != nil || ev.Component != "bank" || ev.ID != wire.EventID(signer.Key, signer.Nonce) || signer.Key != ev.Principal.Key ||
			ev.Request.Subject != "mrm.v1.bank."+ev.Op || len(ev.Result) == 0 || ev.At.IsZero() || ev.V != wire.Version {
			t.Fatalf("event %+v (%v)", ev, err)
		}
	}
	var g wire.GrantReply
	if err := json.Unmarshal(evs[0].Result, &g); err != nil || g.Transfer != "grant:g1" || g.Balance != 100 {
		t.Fatalf("the grant's result: %s", evs[0].Result)
	}
	if n, err := s.b.OutboxLen(ctx); err != nil || n != 0 {
		t.Fatalf("outbox after publishing: %d %v", n, err)
	}

	// The admin deletes the stream: money still moves, its events wait.
	js, err := jetstream.New(s.nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, wire.StreamEvents); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Grant(ctx, &wire.GrantRequest{ID: "g2", User: "bob", Amount: 7}); err != nil {
		t.Fatalf("a grant with the audit stream gone: %v", err)
	}
	if _, err := c.Transfer(ctx, &wire.TransferRequest{ID: "t2", From: "bob", To: "alice", Amount: 3}); err != nil {
		t.Fatalf("a transfer with the audit stream gone: %v", err)
	}
	if n, err := s.b.OutboxLen(ctx); err != nil || n != 2 {
		t.Fatalf("outbox with the stream gone: %d %v", n, err)
	}
	time.Sleep(500 * time.Millisecond) // the publisher tries, and fails
	if _, err := natsutil.EnsureAssets(ctx, s.nc); err != nil {
		t.Fatal(err)
	}
	evs = waitEvents(t, s.nc, 2)
	if got := ops(evs); got[0] != "grant:admin" || got[1] != "transfer:bob" {
		t.Fatalf("events after the stream came back: %v", got)
	}
	if n, err := s.b.OutboxLen(ctx); err != nil || n != 0 {
		t.Fatalf("outbox after the stream came back: %d %v", n, err)
	}
}

// TestAuditOutboxReplicas: two bank replicas on one store, both serving
// and publishing, the first stopped half-way: every event reaches the
// stream exactly once, and each user's chain of transfers in its order.
func TestAuditOutboxReplicas(t *testing.T) { eachStore(t, testAuditOutboxReplicas) }

func testAuditOutboxReplicas(t *testing.T, target string) {
	ctx := context.Background()
	s := serveBank(t, target)
	if _, err := natsutil.EnsureAssets(ctx, s.nc); err != nil {
		t.Fatal(err)
	}
	// A second bank process on the same store, with its own connection.
	b2, err := bank.Open(target, bank.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b2.Close() })
	nc2, err := nats.Connect(s.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc2.Close)
	stop2, err := bank.Serve(nc2, b2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop2)
	c := bank.Client{NC: s.nc, Keys: s.keys}
	for _, u := range []string{"alice", "bob", "carol"} {
		if _, err := c.Grant(ctx, &wire.GrantRequest{ID: "g-" + u, User: u, Amount: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	const each = 20
	transfers := func(from, to int) {
		var wg sync.WaitGroup
		for i, u := range []string{"alice", "bob", "carol"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := from; k < to; k++ {
					req := &wire.TransferRequest{ID: fmt.Sprintf("t-%d", k), From: u, To: []string{"alice", "bob", "carol"}[(i+1)%3], Amount: 1, Memo: fmt.Sprint(k)}
					if _, err := c.Transfer(ctx, req); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	transfers(0, each/2)
	s.stop() // the first replica goes: the second serves and publishes on
	transfers(each/2, each)
	evs := waitEvents(t, s.nc, 3+3*each)
	next := map[string]int{}
	seen := map[string]bool{}
	for _, ev := range evs {
		if seen[ev.ID] {
			t.Fatalf("event %s twice", ev.ID)
		}
		seen[ev.ID] = true
		if ev.Op != "transfer" {
			continue
		}
		var req wire.TransferRequest
		if err := json.Unmarshal(ev.Request.Body, &req); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprint(next[req.From]); req.Memo != want {
			t.Fatalf("%s's transfer %s came before %s", req.From, req.Memo, want)
		}
		next[req.From]++
	}
	for _, b := range []*bank.Bank{s.b, b2} {
		if n, err := b.OutboxLen(ctx); err != nil || n != 0 {
			t.Fatalf("outbox: %d %v", n, err)
		}
	}
}

// auditedOnce fails t unless every transfer, hold and release m records
// has exactly one event in MRM_EVENTS of the request that made it (its
// replays have their own events, marked replayed or releasing nothing),
// and no event is there twice, once b's outbox is empty.
func auditedOnce(t *testing.T, nc *nats.Conn, b *bank.Bank, m *model) {
	t.Helper()
	testpoll.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		if n, err := b.OutboxLen(context.Background()); err != nil || n > 0 {
			return fmt.Errorf("%d events still in the outbox (%v)", n, err)
		}
		return nil
	})
	made := map[string]int{}
	seen := map[string]bool{}
	for _, ev := range auditStream(t, nc) {
		if seen[ev.ID] {
			t.Errorf("event %s twice in the stream", ev.ID)
		}
		seen[ev.ID] = true
		switch ev.Op {
		case "transfer":
			var r wire.TransferReply
			if json.Unmarshal(ev.Result, &r) == nil && !r.Replayed {
				made[r.Transfer]++
			}
		case "hold":
			var r wire.HoldReply
			if json.Unmarshal(ev.Result, &r) == nil && !r.Replayed {
				made["hold:"+r.Hold.ID]++
			}
		case "release":
			var r wire.ReleaseReply
			if json.Unmarshal(ev.Result, &r) == nil && r.Released > 0 {
				made["release:"+r.Hold.ID]++
			}
		}
	}
	for _, ids := range m.ids {
		for _, id := range ids {
			if made[id] != 1 {
				t.Errorf("%s: %d audit events of the request that made it, want 1", id, made[id])
			}
		}
	}
}
