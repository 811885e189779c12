package virt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// testDriver connects to libvirt's built-in test driver (no daemon needed,
// but libvirt.so.0 must be installed). Its state lives in the connection.
func testDriver(t *testing.T) *Enforcer {
	t.Helper()
	e, err := New(Config{URI: "test:///default", Disk: wire.ModeWeights, LinkKiBps: 10_000})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("libvirt is required in CI: %v", err)
		}
		t.Skipf("libvirt not available (apt-get install libvirt0): %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestMappings(t *testing.T) {
	cases := []struct {
		q      float64
		shares uint64
		blkio  uint
	}{
		{0, 2, 100}, {0.0002, 2, 100}, {1.0 / 3, 3333, 333}, {2.0 / 3, 6667, 667}, {0.5, 5000, 500}, {1, 10000, 1000}, {1.5, 10000, 1000},
	}
	for _, c := range cases {
		if got := CPUShares(c.q); got != c.shares {
			t.Errorf("CPUShares(%v) = %d, want %d", c.q, got, c.shares)
		}
		if got := BlkioWeight(c.q); got != c.blkio {
			t.Errorf("BlkioWeight(%v) = %d, want %d", c.q, got, c.blkio)
		}
	}
	// The worst distortion of the CPU mapping over a fine sweep.
	worst := 0.0
	for q := 0.0002; q <= 1; q += 0.00001 {
		worst = max(worst, math.Abs(float64(CPUShares(q))/MaxCPUShares-q))
	}
	if worst > 0.00005+1e-12 {
		t.Fatalf("cpu_shares distort a share by up to %v", worst)
	}
	if VcpuQuota(0.25, 2, 1) != 50_000 || VcpuQuota(0.25, 2, 2) != 25_000 || VcpuQuota(0.00001, 1, 1) != minVcpuQuota {
		t.Fatalf("vcpu quotas: %d %d %d", VcpuQuota(0.25, 2, 1), VcpuQuota(0.25, 2, 2), VcpuQuota(0.00001, 1, 1))
	}
}

// TestDiscoveryDiskAndNetOnTheTestDriver: what the test driver supports —
// domain metadata and blkio weights (network caps are tc's: tcnet_test.go).
func TestDiscoveryDiskAndNetOnTheTestDriver(t *testing.T) {
	e := testDriver(t)
	ctx := context.Background()
	vms, err := e.VMs(ctx)
	if err != nil || len(vms) != 0 {
		t.Fatalf("before metadata: %v %v (the test domain is not managed)", vms, err)
	}
	d := manageTestDomain(t, e)
	vms, err = e.VMs(ctx)
	if err != nil || len(vms) != 1 || vms[0].ID != "test" || vms[0].Owner != "alice" {
		t.Fatalf("discovered %+v %v", vms, err)
	}
	if err := ApplyDisk(d, 0.42); err != nil {
		t.Fatal(err)
	}
	bp, err := d.GetBlkioParameters(libvirt.DOMAIN_AFFECT_LIVE)
	if err != nil || bp.Weight != 420 {
		t.Fatalf("blkio weight %+v %v", bp, err)
	}
	// CPU scheduler parameters are not supported by the test driver: the
	// error surfaces (the QEMU end-to-end test covers CPU).
	if err := e.Apply(ctx, map[string]float64{"test": 0.5}); err == nil {
		t.Log("the test driver accepted cpu_shares")
	}
	if err := e.Apply(ctx, map[string]float64{"nope": 1}); err == nil {
		t.Fatal("applying a share to an unknown domain succeeded")
	}
	u, err := e.Usage(ctx)
	if err != nil || len(u) != 1 {
		t.Fatalf("usage %v %v", u, err)
	}
}

