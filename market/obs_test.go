package market_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

// servedMarket is testMarket serving its metrics, after alice, granted 50
// credits, spent 10 over a minute on a1 for one 10-second tick.
func servedMarket(t *testing.T) (*market.Market, *obs.Server, bank.Client) {
	t.Helper()
	ctx := context.Background()
	m, clock, bc, brc := testMarket(t)
	srv, err := obs.Serve("127.0.0.1:0", m.Registry, m.Health())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	srv.Ready(m.Ready()...)
	if _, err := bc.Grant(ctx, &wire.GrantRequest{ID: "g", User: "alice", Amount: 50_000_000}); err != nil {
		t.Fatal(err)
	}
	if _, err := brc.Spend(ctx, &wire.SpendRequest{User: "alice", Budget: 10_000_000, Duration: wire.Duration(time.Minute), VMs: []string{"a1"}, Strategy: wire.StrategyFair}); err != nil {
		t.Fatal(err)
	}
	*clock = clock.Add(10 * time.Second)
	if err := m.Tick(ctx, *clock); err != nil {
		t.Fatal(err)
	}
	return m, srv, bc
}

// TestMetricsAndHealth: the daemon endpoints report price, shares, captures
// and errors, and /healthz reflects the components.
func TestMetricsAndHealth(t *testing.T) {
	ctx := context.Background()
	m, srv, _ := servedMarket(t)
	nc, err := m.NC("metrics-test")
	if err != nil {
		t.Fatal(err)
	}
	_ = send(ctx, nc, &nats.Msg{Subject: wire.BankGrant, Data: []byte("garbage")}) // one refused request

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + srv.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/healthz")
	if code != 200 || strings.TrimSpace(body) != "ok" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	_, body = get("/metrics")
	for _, want := range []string{
		`mrm_host_price_credits_per_second{host="host-1"}`,
		`mrm_vm_share{host="host-1",vm="a1"}`,
		`mrm_captures_total{host="host-1"}`,
		`mrm_captured_credits_total{host="host-1"}`,
		`mrm_requests_total{code="bad_request",component="bank",op="grant"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
