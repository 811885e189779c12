package systemd

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/mrmarket/mrmarket/agent"
)

// service reads a unit's [Service] settings: each key's values in order,
// space-separated lists split, an empty assignment resetting the list (as
// systemd reads list settings).
func service(unit string) map[string][]string {
	out := map[string][]string{}
	in := false
	for _, line := range strings.Split(unit, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			in = line == "[Service]"
		case in:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				continue
			}
			if v == "" {
				out[k] = []string{}
				continue
			}
			out[k] = append(out[k], strings.Fields(v)...)
		}
	}
	return out
}

// agentHardening are the agent unit's settings that stay whatever the
// agent needs: granting a capability is no reason to drop any of them.
var agentHardening = map[string]string{
	"User": "mrmarket", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
	"PrivateDevices": "yes", "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes", "ProtectKernelLogs": "yes",
	"ProtectControlGroups": "yes", "ProtectClock": "yes", "ProtectHostname": "yes", "RestrictNamespaces": "yes",
	"RestrictRealtime": "yes", "RestrictSUIDSGID": "yes", "LockPersonality": "yes", "MemoryDenyWriteExecute": "yes",
	"SystemCallArchitectures": "native", "UMask": "0077",
}

// agentUnitProblems lists where unit and the agent's privileges disagree:
// the capabilities (bounding and ambient), the address families and the
// writable paths must be exactly their union over every mode, and the
// hardening must stay.
func agentUnitProblems(unit string, privs []agent.Privilege) []string {
	var caps, families, writes []string
	for _, p := range privs {
		caps, families, writes = append(caps, p.Capabilities...), append(families, p.AddressFamilies...), append(writes, p.Writes...)
	}
	s := service(unit)
	var bad []string
	same := func(key string, want []string) {
		got := slices.Clone(s[key])
		slices.Sort(got)
		want = slices.Compact(slices.Sorted(slices.Values(want)))
		if !slices.Equal(slices.Compact(got), want) {
			bad = append(bad, fmt.Sprintf("%s=%s, the agent needs exactly %s", key, strings.Join(s[key], " "), strings.Join(want, " ")))
		}
	}
	same("CapabilityBoundingSet", caps)
	same("AmbientCapabilities", caps)
	same("RestrictAddressFamilies", families)
	same("ReadWritePaths", writes)
	for k, v := range agentHardening {
		if got := s[k]; len(got) != 1 || got[0] != v {
			bad = append(bad, fmt.Sprintf("%s=%s, want %s (hardening kept)", k, strings.Join(got, " "), v))
		}
	}
	return bad
}

// TestAgentUnitGrantsWhatTheAgentNeeds: mrmarket-agent.service grants
// exactly the capabilities, address families and writable paths the
// agent's modes need (agent.Privileges) — network shaping, --disk-scheduler
// — and keeps its hardening; a unit missing one, or granting one more,
// fails the same check.
func TestAgentUnitGrantsWhatTheAgentNeeds(t *testing.T) {
	body, err := os.ReadFile("mrmarket-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(body)
	for _, p := range agentUnitProblems(unit, agent.Privileges) {
		t.Error(p)
	}
	for _, p := range agent.Privileges {
		if p.Mode == "" || p.Why == "" {
			t.Errorf("a privilege without its mode or why: %+v", p)
		}
	}
	mutations := map[string][2]string{
		"no CAP_NET_ADMIN":   {"AmbientCapabilities=CAP_NET_ADMIN CAP_DAC_OVERRIDE", "AmbientCapabilities=CAP_DAC_OVERRIDE"},
		"no AF_NETLINK":      {"AF_UNIX AF_NETLINK", "AF_UNIX"},
		"one more":           {"CapabilityBoundingSet=CAP_NET_ADMIN CAP_DAC_OVERRIDE", "CapabilityBoundingSet=CAP_NET_ADMIN CAP_DAC_OVERRIDE CAP_SYS_ADMIN"},
		"/sys read-only":     {"ReadWritePaths=/sys/devices\n", ""},
		"tunables writable":  {"ProtectKernelTunables=yes", "ProtectKernelTunables=no"},
		"caps reset after":   {"UMask=0077", "UMask=0077\nAmbientCapabilities="},
		"runs as root":       {"User=mrmarket", "User=root"},
		"no more hardening":  {"NoNewPrivileges=yes\n", ""},
		"bounding set empty": {"CapabilityBoundingSet=CAP_NET_ADMIN CAP_DAC_OVERRIDE", "CapabilityBoundingSet="},
	}
	for name, m := range mutations {
		if !strings.Contains(unit, m[0]) {
			t.Fatalf("%s: the unit has no %q to change", name, m[0])
		}
		if len(agentUnitProblems(strings.Replace(unit, m[0], m[1], 1), agent.Privileges)) == 0 {
			t.Errorf("%s: the check passes a unit changed so", name)
		}
	}
}
