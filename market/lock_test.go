package market_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

// TestDataDirectoryIsLocked: a second market on a data directory in use
// fails at once, saying by whom; once the first is closed the directory is
// free again.
func TestDataDirectoryIsLocked(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	hosts, err := market.Layout(1, 1, []string{"alice"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := market.Config{Dir: dir, NATSPort: -1, Hosts: hosts}
	m, err := market.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = market.Start(ctx, cfg)
	if !errors.Is(err, market.ErrDirInUse) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("a second market on %s: %v, want in use by pid %d", dir, err, os.Getpid())
	}
	m.Close()
	m, err = market.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	m.Close()
}

// TestUsersWithoutVMsGetCredentials: `up --vms-per-host 0 --users alice`
// still gives alice her key and principal.
func TestUsersWithoutVMsGetCredentials(t *testing.T) {
	hosts, err := market.Layout(1, 0, []string{"alice"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := market.Start(context.Background(), market.Config{Dir: t.TempDir(), NATSPort: -1, Hosts: hosts, Users: []string{"alice"}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := os.Stat(m.Keys().Path(wire.RoleUser, "alice")); err != nil {
		t.Fatalf("alice's key: %v", err)
	}
	if p, err := m.Bank.Whois(context.Background(), mustPublic(t, m, "alice")); err != nil || p.Name != "alice" {
		t.Fatalf("alice's principal: %+v %v", p, err)
	}
}

func mustPublic(t *testing.T, m *market.Market, user string) string {
	t.Helper()
	s, err := m.Keys().Signer(wire.RoleUser, user)
	if err != nil {
		t.Fatal(err)
	}
	return s.Public()
}
