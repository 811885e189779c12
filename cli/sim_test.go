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
	r = mrmarket("sim", "run", "lin", "--runs", "1", "--set", "jobs=2000", "--set", "lengths=500")
	if r.code != 0 || !strings.Contains(r.stdout, "PAPER") || !strings.Contains(r.stdout, "maxsrpt") || r.stderr != "" {
		t.Fatalf("sim run: %+v", r)
	}
	dir := t.TempDir()
	r = mrmarket("sim", "run", "s003-stage", "--runs", "1", "--seed", "2", "--json", "--out", dir)
	var res struct {
		Experiment string
		Rows       []struct{ Metric string }
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &res) != nil || res.Experiment != "s003-stage" || len(res.Rows) != 27 {
		t.Fatalf("sim run --json: %+v", r)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "s003-stage.json")); err != nil || !strings.Contains(string(b), "efficiency gain") {
		t.Fatalf("--out: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "s003-stage.svg")); err != nil || !strings.Contains(string(b), "<svg") {
		t.Fatalf("--out plot: %v", err)
	}
	r = mrmarket("sim", "describe", "mrm-pricing")
	if r.code != 0 || !strings.Contains(r.stdout, "alpha") || !strings.Contains(r.stdout, "[2,1.5,1.1]") {
		t.Fatalf("sim describe: %+v", r)
	}
	for _, args := range [][]string{
		{"sim", "run", "mrm-pricing", "--runs", "1", "--set", "alpha=1.2,2", "--set", "jobs=100"},
		{"sim", "run", "--set", "alpha=1.2,2", "--set", "jobs=100", "--runs", "1", "mrm-pricing"},
	} {
		r = mrmarket(args...)
		if r.code != 0 || !strings.Contains(r.stdout, "α=1.2, H (50 s)") || strings.Contains(r.stdout, "α=1.5") ||
			!strings.Contains(r.stdout, "100 jobs per configuration") || !strings.Contains(r.stdout, "set: alpha=1.2,2 jobs=100") {
			t.Fatalf("%s: %+v", strings.Join(args, " "), r)
		}
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"sim", "run", "mrm-pricing", "--set", "alfa=1"}, `no parameter "alfa"`},
		{[]string{"sim", "run", "mrm-pricing", "--set", "alpha"}, "not name=value"},
		{[]string{"sim", "run", "mrm-pricing", "--set", "jobs=many"}, "jobs=many"},
		{[]string{"sim", "describe"}, "name one experiment"},
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
