package cli_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/cli"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestVersion: `mrmarket version` names the module version and the Go
// version, as a line or as JSON; --version says the same.
func TestVersion(t *testing.T) {
	r := mrmarket("version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "mrmarket ") || !strings.Contains(r.stdout, " go1.") {
		t.Fatalf("version: %+v", r)
	}
	r = mrmarket("version", "--json")
	var b cli.Build
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &b) != nil || b.Version == "" || !strings.HasPrefix(b.Go, "go1.") || b.Module == "" {
		t.Fatalf("version --json: %+v", r)
	}
	if r := mrmarket("--version"); r.code != 0 || !strings.Contains(r.stdout, b.Version) {
		t.Fatalf("--version: %+v", r)
	}
}

// TestShellCompletion: the scripts for bash, zsh and fish, and the
// answers they ask the binary for.
func TestShellCompletion(t *testing.T) {
	for shell, want := range map[string]string{
		"bash": "complete -o bashdefault -o default -o nospace -F _mrmarket_bash_autocomplete mrmarket",
		"zsh":  "compdef _mrmarket_zsh_autocomplete mrmarket",
		"fish": "complete -c mrmarket",
	} {
		if r := mrmarket("completion", shell); r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("completion %s: %+v", shell, r)
		}
	}
	if r := mrmarket("completion", "tcsh"); r.code != cli.ExitBadInput || !strings.Contains(r.stderr, "bash, zsh or fish") {
		t.Errorf("completion tcsh: %+v", r)
	}
	// urfave/cli completes from os.Args, as the shell runs the binary.
	complete := func(args ...string) run {
		saved := os.Args
		defer func() { os.Args = saved }()
		os.Args = append([]string{"mrmarket"}, args...)
		return mrmarket(args...)
	}
	if r := complete("--generate-bash-completion"); r.code != 0 || !strings.Contains(r.stdout, "spend\n") || !strings.Contains(r.stdout, "version\n") {
		t.Errorf("completing a command: %+v", r)
	}
	if r := complete("spend", "--bu", "--generate-bash-completion"); r.code != 0 || !strings.Contains(r.stdout, "--budget") {
		t.Errorf("completing a flag: %+v", r)
	}
	if r := complete("spend", "--strategy", "--generate-bash-completion"); r.code != 0 || r.stdout != strings.Join(wire.Strategies, "\n")+"\n" {
		t.Errorf("completing a strategy: %+v", r)
	}
	m, _ := startMarket(t)
	n := "--nats=" + m.URL
	grant(t, n, "100", "alice")
	if r := mrmarket("spend", n, "--user", "alice", "--budget", "1", "--duration", "1h", "--vm", "a1", "--id", "p-a"); r.code != 0 {
		t.Fatalf("spend: %+v", r)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"spend", n, "--user", "alice", "--vm"}, "a1\n"},
		{[]string{"vms", n, "--host"}, "host-1\n"},
		{[]string{"cancel", n, "--user", "alice", "--plan"}, "p-a\n"},
	} {
		if r := complete(append(c.args, "--generate-bash-completion")...); r.code != 0 || r.stdout != c.want {
			t.Errorf("completing %v: %+v, want %q", c.args, r, c.want)
		}
	}
}

