package bank

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// floodSize is the flood the test sends: 20k requests; under
// the race detector, which slows serving some tenfold (and runs beside the
// whole suite), a smaller one asserts the same.
func floodSize() int {
	if raceEnabled {
		return 500
	}
	return 20_000
}

// floodResult is what a legitimate principal saw during a flood.
type floodResult struct {
	legit, failed   int
	p50, p99, worst time.Duration
	floodOK, busy   int64
	floodTook       time.Duration
}

func (r floodResult) String() string {
	return fmt.Sprintf("legit balance: %d requests, %d failed; during the flood p50 %v, p99 %v, max %v; flood: %d answered, %d refused busy, in %v",
		r.legit, r.failed, r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), r.worst.Round(time.Microsecond),
		r.floodOK, r.busy, r.floodTook.Round(time.Millisecond))
}

// TestFloodDoesNotStarveOthers: while mallory floods the bank with 20k
// signed balance requests (her own: each one is allowed and costs the bank
// a transaction), every one of alice's balance requests succeeds within the
// default timeout, because requests are queued per signer and served in
// turn. With -v it also measures the same flood served the old way (each
// endpoint's requests in arrival order by one goroutine) and logs both.
func TestFloodDoesNotStarveOthers(t *testing.T) {
	if testing.Short() {
		t.Skip("a 20k-request flood")
	}
	if testing.Verbose() {
		t.Run("serial (before)", func(t *testing.T) {
			t.Logf("serial (before): %s", flood(t, nil))
		})
	}
	t.Run("fair", func(t *testing.T) {
		r := flood(t, &service.Fair{})
		t.Logf("fair (after): %s", r)
		if r.failed > 0 {
			t.Fatalf("legitimate requests failed during the flood: %s", r)
		}
		if r.busy == 0 && floodSize() > service.DefaultPerPrincipal {
			t.Fatalf("the flooder was never told busy: %s", r)
		}
	})
}

// flood serves a bank with fair (nil: serially) and measures alice's
// balance requests, one at a time, while mallory's flood is answered.
func flood(t *testing.T, fair *service.Fair) floodResult {
	n := floodSize()
	ns, nc := natstest.Start(t)
	b, err := Open(filepath.Join(t.TempDir(), "bank.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	signers := map[string]*wire.Signer{}
	for _, u := range []string{"alice", "mallory"} {
		s, err := wire.NewUserSigner()
		if err != nil {
			t.Fatal(err)
		}
		signers[u] = s
		if _, err := b.AddPrincipal(ctx, &wire.PrincipalRequest{Key: s.Public(), Name: u, Role: wire.RoleUser}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Grant(ctx, &wire.GrantRequest{ID: "g-" + u, User: u, Amount: 1_000_000}); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := service.Serve(nc, "mrm-bank", service.Version, Endpoints(b), service.Options{
		Auth: &service.Authorizer{Identities: b, Nonces: storeNonces{b}}, Fair: fair})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop() }()

	// mallory's flood, signed beforehand so that it arrives as fast as NATS
	// carries it, on a connection of her own.
	fc := natstest.Connect(t, ns)
	inbox := nats.NewInbox()
	var answered, busy atomic.Int64
	allAnswered := make(chan struct{})
	sub, err := fc.Subscribe(inbox, func(m *nats.Msg) {
		if m.Header.Get(micro.ErrorCodeHeader) == "503" {
			busy.Add(1)
		}
		if answered.Add(1) == int64(n) {
			close(allAnswered)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"v":1,"user":"mallory"}`)
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		if msgs[i], err = signers["mallory"].Sign(wire.BankBalance, body); err != nil {
			t.Fatal(err)
		}
		msgs[i].Reply = inbox
	}

	alice := Client{NC: natstest.Connect(t, ns), Signer: signers["alice"]}
	start := time.Now()
	go func() {
		for _, m := range msgs {
			_ = fc.PublishMsg(m)
		}
		_ = fc.Flush()
	}()
	// alice asks one balance at a time (a closed loop: she does not flood
	// herself), 5 ms apart, until the flood is answered and she asked 50;
	// the latencies are those of her requests sent while it was served.
	var (
		latencies []time.Duration
		asked     int
		failed    int
		floodTook time.Duration
	)
	done := false
	for sent := 0; !done || sent < 50; sent++ {
		time.Sleep(5 * time.Millisecond)
		select {
		case <-allAnswered:
			if !done {
				floodTook, done = time.Since(start), true
			}
		default:
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("the flood was not answered in a minute (%d of %d)", answered.Load(), n)
		}
		if done && sent >= 50 {
			break
		}
		asked++
		t0 := time.Now()
		if _, err := alice.Balance(ctx, &wire.BalanceRequest{User: "alice"}); err != nil {
			failed++
			continue
		}
		if !done { // only what she saw while the flood was being served
			latencies = append(latencies, time.Since(t0))
		}
	}
	slices.Sort(latencies)
	r := floodResult{legit: asked, failed: failed, floodOK: answered.Load() - busy.Load(), busy: busy.Load(), floodTook: floodTook}
	if n := len(latencies); n > 0 {
		r.p50, r.p99, r.worst = latencies[n/2], latencies[min(n-1, n*99/100)], latencies[n-1]
	}
	return r
}
