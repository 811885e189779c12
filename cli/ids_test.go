package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mrmarket/mrmarket/cli"
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

// TestIDsReusedWithOtherContent: every command that moves money refuses
// its id again with other content as a conflict (exit 3) and changes
// nothing; a spend's id again after its plan was cancelled says so.
func TestIDsReusedWithOtherContent(t *testing.T) {
	m, _ := startMarket(t)
	n := "--nats=" + m.URL
	grant(t, n, "100", "alice", "bob")
	ok := func(args ...string) {
		t.Helper()
		if r := mrmarket(args...); r.code != 0 {
			t.Fatalf("%v: %+v", args, r)
		}
	}
	spend := func(flags ...string) []string {
		return append([]string{"spend", n, "--user", "alice"}, flags...)
	}
	job := writeFile(t, `{"name": "etl", "vms": ["a1"], "maps": 4, "reduces": 0, "map_slots": 1, "profile": {"map_avg": 60, "map_max": 60}}`)
	other := writeFile(t, `{"name": "etl", "vms": ["a1"], "maps": 8, "reduces": 0, "map_slots": 1, "profile": {"map_avg": 60, "map_max": 60}}`)
	ok("bank", "grant", n, "--user", "alice", "--amount", "5", "--id", "g1")
	ok("transfer", n, "--user", "alice", "--to", "bob", "--amount", "1", "--id", "t1")
	ok(spend("--budget", "10", "--duration", "1h", "--vm", "a1", "--id", "p1")...)
	ok(spend("--id", "p1", "--more", "5", "--adjust-id", "A")...)
	ok(spend("--id", "p1", "--less", "1", "--adjust-id", "B")...)
	ok("submit", n, "--user", "alice", "--job", job, "--budget", "20", "--best-effort", "--id", "j1")
	conflict := func(args ...string) refusal { return refusal{args, cli.ExitRefused, "conflict"} }
	refuse(t, m, []refusal{
		conflict("bank", "grant", n, "--user", "alice", "--amount", "6", "--id", "g1"),
		conflict("transfer", n, "--user", "alice", "--to", "bob", "--amount", "2", "--id", "t1"),
		conflict(spend("--budget", "11", "--duration", "1h", "--vm", "a1", "--id", "p1")...),
		conflict(spend("--id", "p1", "--more", "7", "--adjust-id", "A")...),
		conflict(spend("--id", "p1", "--less", "5", "--adjust-id", "A")...),
		conflict(spend("--id", "p1", "--less", "2", "--adjust-id", "B")...),
		conflict("submit", n, "--user", "alice", "--job", job, "--budget", "25", "--best-effort", "--id", "j1"),
		conflict("submit", n, "--user", "alice", "--job", other, "--budget", "20", "--best-effort", "--id", "j1"),
	})
	// The same content again is a replay: exit 0, nothing changes.
	before := ledgerOf(t, m)
	ok("bank", "grant", n, "--user", "alice", "--amount", "5", "--id", "g1")
	ok(spend("--id", "p1", "--more", "5", "--adjust-id", "A")...)
	ok("submit", n, "--user", "alice", "--job", job, "--budget", "20", "--best-effort", "--id", "j1")
	if after := ledgerOf(t, m); after != before {
		t.Fatalf("a replay changed the ledger:\n%s\n→\n%s", before, after)
	}
	ok("cancel", n, "--user", "alice", "--plan", "p1")
	refuse(t, m, []refusal{{spend("--budget", "10", "--duration", "1h", "--vm", "a1", "--id", "p1"), cli.ExitRefused, "plan p1 is cancelled"}})
}