// TestIOUsageOnTheTestDriver: the enforcer reads a managed domain's disk
// and interface counters (the test driver's invent traffic as time
// passes), so the agent can tell a VM waiting on I/O from an idle one; the
// host's peak rates rise from what the domains moved together.
//
// A domain without a CPU share is not asked for its disks' counters (its
// QEMU, which answers them, may be getting no CPU): its use is unknown
// until it has one. Mutation: asking every domain lists it at once.
func TestIOUsageOnTheTestDriver(t *testing.T) {
	e := testDriver(t)
	ctx := context.Background()
	manageTestDomain(t, e)
	a, err := e.IOUsage(ctx)
	if err != nil || len(a) != 0 {
		t.Fatalf("I/O usage before the domain has a share: %v %v, want none read", a, err)
	}
	e.mu.Lock()
	e.applied["test"] = 0.5 // as Apply records it (the test driver takes no live weights)
	e.mu.Unlock()
	a, err = e.IOUsage(ctx)
	if err != nil || len(a) != 1 {
		t.Fatalf("I/O usage %v %v", a, err)
	}
	t.Logf("the test domain so far: %+v MB", a["test"])
	if a["test"].Disk < 0 || a["test"].Net < 0 {
		t.Fatalf("negative I/O %+v", a["test"])
	}
	// The peak is what moved between two readings, over their interval.
	var s ioSample
	t0 := time.Unix(0, 0)
	peak := s.next(map[string]agent.IOUse{"a": {Disk: 10, Net: 1}}, t0, agent.IOUse{})
	if peak != (agent.IOUse{}) {
		t.Fatalf("a first reading is no rate: %+v", peak)
	}
	peak = s.next(map[string]agent.IOUse{"a": {Disk: 110, Net: 3}, "b": {Disk: 500}}, t0.Add(2*time.Second), peak)
	if peak != (agent.IOUse{Disk: 50, Net: 1}) {
		t.Fatalf("peak %+v, want 50 MB/s disk (b is new), 1 MB/s net", peak)
	}
	peak = s.next(map[string]agent.IOUse{"a": {Disk: 120, Net: 3}, "b": {Disk: 520}}, t0.Add(4*time.Second), peak)
	if peak != (agent.IOUse{Disk: 50, Net: 1}) {
		t.Fatalf("a slower interval lowered the peak: %+v", peak)
	}
	if c := e.IOCapacity(); c.Net != 10_000.0/1024 {
		t.Fatalf("capacity %+v: the network's is the configured link, 10,000 KiB/s", c)
	}
}