// TestConfigFile: connection and identity from the config file, below the
// environment and the flags.
func TestConfigFile(t *testing.T) {
	m, _ := startMarket(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // no user's file in the way
	grant(t, "--nats="+m.URL, "7", "alice")
	grant(t, "--nats="+m.URL, "3", "bob")
	// The file names the credentials relative to itself.
	dir := t.TempDir()
	if err := os.Symlink(string(m.Keys()), filepath.Join(dir, "creds")); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "mrmarket.conf")
	if err := os.WriteFile(conf, []byte("# alice's market\nnats = "+m.URL+"\nuser = alice\ncreds = creds\ntls_ca = "+m.CAFile+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MRM_CREDS", "")
	t.Setenv("MRM_CONFIG", conf)
	balance := func(args ...string) wire.BalanceReply {
		t.Helper()
		r := mrmarket(append([]string{"balance", "--json"}, args...)...)
		var b wire.BalanceReply
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &b) != nil {
			t.Fatalf("balance %v: %+v", args, r)
		}
		return b
	}
	if b := balance(); b.User != "alice" || b.Balance.String() != "7" {
		t.Fatalf("balance from the config file: %+v", b)
	}
	t.Setenv("MRM_USER", "bob")
	if b := balance(); b.User != "bob" {
		t.Fatalf("MRM_USER below the file: %+v", b)
	}
	if b := balance("--user", "alice"); b.User != "alice" {
		t.Fatalf("--user below MRM_USER: %+v", b)
	}
	t.Setenv("MRM_USER", "")
	// A command without --user acts as the admin whatever the file says.
	if r := mrmarket("ledger"); r.code != 0 || !strings.Contains(r.stdout, "holds") {
		t.Fatalf("ledger with a user in the config file: %+v", r)
	}
	if r := mrmarket("balance", "--nats", "nats://127.0.0.1:1"); r.code != cli.ExitUnavailable {
		t.Fatalf("--nats above the file: %+v", r)
	}
	if r := mrmarket("--config", filepath.Join(dir, "none"), "balance"); r.code != cli.ExitBadInput || !strings.Contains(r.stderr, "config file") {
		t.Fatalf("a named config file that is not there: %+v", r)
	}
	if err := os.WriteFile(conf, []byte("nats = "+m.URL+"\nuser: alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := mrmarket("balance"); r.code != cli.ExitBadInput || !strings.Contains(r.stderr, conf+":2") {
		t.Fatalf("a config file with a mistake: %+v", r)
	}
}

// TestNoHeaders: every table drops its header line with --no-headers.
func TestNoHeaders(t *testing.T) {
	m, clock := startMarket(t)
	n := "--nats=" + m.URL
	grant(t, n, "100", "alice")
	if r := mrmarket("spend", n, "--user", "alice", "--budget", "12", "--duration", "1h", "--vm", "a1", "--id", "p1"); r.code != 0 {
		t.Fatalf("spend: %+v", r)
	}
	*clock = clock.Add(10 * time.Second)
	if err := m.Tick(context.Background(), *clock); err != nil {
		t.Fatal(err)
	}
	for header, args := range map[string][]string{
		"BALANCE":    {"balance", n, "--user", "alice"},
		"STRATEGY":   {"plans", n},
		"OWNER":      {"vms", n},
		"PRICE":      {"price", n},
		"ACCOUNT":    {"ledger", n},
		"JOB":        {"jobs", n},
		"EXPERIMENT": {"sim", "list"},
		"AT":         {"statement", n, "--user", "alice"},
		"RATE":       {"spend", n, "--user", "alice", "--budget", "1", "--duration", "1h", "--vm", "a1"},
	} {
		r := mrmarket(args...)
		if r.code != 0 || !strings.Contains(r.stdout, header) {
			t.Errorf("%v: %+v", args, r)
			continue
		}
		if r = mrmarket(append(args, "--no-headers")...); r.code != 0 || strings.Contains(r.stdout, header+" ") {
			t.Errorf("%v --no-headers: %+v", args, r)
		}
	}
}

// TestNoHeadersPrintsRowsOnly: --no-headers leaves out the lines around a
// table too — a preamble, a summary, a note — so that what is printed is
// the table's rows and nothing else.
func TestNoHeadersPrintsRowsOnly(t *testing.T) {
	m, _ := startMarket(t)
	n := "--nats=" + m.URL
	grant(t, n, "100", "alice")
	job := writeFile(t, `{"name": "etl", "vms": ["a1"], "maps": 4, "reduces": 0, "map_slots": 1, "profile": {"map_avg": 60, "map_max": 60}}`)
	for around, args := range map[string][]string{
		"alice: balance": {"statement", n, "--user", "alice"},
		"invariant":      {"ledger", n},
		"spends 1 over":  {"spend", n, "--user", "alice", "--budget", "1", "--duration", "1h", "--vm", "a1"},
		"income for":     {"bank", "income", "set", n, "--user", "alice", "--amount", "1", "--every", "24h"},
		"earliest":       {"quote", n, "--user", "alice", "--job", job},
		"runs by":        {"sim", "describe", "s003-stage"},
	} {
		r := mrmarket(args...)
		if r.code != 0 || !strings.Contains(r.stdout, around) {
			t.Errorf("%v: %+v", args, r)
			continue
		}
		r = mrmarket(append(args, "--no-headers")...)
		if r.code != 0 || strings.Contains(r.stdout, around) || strings.Contains(r.stdout, "\n\n") || strings.HasPrefix(r.stdout, "\n") {
			t.Errorf("%v --no-headers: %+v, want its rows without %q", args, r, around)
		}
	}
}

// TestPlansAndJobsShowTheBank: plans shows the bank's spent, released and
// held, durations rounded; a best-effort job's plan is not "deadline".
func TestPlansAndJobsShowTheBank(t *testing.T) {
	m, clock := startMarket(t)
	n := "--nats=" + m.URL
	grant(t, n, "100", "alice", "bob")
	r := mrmarket("spend", n, "--user", "bob", "--budget", "12", "--duration", "56m14.994691182s", "--vm", "b1", "--id", "p-bob")
	if r.code != 0 || !strings.Contains(r.stdout, "over 56m15s") {
		t.Fatalf("spend: %+v", r)
	}
	*clock = clock.Add(10 * time.Second)
	if err := m.Tick(context.Background(), *clock); err != nil {
		t.Fatal(err)
	}
	job := writeFile(t, `{"name": "etl", "vms": ["a1"], "maps": 4, "reduces": 0, "map_slots": 1, "profile": {"map_avg": 60, "map_max": 60}}`)
	if r := mrmarket("submit", n, "--user", "alice", "--job", job, "--budget", "20", "--best-effort", "--id", "j-be"); r.code != 0 {
		t.Fatalf("submit --best-effort: %+v", r)
	}
	*clock = clock.Add(10 * time.Second)
	if err := m.Tick(context.Background(), *clock); err != nil {
		t.Fatal(err)
	}
	r = mrmarket("plans", n, "--json")
	var ps wire.PlansReply
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &ps) != nil || len(ps.Plans) != 2 {
		t.Fatalf("plans --json: %+v", r)
	}
	if !strings.Contains(r.stdout, `"spent_micro"`) || !strings.Contains(r.stdout, `"held_micro"`) {
		t.Fatalf("plans --json is the wire reply: %s", r.stdout)
	}
	for _, p := range ps.Plans {
		if want := map[string]string{"p-bob": "fair", "j-be": wire.StrategyBestEffort}[p.ID]; p.Strategy != want {
			t.Errorf("plans --json: plan %s's strategy %q, want %q", p.ID, p.Strategy, want)
		}
	}
	r = mrmarket("plans", n, "--no-headers")
	if r.code != 0 {
		t.Fatalf("plans: %+v", r)
	}
	for _, p := range ps.Plans {
		var row []string
		for _, line := range strings.Split(r.stdout, "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == p.ID {
				row = f
			}
		}
		// PLAN USER STATUS STRATEGY BUDGET SPENT RELEASED HELD DURATION VMS ENDS
		if len(row) < 10 || row[5] != p.Spent.String() || row[6] != p.Released.String() || row[7] != p.Held.String() {
			t.Errorf("plan %s: row %q, want the bank's spent %s, released %s, held %s", p.ID, row, p.Spent, p.Released, p.Held)
			continue
		}
		want := map[string][2]string{"p-bob": {"fair", "56m15s"}, "j-be": {"best-effort", ""}}[p.ID]
		if row[3] != want[0] || want[1] != "" && row[8] != want[1] {
			t.Errorf("plan %s: row %q, want strategy %s, duration %s", p.ID, row, want[0], want[1])
		}
		if strings.Contains(row[8], ".") {
			t.Errorf("plan %s: duration %s not rounded", p.ID, row[8])
		}
	}
	r = mrmarket("jobs", n)
	if r.code != 0 || !strings.Contains(r.stdout, "HELD") || !strings.Contains(r.stdout, "j-be") {
		t.Fatalf("jobs: %+v", r)
	}
}

