package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mrmarket/mrmarket/cli"
)

// TestSimCommands: sim list names the experiments; sim run prints the
// side-by-side table or JSON and writes it with --out; bad input is refused.
func TestSimCommands(t *testing.T) {
	r := mrmarket("sim", "list")
	for _, name := range []string{"s003-workflow", "s003-stage", "s003-bottleneck", "s003-sensitivity", "lin"} {
		if r.code != 0 || !strings.Contains(r.stdout, name) {
			t.Fatalf("sim list: %+v", r)
		}
	}
	// Its progress bar is for a terminal: stderr here is a buffer.
	r = mrmarket("sim", "run", "lin", "--runs", "1")
	if r.code != 0 || !strings.Contains(r.stdout, "PAPER") || !strings.Contains(r.stdout, "maxsrpt") || r.stderr != "" {
		t.Fatalf("sim run: %+v", r)
	}
	dir := t.TempDir()
	r = mrmarket("sim", "run", "s003-stage", "--runs", "1", "--seed", "2", "--json", "--out", dir)
	var res struct {
		Experiment string
		Rows       []struct{ Metric string }
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &res) != nil || res.Experiment != "s003-stage" || len(res.Rows) != 6 {
		t.Fatalf("sim run --json: %+v", r)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "s003-stage.json")); err != nil || !strings.Contains(string(b), "efficiency gain") {
		t.Fatalf("--out: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "s003-stage.svg")); err != nil || !strings.Contains(string(b), "<svg") {
		t.Fatalf("--out plot: %v", err)
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"sim", "run"}, "name one experiment"},
		{[]string{"sim", "run", "nope"}, "unknown experiment"},
		{[]string{"sim", "run", "lin", "--runs", "-1"}, "--runs"},
		{[]string{"sim", "run", "lin", "lin"}, "one experiment at a time"},
	} {
		if r := mrmarket(c.args...); r.code != cli.ExitBadInput || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("mrmarket %s: exit %d, stderr %q", strings.Join(c.args, " "), r.code, r.stderr)
		}
	}
}