// manageTestDomain gives the test driver's domain "test" mrmarket's
// metadata (owner alice), so the enforcer manages it.
func manageTestDomain(t *testing.T, e *Enforcer) *libvirt.Domain {
	t.Helper()
	d, err := e.conn.LookupDomainByName("test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free() })
	if err := d.SetMetadata(libvirt.DOMAIN_METADATA_ELEMENT, `<vm owner="alice"/>`, "mrm", Namespace, libvirt.DOMAIN_AFFECT_LIVE); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSchedulerReadsTheActiveOne: the active scheduler is the bracketed
// entry of queue/scheduler; only BFQ weighs; a missing device is an error.
func TestSchedulerReadsTheActiveOne(t *testing.T) {
	sysfs := t.TempDir()
	for name, line := range map[string]string{"sda": "[mq-deadline] kyber bfq none\n", "sdb": "mq-deadline kyber [bfq] none\n", "dm-0": "none\n"} {
		dir := filepath.Join(sysfs, "block", name, "queue")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "scheduler"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]string{"sda": "mq-deadline", "sdb": "bfq", "dm-0": "none"} {
		got, err := Scheduler(sysfs, name)
		if err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", name, got, err, want)
		}
		if (DiskDevice{Name: name, Scheduler: got}).Weighs() != (want == "bfq") {
			t.Errorf("%s under %s: Weighs wrong", name, got)
		}
	}
	if _, err := Scheduler(sysfs, "sdz"); err == nil {
		t.Error("a missing device has a scheduler")
	}
}

// TestDiskDevicesOnThisHost: the test driver's domain has no host-backed
// disk, so it lists none; a file on this host resolves to a block device
// whose scheduler can be read (where /sys has one).
func TestDiskDevicesOnThisHost(t *testing.T) {
	e := testDriver(t)
	manageTestDomain(t, e)
	devs, err := e.DiskDevices("")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the test driver's disks: %+v", devs)
	name, err := blockDevice("/sys", os.Args[0])
	if err != nil {
		t.Skipf("this host's filesystem is not on a block device in /sys (%v)", err)
	}
	s, err := Scheduler("/sys", name)
	t.Logf("the test binary lives on %s, scheduler %q (%v)", name, s, err)
}

// TestModesSayWhatIsDelivered: the enforcer reports each resource's mode
// as configured, "none" for what it does not govern; a throttle's
// Rebalance on a single managed domain sets no cap (nothing to share the
// device with; no link speed configured) and fails nothing.
func TestModesSayWhatIsDelivered(t *testing.T) {
	e := testDriver(t)
	e.cfg.LinkKiBps = 0 // with a link speed a lone domain is capped at it, on taps the test driver does not have
	manageTestDomain(t, e)
	e.SetModes(wire.ModeWeights, "bfq", wire.ModeThrottle, "taps")
	got := map[string]string{}
	for _, m := range e.Modes() {
		got[m.Resource] = m.Mode
	}
	want := map[string]string{wire.ResourceCPU: wire.ModeWeights, wire.ResourceDisk: wire.ModeWeights,
		wire.ResourceNetIn: wire.ModeThrottle, wire.ResourceNetOut: wire.ModeThrottle}
	for r, m := range want {
		if got[r] != m {
			t.Errorf("%s: mode %q, want %q (all %v)", r, got[r], m, got)
		}
	}
	ctx := context.Background()
	for range 3 {
		caps, err := e.Rebalance(ctx, map[string]float64{"test": 1})
		if err != nil || len(caps) != 0 {
			t.Fatalf("a lone domain's caps: %v %v", caps, err)
		}
	}
	e.SetModes("", "", "", "")
	for _, m := range e.Modes() {
		if m.Resource != wire.ResourceCPU && m.Mode != wire.ModeNone {
			t.Errorf("unset %s reports %q", m.Resource, m.Mode)
		}
	}
}

// TestABidChangesOneWeight: when one VM's bid changes, the others' shares
// all change by one factor, and the scale absorbs it: only the bidder's
// cpu_shares change, each weight stays within half a unit of q·S (the
// rounding bound at S ≥ 10000) and in range. When the host's bids move
// more than the scale's range allows, every weight is set anew, at the
// range's middle.
func TestABidChangesOneWeight(t *testing.T) {
	const n = 64
	bids := map[string]float64{}
	for i := range n {
		bids[fmt.Sprintf("vm%d", i)] = float64(1 + i%7)
	}
	shares := func() map[string]float64 {
		var total float64
		for _, b := range bids {
			total += b
		}
		out := map[string]float64{}
		for vm, b := range bids {
			out[vm] = b / total
		}
		return out
	}
	inForce, prev := map[string]uint64{}, map[string]float64{}
	scale := 0.0
	apply := func() (changed []string) {
		next := shares()
		scale = chooseScale(scale, prev, next, inForce)
		if scale < minScale || scale > maxScale {
			t.Fatalf("scale %v outside [%d, %d]", scale, minScale, maxScale)
		}
		for vm, q := range next {
			w := cpuWeight(q, scale)
			if w != inForce[vm] {
				changed = append(changed, vm)
			}
			if w < MinCPUShares || w > MaxCPUShares || math.Abs(float64(w)-q*scale) > 0.5+1e-6 {
				t.Fatalf("%s: weight %d for share %v at scale %v", vm, w, q, scale)
			}
			inForce[vm], prev[vm] = w, q
		}
		return changed
	}
	if got := apply(); len(got) != n {
		t.Fatalf("the first apply set %d weights, want all %d", len(got), n)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 1000 {
		vm := fmt.Sprintf("vm%d", rng.IntN(n))
		bids[vm] = float64(1 + rng.IntN(7))
		if got := apply(); len(got) > 1 || len(got) == 1 && got[0] != vm {
			t.Fatalf("bid %d on %s changed the weights of %v", i, vm, got)
		}
	}
	// One bid far above the rest: the scale that keeps the others' weights
	// would put its weight above MaxCPUShares, so all are set anew.
	bids["vm0"] = 1000
	before := scale
	if got := apply(); len(got) <= n/2 || scale == before {
		t.Fatalf("a rescale from %v to %v set only %d weights", before, scale, len(got))
	}
	// One VM alone: S = 10000, as q·10000.
	if s := chooseScale(0, nil, map[string]float64{"a": 1}, nil); s != minScale {
		t.Fatalf("a lone VM's scale is %v", s)
	}
}

// TestTheCacheFollowsEventsOnTheTestDriver: between listings the cache
// learns from libvirt's events that a managed domain started, that an
// existing one became managed (its metadata), and that one stopped.
func TestTheCacheFollowsEventsOnTheTestDriver(t *testing.T) {
	e := testDriver(t)
	if _, err := e.VMs(context.Background()); err != nil { // the full listing
		t.Fatal(err)
	}
	if !e.cache.watching {
		t.Fatal("no domain events on the test driver")
	}
	has := func(want map[string]bool) func() error {
		return func() error {
			doms, _, err := e.managed()
			if err != nil {
				return err
			}
			defer freeAll(doms)
			for name, in := range want {
				if _, ok := doms[name]; ok != in {
					return fmt.Errorf("%s managed: %v, want %v", name, ok, in)
				}
			}
			return nil
		}
	}
	d, err := e.conn.DomainCreateXML(fmt.Sprintf(`<domain type='test'><name>ev1</name><memory>1024</memory>
  <metadata><mrm:vm xmlns:mrm='%s' owner='bob'/></metadata><os><type>hvm</type></os></domain>`, Namespace), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free()
	testpoll.CheckFor(t, 10*time.Second, 10*time.Millisecond, has(map[string]bool{"ev1": true, "test": false}))
	manageTestDomain(t, e)
	testpoll.CheckFor(t, 10*time.Second, 10*time.Millisecond, has(map[string]bool{"ev1": true, "test": true}))
	if err := d.Destroy(); err != nil {
		t.Fatal(err)
	}
	testpoll.CheckFor(t, 10*time.Second, 10*time.Millisecond, has(map[string]bool{"ev1": false, "test": true}))
	if !e.cache.listed || e.cache.byName["test"] == nil {
		t.Fatal("the cache was emptied rather than kept")
	}
}

// TestPing: a live libvirt connection answers the agent's /readyz check.
func TestPing(t *testing.T) {
	if err := testDriver(t).Ping(); err != nil {
		t.Fatal(err)
	}
}

// TestADomainGoneBeforeApply: a domain the shares name that libvirt no
// longer has — destroyed after the listing they came from, or when its
// settings are written — is reported to the agent as gone
// (agent.GoneError), which drops it from that tick; other errors are not.
func TestADomainGoneBeforeApply(t *testing.T) {
	e := testDriver(t)
	if _, err := e.VMs(context.Background()); err != nil {
		t.Fatal(err)
	}
	err := e.Apply(context.Background(), map[string]float64{"gone1": 1})
	var gone *agent.GoneError
	if !errors.As(err, &gone) || gone.VM != "gone1" || !errors.Is(err, ErrUnknownDomain) {
		t.Fatalf("apply to a domain no longer listed: %v", err)
	}
	if err := goneOr("x", fmt.Errorf("virt: x cpu: %w", libvirt.Error{Code: libvirt.ERR_NO_DOMAIN})); !errors.As(err, &gone) || gone.VM != "x" {
		t.Fatalf("a write to a domain libvirt no longer has: %v", err)
	}
	if err := goneOr("x", libvirt.Error{Code: libvirt.ERR_INTERNAL_ERROR}); errors.As(err, &gone) {
		t.Fatalf("another libvirt error reported as gone: %v", err)
	}
}

// TestCPUWaitOnTheTestDriver: the vCPUs' wait is read per managed domain;
// a driver that reports none leaves the domain out rather than failing.
func TestCPUWaitOnTheTestDriver(t *testing.T) {
	e := testDriver(t)
	manageTestDomain(t, e)
	wait, err := e.CPUWait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := wait["test"]; ok && w < 0 || len(wait) > 1 {
		t.Fatalf("wait %v", wait)
	}
	t.Logf("wait %v", wait)
}

// TestSlowCallsAreLogged: a libvirt call that took SlowCall or more is
// logged with its domain, call and time; a quick one is not.
func TestSlowCallsAreLogged(t *testing.T) {
	var out strings.Builder
	e := &Enforcer{}
	e.SetLogger(slog.New(slog.NewTextHandler(&out, nil)))
	e.timed("vm1", "virDomainBlockStats vda", time.Now(), nil)
	if out.Len() > 0 {
		t.Fatalf("a quick call was logged: %s", out.String())
	}
	e.timed("vm1", "virDomainBlockStats vda", time.Now().Add(-2*SlowCall), nil)
	if got := out.String(); !strings.Contains(got, "slow libvirt call") || !strings.Contains(got, "vm=vm1") || !strings.Contains(got, "virDomainBlockStats vda") {
		t.Fatalf("logged %q", got)
	}
}

// TestAStarvedQEMUIsNotAsked: a domain with a share whose QEMU ran under
// minAnswerCPU over the last interval (a small share beside busy guests)
// is not asked for its disks' counters; once it runs, it is. Mutation:
// asking every domain with a share lists it while it starves.
func TestAStarvedQEMUIsNotAsked(t *testing.T) {
	e := testDriver(t)
	ctx := context.Background()
	manageTestDomain(t, e)
	t0 := time.Unix(0, 0)
	e.mu.Lock()
	e.applied["test"] = 0.5
	e.cpuSeen.next(map[string]time.Duration{"test": 0}, t0)
	e.cpuSeen.next(map[string]time.Duration{"test": time.Millisecond}, t0.Add(time.Second))
	e.mu.Unlock()
	if a, err := e.IOUsage(ctx); err != nil || len(a) != 0 {
		t.Fatalf("I/O usage of a domain whose QEMU ran 1 ms in a second: %v %v, want none read", a, err)
	}
	e.mu.Lock()
	e.cpuSeen.next(map[string]time.Duration{"test": 51 * time.Millisecond}, t0.Add(2*time.Second))
	e.mu.Unlock()
	if a, err := e.IOUsage(ctx); err != nil || len(a) != 1 {
		t.Fatalf("I/O usage of a domain whose QEMU ran 50 ms in a second: %v %v", a, err)
	}
}

// TestAnUnansweredCallDoesNotHoldTheTick: a call into a domain's QEMU
// that has not returned after askWait leaves the caller with
// errUnanswered; the domain is not asked again (nor read by IOUsage) until
// the call ends, and then it is. Mutation: waiting for the call holds the
// caller as long as the QEMU does.
func TestAnUnansweredCallDoesNotHoldTheTick(t *testing.T) {
	e := testDriver(t)
	d := manageTestDomain(t, e)
	e.mu.Lock()
	e.applied["test"] = 0.5
	e.mu.Unlock()
	release, ran := make(chan struct{}), make(chan struct{}, 2)
	start := time.Now()
	err := e.ask("test", d, "stuck", true, func(*libvirt.Domain) error { ran <- struct{}{}; <-release; return nil })
	if !errors.Is(err, errUnanswered) || time.Since(start) > 10*askWait {
		t.Fatalf("a stuck call: %v after %v", err, time.Since(start))
	}
	if err := e.ask("test", d, "second", true, func(*libvirt.Domain) error { ran <- struct{}{}; return nil }); !errors.Is(err, errUnanswered) || len(ran) != 1 {
		t.Fatalf("a second call while the first waits: %v, %d ran", err, len(ran))
	}
	if a, err := e.IOUsage(context.Background()); err != nil || len(a) != 0 {
		t.Fatalf("I/O usage while a call waits: %v %v, want the domain unread", a, err)
	}
	// A weight change takes the domain's job too: it is not made, nor
	// waited for, while the call is (the test driver refuses cpu_shares,
	// so an attempt shows as its error). Mutation: Apply calling libvirt
	// directly gets that error here, and on QEMU waits out the stuck call.
	start = time.Now()
	if err := e.Apply(context.Background(), map[string]float64{"test": 0.25}); err != nil || time.Since(start) > 10*askWait {
		t.Fatalf("a weight change while a call waits: %v after %v, want it left for later", err, time.Since(start))
	}
	close(release)
	testpoll.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if a, err := e.IOUsage(context.Background()); err != nil || len(a) != 1 {
			return fmt.Errorf("I/O usage after the call ended: %v %v", a, err)
		}
		return nil
	})
	if err := e.Apply(context.Background(), map[string]float64{"test": 0.25}); err == nil {
		t.Log("the test driver accepted cpu_shares: the weight change after the call ended is not seen")
	}
}

// TestStuckQEMUCallsAreBounded: while maxStuck calls wait past askWait on
// their domains' QEMUs, a call to another domain's QEMU is not made (that
// domain is unread, as one whose call still waits), and a weight change,
// which no QEMU answers, still is; once a stuck call ends, the other
// domain is asked again. Each call is made on its domain's own connection.
// Mutation: no bound — the call is made, and on libvirtd stuck calls
// beyond its shared workers hold every call of every connection.
func TestStuckQEMUCallsAreBounded(t *testing.T) {
	e := testDriver(t)
	d := manageTestDomain(t, e)
	release := make(chan struct{})
	for i := range maxStuck {
		if err := e.ask(fmt.Sprintf("stuck-%d", i), d, "stuck", true, func(*libvirt.Domain) error { <-release; return nil }); !errors.Is(err, errUnanswered) {
			t.Fatalf("stuck call %d: %v", i, err)
		}
	}
	var made atomic.Int32
	mark := func(*libvirt.Domain) error { made.Add(1); return nil }
	if err := e.ask("other", d, "virDomainBlockStats", true, mark); !errors.Is(err, errUnanswered) || made.Load() != 0 {
		t.Fatalf("a QEMU call while %d wait: %v, made %d times; want it not made", maxStuck, err, made.Load())
	}
	if err := e.ask("other", d, "cpu_shares", false, mark); err != nil || made.Load() != 1 {
		t.Fatalf("a weight change while %d QEMU calls wait: %v, made %d times; want it made", maxStuck, err, made.Load())
	}
	e.mu.Lock()
	conns := len(e.qemu)
	e.mu.Unlock()
	if conns != maxStuck {
		t.Errorf("%d QEMU connections for %d domains' calls, want one each", conns, maxStuck)
	}
	close(release)
	testpoll.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if err := e.ask("other", d, "virDomainBlockStats", true, mark); err != nil {
			return fmt.Errorf("a QEMU call after the stuck ones ended: %v", err)
		}
		return nil
	})
	e.closeQEMUConns(map[string]*libvirt.Domain{"other": d})
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, kept := e.qemu["other"]; len(e.qemu) != 1 || !kept {
		t.Errorf("QEMU connections after the others' domains went: %v, want other's alone", slices.Collect(maps.Keys(e.qemu)))
	}
}