// TestSmallTraps: each is a clear error, exit 2, and changes nothing.
func TestSmallTraps(t *testing.T) {
	m, _ := startMarket(t)
	n := "--nats=" + m.URL
	grant(t, n, "10", "alice")
	spend := func(flags ...string) []string {
		return append([]string{"spend", n, "--user", "alice", "--budget", "1"}, flags...)
	}
	bad := func(msg string, args ...string) refusal { return refusal{args, cli.ExitBadInput, msg} }
	refuse(t, m, []refusal{
		bad("not a decimal", "bank", "grant", n, "--user", "alice", "--amount", " 5"),
		bad("not a decimal", "bank", "grant", n, "--user", "alice", "--amount", "+5"),
		bad("not a decimal", "transfer", n, "--user", "alice", "--to", "bob", "--amount", "+1"),
		bad("not a decimal", spend("--budget", "5 ", "--duration", "1h", "--vm", "a1")...),
		bad(`--duration "1y" is not a duration`, spend("--duration", "1y", "--vm", "a1")...),
		bad("empty name", spend("--duration", "1h", "--vm", "")...),
		bad("empty name", spend("--duration", "1h", "--vm", "a1,")...),
		bad("a1 is named twice", spend("--duration", "1h", "--vm", "a1", "--vm", "a1")...),
		bad(`--every "1d" is not a duration`, "bank", "income", "set", n, "--user", "alice", "--amount", "1", "--every", "1d"),
		bad("flag provided but not defined", "balance", n, "--user", "alice", "--frobnicate"),
	})
}

