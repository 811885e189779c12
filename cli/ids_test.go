package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestMoneyMovingCommandsCarryIDs: a spend gets an id when none is given
// and shows it; repeating a spend or a spend --more with its id (what the
// CLI does on "unavailable") applies it once.
func TestMoneyMovingCommandsCarryIDs(t *testing.T) {
	m, _ := startMarket(t)
	n := "--nats=" + m.URL
	if r := mrmarket("bank", "grant", n, "--user", "alice", "--amount", "100"); r.code != 0 {
		t.Fatalf("grant: %+v", r)
	}
	r := mrmarket("spend", n, "--user", "alice", "--budget", "10", "--duration", "1h", "--vm", "a1")
	if r.code != 0 || !strings.Contains(r.stdout, "plan plan-") {
		t.Fatalf("spend without --id shows no id: %+v", r)
	}
	id := strings.TrimSuffix(strings.Fields(r.stdout)[1], ":")
	if r = mrmarket("cancel", n, "--user", "alice", "--plan", id); r.code != 0 {
		t.Fatalf("cancel: %+v", r)
	}
	for range 2 {
		r = mrmarket("spend", n, "--user", "alice", "--budget", "10", "--duration", "1h", "--vm", "a1", "--id", "p1", "--json")
		var sp wire.SpendReply
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &sp) != nil || sp.Plan.ID != "p1" {
			t.Fatalf("spend --id p1: %+v", r)
		}
	}
	for range 2 {
		r = mrmarket("spend", n, "--user", "alice", "--id", "p1", "--more", "5", "--adjust-id", "m1")
		if r.code != 0 || !strings.Contains(r.stdout, "now spends 15") || !strings.Contains(r.stdout, "adjustment m1") {
			t.Fatalf("spend --more with its id: %+v", r)
		}
	}
	r = mrmarket("balance", n, "--user", "alice", "--json")
	var bal wire.BalanceReply
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &bal) != nil || bal.Held.String() != "15" {
		t.Fatalf("alice holds %s after a repeated spend and --more, want 15: %+v", bal.Held, r)
	}
}
