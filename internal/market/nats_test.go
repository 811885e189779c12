package market_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/market"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestMarketNATSIsSecured: the market's NATS takes only TLS connections of
// registered principals, each with its role's permissions, and a principal
// the bank adds at run time connects without a restart.
func TestMarketNATSIsSecured(t *testing.T) {
	ctx := context.Background()
	m, err := market.Start(ctx, market.Config{Dir: t.TempDir(), NATSPort: -1,
		Hosts: []market.HostSpec{{ID: "host-1", CPUs: 1, VMs: []agent.VM{{ID: "a1", Owner: "alice"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.CAFile == "" || !strings.HasPrefix(m.URL, "tls://") {
		t.Fatalf("the embedded server does not require TLS: %s (CA %q)", m.URL, m.CAFile)
	}
	if nc, err := nats.Connect(m.URL, nats.RootCAs(m.CAFile)); err == nil {
		nc.Close()
		t.Fatal("an anonymous connection was accepted")
	}
	alice, err := m.NCAs(wire.RoleUser, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (broker.Client{NC: alice, Keys: m.Keys()}).Price(ctx, &wire.PriceRequest{}); err != nil {
		t.Fatalf("alice asks the prices over her own connection: %v", err)
	}
	if _, err := alice.SubscribeSync(">"); err != nil {
		t.Fatal(err)
	}
	testpoll.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if err := alice.LastError(); err != nil && strings.Contains(err.Error(), "Permissions Violation") {
			return nil
		}
		_ = alice.Flush()
		return errString("alice subscribed to > unrefused")
	})

	// carol is added through the bank, over NATS, by the admin.
	carol, err := m.Keys().Ensure(wire.RoleUser, "carol")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := m.NC("admin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.NCAs(wire.RoleUser, "carol"); err == nil {
		t.Fatal("carol connected before she was registered")
	}
	if _, err := (bank.Client{NC: admin, Keys: m.Keys()}).AddPrincipal(ctx, &wire.PrincipalRequest{Key: carol.Public(), Name: "carol", Role: wire.RoleUser}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.NCAs(wire.RoleUser, "carol"); err != nil {
		t.Fatalf("carol, registered at run time: %v", err)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
