package market_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
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
	adminKey, err := m.Keys().Signer(wire.RoleAdmin, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (bank.Client{NC: admin, Keys: m.Keys()}).AddPrincipal(ctx, &wire.PrincipalRequest{Key: carol.Public(), Name: "carol", Role: wire.RoleUser,
		Cert: wire.SealPrincipal(adminKey, carol.Public(), "carol", wire.RoleUser)}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.NCAs(wire.RoleUser, "carol"); err != nil {
		t.Fatalf("carol, registered at run time: %v", err)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// TestMarketRunsWithTheBanksOwnKey: with the bank's own key registered
// (role bank), every component runs on its role's permissions alone: the
// bank serves and creates its assets, agents store their own states, the
// broker plans, and a spend moves money end to end.
func TestMarketRunsWithTheBanksOwnKey(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	keys := wire.CredsDir(dir + "/creds")
	b, err := bank.Open(dir+"/bank.db", bank.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bk, err := keys.Ensure(wire.RoleBank, "bank")
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.AddPrincipal(ctx, &wire.PrincipalRequest{Key: bk.Public(), Name: "bank", Role: wire.RoleBank})
	b.Close()
	if err != nil && strings.Contains(err.Error(), "CHECK constraint") {
		t.Skipf("the registry does not take role bank yet ([trust] B adds it): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	m, err := market.Start(ctx, market.Config{Dir: dir, NATSPort: -1, Now: func() time.Time { return clock }, TickPeriod: 5 * time.Second,
		Hosts: []market.HostSpec{{ID: "host-1", CPUs: 1, VMs: []agent.VM{{ID: "a1", Owner: "alice"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	conns, err := m.Server.Connz(&server.ConnzOptions{Username: true})
	if err != nil {
		t.Fatal(err)
	}
	var bankConn bool
	for _, c := range conns.Conns {
		bankConn = bankConn || c.AuthorizedUser == bk.Public()
	}
	if !bankConn {
		t.Fatal("the bank does not connect with its own key")
	}
	nc, err := m.NC("test")
	if err != nil {
		t.Fatal(err)
	}
	bc, brc := bank.Client{NC: nc, Keys: m.Keys()}, broker.Client{NC: nc, Keys: m.Keys()}
	if _, err := bc.Grant(ctx, &wire.GrantRequest{ID: "g", User: "alice", Amount: 10_000_000}); err != nil {
		t.Fatal(err)
	}
	if _, err := brc.Spend(ctx, &wire.SpendRequest{User: "alice", Budget: 6_000_000, Duration: wire.Duration(time.Hour), VMs: []string{"a1"}, Strategy: wire.StrategyFair}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		clock = clock.Add(30 * time.Minute)
		if err := m.Tick(ctx, clock); err != nil {
			t.Fatal(err)
		}
	}
	bal, err := bc.Balance(ctx, &wire.BalanceRequest{User: "alice"})
	if err != nil || bal.Spent == 0 {
		t.Fatalf("alice's spend was not charged with the bank on its own key: %+v %v", bal, err)
	}
}
