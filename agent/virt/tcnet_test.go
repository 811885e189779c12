package virt

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fakeTC replaces tcExec: it records each command line and fails those
// fail says, with iproute2's message.
func fakeTC(t *testing.T, fail func(cmd string) string) *[]string {
	t.Helper()
	var cmds []string
	old := tcExec
	tcExec = func(name string, args ...string) ([]byte, error) {
		cmd := name + " " + strings.Join(args, " ")
		cmds = append(cmds, cmd)
		if msg := fail(cmd); msg != "" {
			return []byte(msg), errors.New("exit status 2")
		}
		return nil, nil
	}
	t.Cleanup(func() { tcExec = old })
	return &cmds
}

func TestIFBName(t *testing.T) {
	for tap, want := range map[string]string{"vnet0": "mivnet0", "mrmt12321": "mimrmt12321", "tap-0123456789": ""} {
		got := ifbName(tap)
		if len(got) > 15 || !strings.HasPrefix(got, "mi") {
			t.Errorf("ifbName(%q) = %q: not an interface name of ours", tap, got)
		}
		if want != "" && got != want {
			t.Errorf("ifbName(%q) = %q, want %q", tap, got, want)
		}
	}
	if a, b := ifbName("tap-0123456789a"), ifbName("tap-0123456789b"); a == b {
		t.Errorf("two long taps share the IFB %s", a)
	}
}

func TestHTBArgs(t *testing.T) {
	// 10 MiB/s: the rate 5 % over the cap (HTB charges GSO segments'
	// headers), the burst 100 ms of it.
	got := strings.Join(htbArgs("vnet0", 10*mib), " ")
	want := "class replace dev vnet0 parent 1: classid 1:1 htb rate 88080384bit ceil 88080384bit burst 1101004b cburst 1101004b quantum 60000"
	if got != want {
		t.Errorf("htbArgs = %s\nwant     %s", got, want)
	}
	// A small cap keeps a bucket of at least one GSO packet.
	if got := strings.Join(htbArgs("vnet0", 100<<10), " "); !strings.Contains(got, "burst 131072b") {
		t.Errorf("htbArgs at 100 KiB/s = %s, want a 128 KiB burst", got)
	}
}

// TestSetNetCapsCommands: the commands a cap sets up the first time (the
// class change fails on a tap without the enforcer's HTB), then each tick
// (one class change a direction, the redirect re-asserted), and what a cap
// of 0 removes — nothing to remove is no error.
func TestSetNetCapsCommands(t *testing.T) {
	sysNet = t.TempDir() // no interfaces: the IFB is created
	defer func() { sysNet = "/sys/class/net" }()
	rooted := map[string]bool{} // the devices with the enforcer's HTB
	cmds := fakeTC(t, func(cmd string) string {
		f := strings.Fields(cmd)
		switch {
		case strings.HasPrefix(cmd, "tc qdisc add") && f[len(f)-3] == "htb":
			rooted[f[4]] = true
		case strings.HasPrefix(cmd, "tc class replace") && !rooted[f[4]]:
			return "Error: Specified qdisc kind is unknown."
		case strings.HasPrefix(cmd, "tc qdisc del"):
			return "Error: Cannot delete qdisc with handle of zero."
		}
		return ""
	})
	// Two interfaces: the caps are split between them.
	if err := setNetCaps([]string{"vnet0", "vnet1"}, 20, 2); err != nil {
		t.Fatal(err)
	}
	in0, out0 := strings.Join(htbArgs("vnet0", 10*mib), " "), strings.Join(htbArgs("mivnet0", mib), " ")
	want := []string{
		"tc " + in0,
		"tc qdisc del dev vnet0 root",
		"tc qdisc add dev vnet0 root handle 1: htb default 1",
		"tc " + in0,
	}
	if !reflect.DeepEqual((*cmds)[:4], want) {
		t.Errorf("inbound set-up:\n%s\nwant\n%s", strings.Join((*cmds)[:4], "\n"), strings.Join(want, "\n"))
	}
	joined := strings.Join(*cmds, "\n")
	for _, c := range []string{
		"ip link add mivnet0 txqueuelen 1000 type ifb",
		"ip link set mivnet0 alias " + ifbAliasPrefix + "vnet0",
		"ip link set mivnet0 up",
		"tc qdisc add dev mivnet0 root handle 1: htb default 1",
		"tc " + out0,
		"tc qdisc replace dev vnet0 handle ffff: ingress",
		"tc filter replace dev vnet0 parent ffff: protocol all prio 1 handle 800::800 u32 match u32 0 0 action mirred egress redirect dev mivnet0",
		"tc qdisc replace dev vnet1 handle ffff: ingress",
	} {
		if !strings.Contains(joined, c+"\n") {
			t.Errorf("no %q in\n%s", c, joined)
		}
	}

	// The next tick: the classes are there.
	*cmds = nil
	if err := setNetCaps([]string{"vnet0"}, 5, 3); err != nil {
		t.Fatal(err)
	}
	for _, c := range *cmds {
		if strings.Contains(c, " del ") || strings.Contains(c, " add ") && strings.HasPrefix(c, "tc") {
			t.Errorf("a steady tick re-created the shaping: %s", c)
		}
	}
	if (*cmds)[0] != "tc "+strings.Join(htbArgs("vnet0", 5*mib), " ") {
		t.Errorf("the tick began with %s", (*cmds)[0])
	}

	// No caps: the root and the redirect are removed; the IFB stays until
	// the VM goes.
	*cmds = nil
	if err := setNetCaps([]string{"vnet0"}, 0, 0); err != nil {
		t.Fatal(err)
	}
	if want := []string{"tc qdisc del dev vnet0 root", "tc qdisc del dev vnet0 ingress"}; !reflect.DeepEqual(*cmds, want) {
		t.Errorf("removing: %q, want %q", *cmds, want)
	}
	// The VM gone: the IFB too; a real failure surfaces.
	*cmds = nil
	fakeTC(t, func(cmd string) string {
		if strings.HasPrefix(cmd, "ip link del") {
			return "RTNETLINK answers: Operation not permitted"
		}
		return `Cannot find device "vnet0"`
	})
	if err := unshapeTap("vnet0"); err == nil || !strings.Contains(err.Error(), "not permitted") {
		t.Errorf("unshapeTap: %v, want the ip link del failure", err)
	}
}

