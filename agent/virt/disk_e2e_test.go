package virt_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/mrmarket/mrmarket/agent/virt"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// modes is the enforcer's modes and capacities, for the log.
func modes(enf *virt.Enforcer) string {
	s := ""
	for _, m := range enf.Modes() {
		s += fmt.Sprintf("%s %s %.1f MB/s; ", m.Resource, m.Mode, m.Capacity)
	}
	return s
}

// settle is how long the caps take to follow a guest that resumes: its
// idle probe filled, then its part (a few ticks).
const settle = 2 * time.Second

// sharedDiskMiBps is the shared disk's speed: under what the guests
// read from it together (over NBD, one 1 MiB read at a time; the test logs
// what a guest reads alone, docs/PLATFORM.md has a run).
const sharedDiskMiBps = 64

// diskShareTol is how far a guest's part of the disk throughput may be from
// its bid's part over a 10 s window.
const diskShareTol = 0.05

// TestDiskSharesOnRealGuests: real TCG guests reading their disks flat out
// with O_DIRECT, the disks all on one shared device of bounded speed that
// divides itself among its readers and ignores what they pay (sharedDisk),
// the enforcer in throttle mode re-planning the caps every tick as the
// agent does, and measuring the device's speed itself. Bids 3:1, then 1:2:5 with a third guest: each guest's part of what
// the guests read together is within 0.05 of its bid's part over 10 s
// windows — in the window ending 20 s after the guests start, later, and
// right after a pause/resume; a guest going idle leaves the disk to the
// other.
func TestDiskSharesOnRealGuests(t *testing.T) {
	conn := needQEMU(t)
	initrd := buildIOInitramfs(t)
	prefix := fmt.Sprintf("mrm-dsk-%d-", os.Getpid())
	disk := startSharedDisk(t, 1<<30, sharedDiskMiBps)
	doms := map[string]*libvirt.Domain{}
	for _, g := range []string{"d1", "d2", "d3"} {
		xml := fmt.Sprintf(`<disk type='network' device='disk'><driver name='qemu' type='raw' cache='none'/>`+
			`<source protocol='nbd' name='%s'><host name='127.0.0.1' port='%d'/></source>`+
			`<target dev='vda' bus='virtio'/><readonly/></disk>`, g, disk.port())
		doms[g] = startIOGuest(t, conn, prefix+g, "alice", initrd, "mrm_mode=disk", xml, false)
	}
	bootPausedWhenReading(t, doms)

	enf, err := virt.New(virt.Config{URI: qemuURI, Disk: wire.ModeThrottle, DiskWhy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer enf.Close()
	book := &bidBook{prefix: prefix}
	caps := runThrottles(t, enf, book.shares)
	pick := func(names ...string) map[string]*libvirt.Domain {
		m := map[string]*libvirt.Domain{}
		for _, n := range names {
			m[n] = doms[n]
		}
		return m
	}
	resume := func(names ...string) time.Time {
		for _, n := range names {
			if err := doms[n].Resume(); err != nil {
				t.Fatal(err)
			}
		}
		return time.Now()
	}
	// window measures the guests over 10 s and checks their parts.
	window := func(what string, running map[string]*libvirt.Domain, target map[string]float64) map[string]float64 {
		r := diskRates(t, running, 10*time.Second)
		checkParts(t, what, r, partsOf(target), diskShareTol)
		t.Logf("%s: caps now %v, capacity %s", what, caps(), modes(enf))
		return r
	}

	two := map[string]float64{"d1": 3, "d2": 1}
	book.set(two)
	start := resume("d1", "d2")
	first := diskRates(t, pick("d1", "d2"), 10*time.Second)
	t.Logf("3:1, the first 10 s (caps forming): parts %v", partsOf(first))
	window("3:1, 10–20 s after the start", pick("d1", "d2"), two)
	t.Logf("(window ended %s after the start)", time.Since(start).Round(time.Second))
	before := window("3:1, 20–30 s", pick("d1", "d2"), two)

	// d2 paused: d1 alone has no cap and takes the disk.
	if err := doms["d2"].Suspend(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * throttleTick)
	alone := diskRates(t, pick("d1"), 5*time.Second)["d1"]
	together := before["d1"] + before["d2"]
	t.Logf("d2 paused: d1 reads %.1f MiB/s alone, both read %.1f together", alone, together)
	if alone < 0.8*together {
		t.Errorf("d2 paused: d1 reads %.1f MiB/s, under 80 %% of the %.1f both read: d2's part is wasted", alone, together)
	}
	resume("d2")
	time.Sleep(settle)
	window("3:1, 2–12 s after d2's resume", pick("d1", "d2"), two)

	three := map[string]float64{"d1": 1, "d2": 2, "d3": 5}
	book.set(three)
	resume("d3")
	time.Sleep(10 * time.Second)
	window("1:2:5, 10–20 s after d3 started", doms, three)
	window("1:2:5, 20–30 s", doms, three)
	if err := doms["d3"].Suspend(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	window("1:2:5, d3 paused: d1 and d2 divide its part 1:2", pick("d1", "d2"), map[string]float64{"d1": 1, "d2": 2})
	resume("d3")
	time.Sleep(settle)
	window("1:2:5, 2–12 s after d3's resume", doms, three)
}
