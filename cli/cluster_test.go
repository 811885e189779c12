package cli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mrmarket/mrmarket/cli"
)

// TestClusterCreateGuest provisions worker guests on libvirt's test driver:
// workers only, with their addresses, a small guest's size unless given;
// --bridge and --network together, or no input directory, are refused.
func TestClusterCreateGuest(t *testing.T) {
	if os.Getenv("CI") != "true" {
		if r := mrmarket("cluster", "list", "--host", "h1=test:///default"); r.code != 0 {
			t.Skipf("libvirt not available (apt-get install libvirt0): %s", r.stderr)
		}
	}
	dir := t.TempDir()
	guest, inputs := filepath.Join(dir, "guest"), filepath.Join(dir, "inputs")
	for _, d := range []string{guest, inputs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{filepath.Join(guest, "initrd.img"): "archive", filepath.Join(inputs, "g1-worker-0.img"): "in",
		filepath.Join(inputs, "g1-worker-1.img"): "in"}
	for f, body := range files {
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"cluster", "create", "--name", "g1", "--owner", "alice", "--workers", "2", "--guest", guest, "--input-dir", inputs,
		"--host", "host-1=test:///default", "--seed-dir", filepath.Join(dir, "seeds"), "--domain-type", "test", "--bridge", "br0", "--scratch-mib", "1"}
	r := mrmarket(args...)
	if r.code != 0 || !strings.Contains(r.stdout, "g1-worker-1  worker  host-1  10.83.0.11/16") || strings.Contains(r.stdout, "master") {
		t.Fatalf("cluster create --guest: %+v", r)
	}
	r = mrmarket(append(args, "--json")...)
	var nodes []struct{ VM, Address string }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &nodes) != nil || len(nodes) != 2 || nodes[0].Address != "10.83.0.10/16" {
		t.Fatalf("cluster create --guest --json: %+v", r)
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{append(args[:len(args):len(args)], "--network", "default"), "not both"},
		{[]string{"cluster", "create", "--name", "g1", "--owner", "alice", "--guest", guest, "--host", "host-1=test:///default"}, "input directory"},
	} {
		if r := mrmarket(c.args...); r.code != cli.ExitBadInput || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("mrmarket %v: %+v, want exit 2 mentioning %q", c.args, r, c.msg)
		}
	}
}