// TestStaleIFBs: an IFB of ours whose tap is gone is stale; one whose tap
// is there, or not ours, is left.
func TestStaleIFBs(t *testing.T) {
	dir := t.TempDir()
	sysNet = dir
	defer func() { sysNet = "/sys/class/net" }()
	mk := func(name, alias string) {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "ifalias"), []byte(alias+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk("vnet1", "")
	mk("mivnet1", ifbAliasPrefix+"vnet1")
	mk("mivnet2", ifbAliasPrefix+"vnet2")
	mk("mine", "someone else's")
	if got := staleIFBs(); !reflect.DeepEqual(got, []string{"mivnet2"}) {
		t.Errorf("stale IFBs %v, want [mivnet2]", got)
	}
}

// TestHeldCountsByVM: the held counts are read from the enforcer's HTB
// roots only (not an ingress qdisc's, not another device's qdisc), and
// summed per VM and direction: into the guest on its tap, out of it on the
// tap's IFB; a direction whose device is not shaped has no count, so the VM
// is never taken as pressed there. Mutation: counting every qdisc's
// overlimits takes vnet0's ingress qdisc (9) into alice's inbound count.
func TestHeldCountsByVM(t *testing.T) {
	old := tcExec
	tcExec = func(name string, args ...string) ([]byte, error) {
		return []byte(`[{"kind":"noqueue","handle":"0:","dev":"lo","root":true,"refcnt":2,"options":{},"bytes":0,"packets":0,"drops":0,"overlimits":0,"requeues":0,"backlog":0,"qlen":0},
{"kind":"htb","handle":"1:","dev":"vnet0","root":true,"drops":2,"overlimits":5},
{"kind":"ingress","handle":"ffff:","dev":"vnet0","parent":"ffff:fff1","drops":9,"overlimits":9},
{"kind":"htb","handle":"1:","dev":"mivnet0","root":true,"drops":0,"overlimits":7},
{"kind":"htb","handle":"1:","dev":"vnet1","root":true,"drops":1,"overlimits":1},
{"kind":"pfifo_fast","handle":"0:","dev":"eth0","root":true,"drops":4,"overlimits":4}]`), nil
	}
	t.Cleanup(func() { tcExec = old })
	devs, err := heldCounts()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"vnet0": 7, "mivnet0": 7, "vnet1": 2}
	if !reflect.DeepEqual(devs, want) {
		t.Fatalf("heldCounts = %v, want %v", devs, want)
	}
	got := heldByVM(map[string]ioCounters{"alice": {nics: []string{"vnet0"}}, "bob": {nics: []string{"vnet1"}}, "carol": {}}, devs)
	wantVM := map[string]map[string]float64{
		"alice": {"net-in": 7, "net-out": 7},
		"bob":   {"net-in": 2}, // its IFB not shaped: no count out of it
	}
	if !reflect.DeepEqual(got, wantVM) {
		t.Errorf("heldByVM = %v, want %v", got, wantVM)
	}
}
