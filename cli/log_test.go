package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/cli"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// A daemon logs in the level and format asked, before or after the
// command, its start line included (no untimed banner beside the log
// lines); a level or format nobody logs in is refused before anything
// starts.
func TestDaemonLogFlags(t *testing.T) {
	for _, args := range [][]string{{"--log-format", "yaml", "agent", "--sim"}, {"broker", "--log-level", "loud"}} {
		if r := mrmarket(args...); r.code != cli.ExitBadInput || !strings.Contains(r.stderr, "--log-level, --log-format") {
			t.Errorf("mrmarket %v: %+v, want exit 2 naming the log flags", args, r)
		}
	}
	data := t.TempDir()
	keys := signing.CredsDir(filepath.Join(data, "creds"))
	b, err := bank.Open(filepath.Join(data, "bank.db"), bank.Options{})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := keys.Ensure(wire.RoleAdmin, "admin")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AddPrincipal(context.Background(), &wire.PrincipalRequest{Key: admin.Public(), Name: "admin", Role: wire.RoleAdmin}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	listen := fmt.Sprintf("127.0.0.1:%d", natstest.FreePort(t))
	d := startDaemon(t, `"msg":"mrmarket nats serve: node`, "--log-format", "json", "nats", "serve", "--data", data, "--listen", listen, "--quiet")
	d.stop()
	lines := strings.Split(strings.TrimSpace(d.out.String()), "\n")
	for _, l := range lines {
		var line map[string]any
		if err := json.Unmarshal([]byte(l), &line); err != nil || line["time"] == nil || line["level"] == nil {
			t.Errorf("not a JSON log line: %q (%v)", l, err)
		}
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, `"msg":"mrmarket nats serve: stopping"`) {
		t.Errorf("last line %q, want the stop logged", last)
	}
}