// TestPrincipalAddWritesNoKeyWhenRefused: the key file of a new principal
// is written only once the bank has registered it.
func TestPrincipalAddWritesNoKeyWhenRefused(t *testing.T) {
	m, _ := startMarket(t)
	keys := m.Keys()
	for _, c := range []struct {
		args []string
		code int
		name string
	}{
		{[]string{"--nats=" + m.URL, "--name", "eve", "--role", "king"}, cli.ExitBadInput, "eve"},
		{[]string{"--nats=nats://127.0.0.1:1", "--name", "dave"}, cli.ExitUnavailable, "dave"},
	} {
		r := mrmarket(append([]string{"bank", "principal", "add"}, c.args...)...)
		if r.code != c.code {
			t.Errorf("principal add %v: %+v, want exit %d", c.args, r, c.code)
		}
		if _, err := os.Stat(keys.Path(wire.RoleUser, c.name)); !os.IsNotExist(err) {
			t.Errorf("principal add %v, refused, wrote a key: %v", c.args, err)
		}
	}
	r := mrmarket("bank", "principal", "add", "--nats="+m.URL, "--name", "carol")
	if _, err := os.Stat(keys.Path(wire.RoleUser, "carol")); r.code != 0 || err != nil {
		t.Fatalf("principal add carol: %+v, key %v", r, err)
	}
	// Again: the same key, registered again.
	if r2 := mrmarket("bank", "principal", "add", "--nats="+m.URL, "--name", "carol"); r2.code != 0 || strings.Fields(r2.stdout)[4] != strings.Fields(r.stdout)[4] {
		t.Fatalf("principal add carol again: %+v, first %+v", r2, r)
	}
}

// TestCommandLineAsWritten: the connection flags are read before or after
// the command; a mistyped command is told the closest one; an argument a
// command would not read is refused — each a clear line, exit 2.
func TestCommandLineAsWritten(t *testing.T) {
	m, _ := startMarket(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	grant(t, "--nats="+m.URL, "7", "alice")
	conf := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(conf, []byte("nats = "+m.URL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"balance", "--nats", m.URL, "--user", "alice", "--tls-ca", m.CAFile},
		{"--nats", m.URL, "--user=alice", "--creds", string(m.Keys()), "balance"},
		{"--tls-ca=" + m.CAFile, "balance", "--config", conf, "--user", "alice"},
		{"--config", conf, "--user", "alice", "balance", "--json"},
	} {
		if r := mrmarket(args...); r.code != 0 || !strings.Contains(r.stdout, "7") {
			t.Errorf("%v: %+v", args, r)
		}
	}
	// A command's own --tls-ca stays its own.
	if r := mrmarket("nats", "assets", "--nats=nats://127.0.0.1:1", "--tls-ca", m.CAFile); r.code != cli.ExitUnavailable {
		t.Errorf("nats assets --tls-ca: %+v", r)
	}
	bad := func(msg string, args ...string) refusal { return refusal{args, cli.ExitBadInput, msg} }
	refuse(t, m, []refusal{
		bad("did you mean `mrmarket spend`?", "spned"),
		bad("did you mean `mrmarket balance`?", "balanse", "--user", "alice"),
		bad("did you mean `mrmarket bank grant`?", "bank", "grnat", "--user", "alice", "--amount", "1"),
		bad("did you mean `mrmarket jobs watch`?", "jobs", "wacth"),
		bad(`has no command "frobnicate" (see`, "frobnicate"),
		bad(`takes no arguments, only flags: "extra"`, "vms", "--nats="+m.URL, "extra"),
		bad(`"5 --budget 3" would not be read`, "bank", "grant", "--nats="+m.URL, "--user", "alice", "--amount", "1", "5", "--budget", "3"),
		bad("flag provided but not defined: -user (see `mrmarket ledger --help`)", "--user", "alice", "ledger", "--nats="+m.URL),
	})
}
