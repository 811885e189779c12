// Package systemd holds mrmarket's systemd units; its test checks them with
// systemd-analyze (PID 1 need not be systemd).
package systemd

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// maxExposure is the highest `systemd-analyze security` exposure a unit may
// have ("OK" is below 5; "MEDIUM" 5–7). The agents read their host's key by
// group (and the libvirt one needs libvirt's socket), so they run as a fixed
// user; the others run as dynamic users. Templates (name@.service) are
// checked as an instance, name@test.service.
var maxExposure = map[string]float64{
	"mrmarket-nats@.service":      3.0,
	"mrmarket-bank.service":       3.0,
	"mrmarket-broker.service":     3.0,
	"mrmarket-agent.service":      3.5,
	"mrmarket-agent-sim@.service": 3.5,
}

// TestUnits runs systemd-analyze verify and security on every unit, with
// ExecStart pointed at a freshly built mrmarket (verify wants the binary to
// exist) — otherwise the units as shipped.
func TestUnits(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze is required in CI (apt-get install systemd)")
		}
		t.Skip("systemd-analyze not installed (apt-get install systemd)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "mrmarket")
	build := exec.Command("go", "build", "-tags", "libvirt_dlopen", "-o", bin, "../../cli/mrmarket")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building mrmarket: %v\n%s", err, out)
	}
	units, _ := filepath.Glob("*.service")
	if len(units) != len(maxExposure) {
		t.Fatalf("units: %v, want those of maxExposure", units)
	}
	score := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`)
	for _, u := range units {
		body, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		unit := filepath.Join(dir, u)
		if err := os.WriteFile(unit, []byte(strings.ReplaceAll(string(body), "/usr/local/bin/mrmarket", bin)), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, ok := maxExposure[u]; !ok {
			t.Fatalf("%s: no maximum exposure in maxExposure", u)
		}
		if strings.HasSuffix(u, "@.service") { // the instance, from the template next to it
			unit = filepath.Join(dir, strings.TrimSuffix(u, "@.service")+"@test.service")
		}
		if out, err := exec.Command(analyze, "verify", unit).CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", u, err, out)
		}
		sec, _ := exec.Command(analyze, "security", "--offline=yes", unit).CombinedOutput()
		m := score.FindSubmatch(sec)
		if m == nil {
			t.Fatalf("systemd-analyze security %s: no score in\n%s", u, sec)
		}
		exposure, _ := strconv.ParseFloat(string(m[1]), 64)
		t.Logf("%s: exposure %.1f", u, exposure)
		if exposure > maxExposure[u] {
			t.Errorf("%s: exposure %.1f above %.1f\n%s", u, exposure, maxExposure[u], sec)
		}
	}
}
