package market_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestMarketRunsOnTrustedAnswersOnly: in a market with identities every
// principal record is the admin's, states are sealed and capture results
// signed by the bank — so a normal run refuses nothing, captures, and
// writes the anchor for the daemons and the CLI.
func TestMarketRunsOnTrustedAnswersOnly(t *testing.T) {
	ctx := context.Background()
	m, clock, bc, brc := testMarket(t)
	if _, err := bc.Grant(ctx, &wire.GrantRequest{ID: "g", User: "alice", Amount: credits(t, "100")}); err != nil {
		t.Fatal(err)
	}
	if _, err := brc.Spend(ctx, &wire.SpendRequest{ID: "p", User: "alice", Budget: credits(t, "10"),
		Duration: wire.Duration(10 * time.Minute), VMs: []string{"a1", "a2"}, Strategy: wire.StrategyFair}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		*clock = clock.Add(time.Minute)
		if err := m.Tick(ctx, *clock); err != nil {
			t.Fatal(err)
		}
	}
	var captured int64
	for _, a := range checkLedger(t, bc).Accounts {
		if a.Kind == wire.AccountProvider {
			captured += int64(a.Balance)
		}
	}
	if captured == 0 {
		t.Fatal("nothing captured")
	}
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "mrm_errors_total" {
			continue
		}
		for _, x := range mf.GetMetric() {
			for _, l := range x.GetLabel() {
				if l.GetName() == "kind" && x.GetCounter().GetValue() > 0 {
					t.Errorf("errors counted: %s = %v", l.GetValue(), x.GetCounter().GetValue())
				}
			}
		}
	}
	pub, err := os.ReadFile(filepath.Join(string(m.Keys()), wire.AdminPubFile))
	if err != nil || strings.TrimSpace(string(pub)) != m.AdminKey() {
		t.Fatalf("admin.pub: %q %v", pub, err)
	}
	p, err := bc.Whois(ctx, mustKey(t, m.Keys(), wire.RoleAgent, "host-1"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := wire.OpenPrincipal(p.Cert, m.AdminKey(), p.Key); err != nil || got.Name != "host-1" || got.Role != wire.RoleAgent {
		t.Fatalf("the agent's record: %+v %v", got, err)
	}
}

func mustKey(t *testing.T, keys wire.CredsDir, role, name string) string {
	t.Helper()
	s, err := keys.Signer(role, name)
	if err != nil {
		t.Fatal(err)
	}
	return s.Public()
}