// TestEachAtOnceAsksDomainsTogether: eachAtOnce has askTogether of its
// calls running at once, never more, and makes each once. Mutation: one
// after another — the calls never run together, and a tick waits askWait
// once per slow domain.
func TestEachAtOnceAsksDomainsTogether(t *testing.T) {
	vms := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
	var mu sync.Mutex
	active, most := 0, 0
	made := map[string]int{}
	together := make(chan struct{})
	eachAtOnce(vms, func(vm string) {
		mu.Lock()
		active++
		most = max(most, active)
		made[vm]++
		if active == askTogether && most == askTogether {
			select {
			case <-together:
			default:
				close(together)
			}
		}
		mu.Unlock()
		select { // the first askTogether wait for one another
		case <-together:
		case <-time.After(time.Second):
		}
		mu.Lock()
		active--
		mu.Unlock()
	})
	select {
	case <-together:
	default:
		t.Fatalf("the calls never ran %d at once (at most %d)", askTogether, most)
	}
	if most > askTogether {
		t.Errorf("%d calls ran at once, want at most %d", most, askTogether)
	}
	for _, vm := range vms {
		if made[vm] != 1 {
			t.Errorf("%s: made %d times, want once", vm, made[vm])
		}
	}
}

// TestKnownSpeedsAreDivided: a device whose speed the operator states
// (--disk-kibps, --link-kibps) is what its throttle divides and what the
// host reports as its capacity; one not stated is estimated. Mutation:
// the disk's stated speed ignored (as before --disk-kibps) gives a ceiling
// of 0, and the disk throttle estimates.
func TestKnownSpeedsAreDivided(t *testing.T) {
	e := &Enforcer{cfg: Config{LinkKiBps: 2048, DiskKiBps: 512 << 10}}
	for r, want := range map[string]float64{wire.ResourceDisk: 512, wire.ResourceNetIn: 2, wire.ResourceNetOut: 2} {
		if got := e.ceiling(r); got != want {
			t.Errorf("%s: ceiling %v MiB/s, want %v", r, got, want)
		}
	}
	if c := e.IOCapacity(); c.Disk != 512 || c.Net != 2 {
		t.Errorf("capacity %+v, want disk 512 and net 2 MiB/s", c)
	}
	e.cfg.DiskKiBps = 0
	if got := e.ceiling(wire.ResourceDisk); got != 0 {
		t.Errorf("an unstated disk speed: ceiling %v, want 0 (estimated)", got)
	}
}
