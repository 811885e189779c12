package virt_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"libvirt.org/go/libvirt"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/agent/virt"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

const (
	qemuURI     = "qemu:///system"
	imagesDir   = "/var/lib/libvirt/images"
	guestKernel = imagesDir + "/mrm-vmlinuz" // installed by .ci/libvirt.sh
)

// needQEMU fails in CI and skips elsewhere when real guests cannot run.
func needQEMU(t testing.TB) *libvirt.Connect {
	t.Helper()
	missing := func(why string, args ...any) {
		msg := fmt.Sprintf(why, args...) + " (run .ci/libvirt.sh: libvirtd, QEMU and the guest kernel)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if _, err := os.Stat(guestKernel); err != nil {
		missing("no guest kernel at %s", guestKernel)
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		missing("no gcc for the guest's init")
	}
	conn, err := libvirt.NewConnect(qemuURI)
	if err != nil {
		missing("libvirtd not reachable at %s: %v", qemuURI, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// initSource is the guests' init: burn CPU forever. The guest's CPU time is
// read from libvirt, so it needs to report nothing.
const initSource = `int main(void) { volatile unsigned long x = 0; for (;;) x++; }`

// buildInitramfs compiles init statically and packs it as a newc cpio
// archive, readable by libvirt's QEMU user.
func buildInitramfs(t testing.TB) string {
	t.Helper()
	return writeInitramfs(t, "mrm-e2e", map[string][]byte{"init": compileInit(t, initSource)})
}

// compileInit compiles a guest's init statically.
func compileInit(t testing.TB, source string) []byte {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "init.c")
	if err := os.WriteFile(src, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "init")
	if out, err := exec.Command("gcc", "-static", "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("building the guest init (needs libc6-dev): %v\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// writeInitramfs packs files (name to contents, all at the archive's root;
// "init" executable, the rest read-only) as a newc cpio archive under the
// images directory, readable by libvirt's QEMU user, removed at cleanup.
func writeInitramfs(t testing.TB, prefix string, files map[string][]byte) string {
	t.Helper()
	var cpio bytes.Buffer
	ino := 0
	entry := func(name string, mode uint32, body []byte) {
		ino++
		fmt.Fprintf(&cpio, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
			ino, mode, 0, 0, 1, 0, len(body), 0, 0, 0, 0, len(name)+1, 0)
		cpio.WriteString(name)
		cpio.WriteByte(0)
		for cpio.Len()%4 != 0 {
			cpio.WriteByte(0)
		}
		cpio.Write(body)
		for cpio.Len()%4 != 0 {
			cpio.WriteByte(0)
		}
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		mode := uint32(0o100644)
		if name == "init" {
			mode = 0o100755
		}
		entry(name, mode, files[name])
	}
	entry("TRAILER!!!", 0, nil)
	img := filepath.Join(imagesDir, fmt.Sprintf("%s-%d.img", prefix, os.Getpid()))
	if err := os.WriteFile(img, cpio.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(img) })
	return img
}

// startGuest boots a transient TCG guest pinned to host CPU 0, owned by owner.
func startGuest(t testing.TB, conn *libvirt.Connect, name, owner, initrd string, paused bool) *libvirt.Domain {
	t.Helper()
	return startGuestPlaced(t, conn, name, owner, initrd, paused,
		`<vcpu placement='static' cpuset='0'>1</vcpu><cputune><vcpupin vcpu='0' cpuset='0'/><emulatorpin cpuset='0'/></cputune>`)
}

// startGuestPlaced boots a transient TCG guest with one vCPU placed as
// placement (the domain's <vcpu> and <cputune> elements) says.
func startGuestPlaced(t testing.TB, conn *libvirt.Connect, name, owner, initrd string, paused bool, placement string) *libvirt.Domain {
	t.Helper()
	xml := fmt.Sprintf(`<domain type='qemu'>
  <name>%s</name>
  <memory unit='MiB'>160</memory>
  %s
  <metadata><mrm:vm xmlns:mrm='%s' owner='%s'/></metadata>
  <os><type arch='x86_64' machine='pc'>hvm</type><kernel>%s</kernel><initrd>%s</initrd><cmdline>console=ttyS0 quiet panic=-1</cmdline></os>
  <on_poweroff>destroy</on_poweroff><on_crash>destroy</on_crash>
  <devices><memballoon model='none'/></devices>
</domain>`, name, placement, virt.Namespace, owner, guestKernel, initrd)
	return createGuest(t, conn, name, xml, paused, nil)
}

// createGuest starts the transient domain xml (paused if asked) and
// destroys it when the test ends, then runs after (if any).
func createGuest(t testing.TB, conn *libvirt.Connect, name, xml string, paused bool, after func()) *libvirt.Domain {
	t.Helper()
	flags := libvirt.DOMAIN_NONE
	if paused {
		flags = libvirt.DOMAIN_START_PAUSED
	}
	d, err := conn.DomainCreateXML(xml, flags)
	if err != nil {
		t.Fatalf("starting guest %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = d.Destroy()
		_ = d.Free()
		if after != nil {
			after()
		}
	})
	return d
}

// cpuTimes reads the guests' CPU time.
func cpuTimes(t testing.TB, doms map[string]*libvirt.Domain) map[string]time.Duration {
	t.Helper()
	out := map[string]time.Duration{}
	for name, d := range doms {
		info, err := d.GetInfo()
		if err != nil {
			t.Fatal(err)
		}
		out[name] = time.Duration(info.CpuTime)
	}
	return out
}

// fractions measures each guest's share of the CPU the guests used over window.
func fractions(t testing.TB, doms map[string]*libvirt.Domain, window time.Duration) map[string]float64 {
	t.Helper()
	a := cpuTimes(t, doms)
	time.Sleep(window)
	b := cpuTimes(t, doms)
	var sum float64
	for n := range doms {
		sum += (b[n] - a[n]).Seconds()
	}
	out := map[string]float64{}
	for n := range doms {
		out[n] = (b[n] - a[n]).Seconds() / sum
	}
	return out
}

// e2e is the world of the end-to-end test: guests, NATS, the bank, the agent.
type e2e struct {
	t      *testing.T
	conn   *libvirt.Connect
	nc     *nats.Conn
	keys   signing.CredsDir
	bank   *bank.Bank
	state  string
	a      *agent.Agent
	enf    *virt.Enforcer
	stopA  func()
	prefix string
	// mandate is alice's signed spend the bids act for, hold the hold it funds.
	mandate *wire.SignedRequest
	hold    string
}

func (w *e2e) startAgent() {
	t := w.t
	enf, err := virt.New(virt.Config{URI: qemuURI})
	if err != nil {
		t.Fatal(err)
	}
	agentKey, err := w.keys.Signer(wire.RoleAgent, "host-1")
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{Host: "host-1", Enforcer: enf, Capturer: bank.Client{NC: w.nc, Signer: agentKey},
		Publisher: agent.NATSPublisher{NC: w.nc}, Identities: bank.Client{NC: w.nc}, StateFile: w.state, Capacity: 1})
	if err != nil {
		t.Fatal(err)
	}
	stopServe, err := agent.Serve(w.nc, a)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { agent.Run(ctx, a, 500*time.Millisecond); close(done) }()
	w.a, w.enf = a, enf
	w.stopA = func() { cancel(); <-done; stopServe(); enf.Close() }
}

// bid sets budgets (micro-credits per hour) on guests, signed by the broker.
func (w *e2e) bid(rates map[string]int64) time.Time {
	w.t.Helper()
	brokerKey, err := w.keys.Signer(wire.RoleBroker, "broker")
	if err != nil {
		w.t.Fatal(err)
	}
	req := &wire.BidRequest{}
	for g, r := range rates {
		req.Set = append(req.Set, wire.Bid{VM: w.prefix + g, Owner: "alice", Plan: "p", Hold: w.hold, Budget: money.Micro(r), Duration: wire.Duration(time.Hour)})
	}
	if len(req.Set) > 0 {
		req.Set[0].Mandate = w.mandate
	}
	if err := natstest.Bid(context.Background(), w.nc, "host-1", req, rpc.SignedBy(brokerKey)); err != nil {
		w.t.Fatalf("bids %v: %v", rates, err)
	}
	return time.Now()
}

// check asserts each guest's measured fraction is within ±0.03 of target.
func check(t *testing.T, what string, got map[string]float64, target map[string]float64) {
	t.Helper()
	var parts []string
	for g, want := range target {
		parts = append(parts, fmt.Sprintf("%s target %.3f got %.3f", g, want, got[g]))
		if math.Abs(got[g]-want) > 0.03 {
			t.Errorf("%s: %s: measured %.3f, target %.3f", what, g, got[g], want)
		}
	}
	t.Logf("%s: %s", what, strings.Join(parts, ", "))
}

// TestSharesOnRealGuests drives the real agent through NATS against real
// QEMU guests pinned to one host CPU: each guest's measured CPU fraction
// follows the bids within ±0.03, a bid change shows within 2 s, and an agent
// killed and restarted restores the shares at once without charging twice.
func TestSharesOnRealGuests(t *testing.T) {
	conn := needQEMU(t)
	initrd := buildInitramfs(t)
	w := &e2e{t: t, conn: conn, prefix: fmt.Sprintf("mrm-e2e-%d-", os.Getpid()), state: filepath.Join(t.TempDir(), "agent.json")}
	doms := map[string]*libvirt.Domain{}
	for _, g := range []string{"g1", "g2"} {
		doms[g] = startGuest(t, conn, w.prefix+g, "alice", initrd, false)
	}

	// NATS, the bank, identities.
	_, w.nc = natstest.Start(t)
	var err error
	if w.bank, err = bank.Open(filepath.Join(t.TempDir(), "bank.db"), bank.Options{}); err != nil {
		t.Fatal(err)
	}
	defer w.bank.Close()
	stopBank, err := bank.Serve(w.nc, w.bank)
	if err != nil {
		t.Fatal(err)
	}
	defer stopBank()
	w.keys = signing.CredsDir(filepath.Join(t.TempDir(), "creds"))
	ctx := context.Background()
	for _, p := range []struct{ role, name string }{{wire.RoleBroker, "broker"}, {wire.RoleAgent, "host-1"}} {
		k, err := w.keys.Ensure(p.role, p.name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.bank.AddPrincipal(ctx, &wire.PrincipalRequest{Key: k.Public(), Name: p.name, Role: p.role}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.bank.Grant(ctx, &wire.GrantRequest{ID: "g", User: "alice", Amount: 1_000_000_000}); err != nil {
		t.Fatal(err)
	}
	alice, err := w.keys.Ensure(wire.RoleUser, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.bank.AddPrincipal(ctx, &wire.PrincipalRequest{Key: alice.Public(), Name: "alice", Role: wire.RoleUser}); err != nil {
		t.Fatal(err)
	}
	w.hold = mandate.HoldIDFor("alice", "p")
	if w.mandate, err = mandate.Sign(alice, wire.BrokerSpend, &wire.SpendRequest{ID: "p", User: "alice", Budget: 1_000_000_000,
		Duration: wire.Duration(3 * time.Hour), VMs: []string{w.prefix + "g1", w.prefix + "g2", w.prefix + "g3"}, Strategy: wire.StrategyFair}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.bank.Hold(ctx, &wire.HoldRequest{ID: w.hold, User: "alice", Amount: 1_000_000_000, Expires: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}

	w.startAgent()
	defer func() { w.stopA() }()
	// Let the guests boot to their busy loop (TCG: a few seconds).
	_ = testpoll.Wait(60*time.Second, 0, func() error { // booted or not, the checks below tell
		f := fractions(t, doms, 500*time.Millisecond)
		if math.Abs(f["g1"]-0.5) < 0.1 {
			return nil
		}
		return fmt.Errorf("g1 has %.3f of the CPU", f["g1"])
	})
	time.Sleep(3 * time.Second)

	for _, ratio := range [][2]int64{{1, 1}, {2, 1}, {3, 1}} {
		w.bid(map[string]int64{"g1": ratio[0] * 3_600_000, "g2": ratio[1] * 3_600_000})
		target := map[string]float64{"g1": float64(ratio[0]) / float64(ratio[0]+ratio[1]), "g2": float64(ratio[1]) / float64(ratio[0]+ratio[1])}
		check(t, fmt.Sprintf("%d:%d, the first 2 s after the bid", ratio[0], ratio[1]), fractions(t, doms, 2*time.Second), target)
		check(t, fmt.Sprintf("%d:%d, the next 3 s", ratio[0], ratio[1]), fractions(t, doms, 3*time.Second), target)
	}

	// At 3:1 on one host CPU, g2 waits for it three quarters of the time and
	// g1 one quarter: the agent's reading of their wait says so. Mutation:
	// reading a vCPU's run time instead of its run-queue delay inverts it.
	before, err := w.enf.CPUWait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	after, err := w.enf.CPUWait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waited := func(g string) float64 { return (after[w.prefix+g] - before[w.prefix+g]).Seconds() / 2 }
	t.Logf("3:1, vCPU wait per second: g1 %.3f, g2 %.3f", waited("g1"), waited("g2"))
	if waited("g2") < 0.5 || waited("g1") > 0.4 {
		t.Errorf("3:1: g1 waited %.3f s/s and g2 %.3f s/s for the CPU, want about 0.25 and 0.75", waited("g1"), waited("g2"))
	}

	// A third guest: the agent discovers it at its next tick, although
	// without a bid its QEMU gets almost no CPU beside the busy two (the
	// agent's readings must not wait on it: procwait.go).
	doms["g3"] = startGuest(t, conn, w.prefix+"g3", "alice", initrd, false)
	testpoll.CheckFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		if hasVM(w.a.State(), w.prefix+"g3") {
			return nil
		}
		return errors.New("the agent did not discover the third guest")
	})
	time.Sleep(4 * time.Second) // its boot
	target := map[string]float64{"g1": 1.0 / 8, "g2": 2.0 / 8, "g3": 5.0 / 8}
	w.bid(map[string]int64{"g1": 1 * 3_600_000, "g2": 2 * 3_600_000, "g3": 5 * 3_600_000})
	check(t, "1:2:5, the first 2 s after the bid", fractions(t, doms, 2*time.Second), target)
	check(t, "1:2:5, the next 3 s", fractions(t, doms, 3*time.Second), target)

	// Kill the agent; the hypervisor's weights are reset behind its back.
	w.stopA()
	for _, d := range doms {
		if err := d.SetSchedulerParametersFlags(&libvirt.DomainSchedulerParameters{CpuSharesSet: true, CpuShares: 1024}, libvirt.DOMAIN_AFFECT_LIVE); err != nil {
			t.Fatal(err)
		}
	}
	check(t, "agent down, weights reset", fractions(t, doms, 2*time.Second), map[string]float64{"g1": 1.0 / 3, "g2": 1.0 / 3, "g3": 1.0 / 3})
	restarted := time.Now()
	w.startAgent() // New enforces the saved book before its first tick
	t.Logf("restarted agent enforcing after %s", time.Since(restarted))
	check(t, "1:2:5 right after the restart", fractions(t, doms, 2*time.Second), target)

	// Idle is relative to what a VM is entitled to: g1 saturating a 1/26
	// share (under 4% of the host) is busy; a paused guest, using nothing,
	// is idle.
	doms["g4"] = startGuest(t, conn, w.prefix+"g4", "alice", initrd, true)
	w.bid(map[string]int64{"g1": 1 * 3_600_000, "g2": 10 * 3_600_000, "g3": 15 * 3_600_000})
	testpoll.CheckFor(t, 15*time.Second, 100*time.Millisecond, func() error {
		idle := map[string]bool{}
		var got []string
		for _, v := range w.a.State().VMs {
			idle[strings.TrimPrefix(v.VM, w.prefix)] = v.Idle
			got = append(got, fmt.Sprintf("%s share %.3f util %.3f idle %v", strings.TrimPrefix(v.VM, w.prefix), v.Share, v.Util, v.Idle))
		}
		if _, ok := idle["g4"]; !ok || idle["g1"] || !idle["g4"] {
			return fmt.Errorf("want g1 busy and g4 idle: %s", strings.Join(got, "; "))
		}
		t.Logf("idle rule on real guests: %s", strings.Join(got, "; "))
		return nil
	})
	for i := 0; i < 4; i++ { // and it stays so over the next ticks
		time.Sleep(500 * time.Millisecond)
		for _, v := range w.a.State().VMs {
			if g := strings.TrimPrefix(v.VM, w.prefix); g == "g1" && v.Idle || g == "g4" && !v.Idle {
				t.Errorf("%s: idle %v (share %.3f, util %.3f)", g, v.Idle, v.Share, v.Util)
			}
		}
	}

	// No double capture: after a tick the bank holds exactly what the
	// agent's book says it charged, and never more than the bids allow.
	time.Sleep(1200 * time.Millisecond)
	w.stopA()
	w.stopA = func() {}
	var saved struct {
		Totals []struct {
			Total, Captured int64
		} `json:"totals"`
	}
	data, err := os.ReadFile(w.state)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &saved); err != nil {
		t.Fatal(err)
	}
	var charged int64
	for _, s := range saved.Totals {
		charged += s.Captured
	}
	l, err := w.bank.Ledger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var provider int64
	for _, a := range l.Accounts {
		if a.ID == bank.ProviderAccount("host-1") {
			provider = int64(a.Balance)
		}
	}
	if len(l.Violations) > 0 || provider != charged || provider <= 0 {
		t.Fatalf("bank: provider earned %d, the agent's book says %d (violations %v)", provider, charged, l.Violations)
	}
	t.Logf("bank: %d micro-credits captured, exactly the agent's book across the restart", provider)
}

func hasVM(st wire.HostState, vm string) bool {
	for _, v := range st.VMs {
		if v.VM == vm {
			return true
		}
	}
	return false
}

// TestHardCapOnARealGuest: in hard-cap mode a guest alone on its CPU uses
// no more than its share, although nothing else wants the CPU.
func TestHardCapOnARealGuest(t *testing.T) {
	conn := needQEMU(t)
	initrd := buildInitramfs(t)
	name := fmt.Sprintf("mrm-cap-%d", os.Getpid())
	d := startGuest(t, conn, name, "alice", initrd, false)
	enf, err := virt.New(virt.Config{URI: qemuURI, HardCap: true, HostCPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer enf.Close()
	ctx := context.Background()
	time.Sleep(4 * time.Second)                   // boot to the busy loop
	for _, q := range []float64{0.25, 0.6, 0.3} { // raising and lowering the cap
		if err := enf.Apply(ctx, map[string]float64{name: q}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		a := cpuTimes(t, map[string]*libvirt.Domain{name: d})[name]
		start := time.Now()
		time.Sleep(2 * time.Second)
		b := cpuTimes(t, map[string]*libvirt.Domain{name: d})[name]
		got := (b - a).Seconds() / time.Since(start).Seconds()
		t.Logf("hard cap %.2f of a CPU: measured %.3f", q, got)
		if math.Abs(got-q) > 0.03 {
			t.Errorf("hard cap %.2f: the guest used %.3f of a CPU", q, got)
		}
	}
	// An agent started without --hard-cap removes the cap the last one
	// left: alone on its CPU the guest uses it whole again.
	uncapped, err := virt.New(virt.Config{URI: qemuURI, HostCPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer uncapped.Close()
	if err := uncapped.Apply(ctx, map[string]float64{name: 0.3}); err != nil {
		t.Fatal(err)
	}
	params, err := d.GetSchedulerParametersFlags(libvirt.DOMAIN_AFFECT_LIVE)
	if err != nil {
		t.Fatal(err)
	}
	if params.VcpuQuota > 0 || params.GlobalQuota > 0 {
		t.Fatalf("caps left without --hard-cap: vcpu_quota %d, global_quota %d", params.VcpuQuota, params.GlobalQuota)
	}
	time.Sleep(500 * time.Millisecond)
	a := cpuTimes(t, map[string]*libvirt.Domain{name: d})[name]
	start := time.Now()
	time.Sleep(2 * time.Second)
	got := (cpuTimes(t, map[string]*libvirt.Domain{name: d})[name] - a).Seconds() / time.Since(start).Seconds()
	t.Logf("cap removed (share 0.30, alone): measured %.3f of a CPU", got)
	if got < 0.6 {
		t.Errorf("cap removed: the guest used only %.3f of a CPU", got)
	}
	vms, err := uncapped.VMs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, vm := range vms {
		if vm.ID == name && vm.CPUs != 1 {
			t.Errorf("%s may run on %v CPUs, want its 1 vCPU", name, vm.CPUs)
		}
	}
}

// TestEmulatorFollowsPinnedVCPUs: the enforcer's listing pins the emulator
// threads of a domain whose vCPUs are pinned to its vCPUs' CPUs, and
// leaves an unpinned domain's where they are. A domain's cpu_shares is
// divided over the CPUs by where its threads are runnable, so an emulator
// left floating spends the domain's weight where its vCPUs cannot run
// (the package doc, "Where a domain's threads run"). Mutation: without
// alignEmulator in VMs the pinned domain's emulator may still run on
// every CPU, and this fails; aligning unpinned domains too fails the
// second check.
func TestEmulatorFollowsPinnedVCPUs(t *testing.T) {
	conn := needQEMU(t)
	if runtime.NumCPU() < 2 {
		t.Skip("needs two host CPUs: on one, every thread runs where the vCPUs do")
	}
	initrd := buildInitramfs(t)
	prefix := fmt.Sprintf("mrm-emu-%d-", os.Getpid())
	last := runtime.NumCPU() - 1
	pinned := startGuestPlaced(t, conn, prefix+"pinned", "alice", initrd, false,
		fmt.Sprintf(`<vcpu placement='static'>1</vcpu><cputune><vcpupin vcpu='0' cpuset='%d'/></cputune>`, last))
	free := startGuestPlaced(t, conn, prefix+"free", "alice", initrd, false, `<vcpu placement='static'>1</vcpu>`)
	enf, err := virt.New(virt.Config{URI: qemuURI, HostCPUs: float64(runtime.NumCPU())})
	if err != nil {
		t.Fatal(err)
	}
	defer enf.Close()
	emulator := func(d *libvirt.Domain) []int {
		t.Helper()
		set, err := d.GetEmulatorPinInfo(libvirt.DOMAIN_AFFECT_LIVE)
		if err != nil {
			t.Fatal(err)
		}
		var cpus []int
		for cpu, ok := range set {
			if ok {
				cpus = append(cpus, cpu)
			}
		}
		return cpus
	}
	if got := emulator(pinned); len(got) != runtime.NumCPU() {
		t.Fatalf("before the listing the pinned domain's emulator may run on %v: the test needs it free", got)
	}
	vms, err := enf.VMs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, vm := range vms {
		if vm.ID == prefix+"pinned" && vm.CPUs != 1 {
			t.Errorf("the pinned domain may run on %v CPUs, want 1", vm.CPUs)
		}
	}
	if got := emulator(pinned); !slices.Equal(got, []int{last}) {
		t.Errorf("the pinned domain's emulator threads may run on CPUs %v after the listing, want [%d] (its vCPU's)", got, last)
	}
	if got := emulator(free); len(got) != runtime.NumCPU() {
		t.Errorf("the unpinned domain's emulator threads were moved to CPUs %v: its threads should balance over the host", got)
	}
}
