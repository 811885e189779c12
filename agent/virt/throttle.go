package virt

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Throttle mode (Config.Disk or Config.Net = wire.ModeThrottle): a disk
// that does not weigh its users, or a tap device (which has no queue shared
// with the other VMs'), divides itself as it likes; QEMU's and the kernel's
// per-VM limits hold (docs/PLATFORM.md has how closely). So each
// tick the enforcer reads what every domain moved (IOUsage), plans caps with
// an agent.Throttle per resource — the disk, the network into the VMs, the
// network out of them, each against its own measured capacity — and sets
// them: total_bytes_sec on every disk of the domain (one QEMU throttle
// group per domain, so its disks share the cap), HTB on every tap into the
// guest and on the tap's IFB out of it (tcnet.go; split evenly among the
// taps). The caps move with the
// VMs' use, so an idle VM's part goes to the busy ones within a tick.

// throttleGroup is the QEMU throttle group of a domain's disks.
const throttleGroup = "mrm"

// Units of the caps: the planner works in MB/s (MiB), libvirt and tc in
// bytes/s.
const mib = 1 << 20

// ioCounters are one domain's I/O so far, in MB, and the devices it was
// read from.
type ioCounters struct {
	disk, netIn, netOut float64
	disks, nics         []string
	macs                []string // the guest's MACs on nics
	// diskUnread: the disks' counters were not read (see asksQEMU), so
	// disk is not what they moved.
	diskUnread bool
}

// use is the IOUse the agent's idle rule reads.
func (c ioCounters) use() agent.IOUse { return agent.IOUse{Disk: c.disk, Net: c.netIn + c.netOut} }

// throttles are the enforcer's per-resource planners and what it set.
type throttles struct {
	plans agent.ThrottleSet             // one planner per resource
	set   map[string]map[string]float64 // vm → resource → cap in force (MB/s; 0 none)
	// read is the counters IOUsage read last (the agent measures just
	// before it rebalances), so a tick reads the domains' stats once.
	read   map[string]ioCounters
	readAt time.Time
	// shares are the shares of the last Rebalance (asksQEMU).
	shares map[string]float64
	// taps are the interfaces each VM's network caps were set on (see
	// tcnet.go), so their shaping and IFBs go when the VM does.
	taps map[string][]string
	// swept says the IFBs a former run left were looked for.
	swept bool
	// link is the network divided in the kernel (sharesLink), set up at
	// the first Rebalance.
	link *sharedLink
}

// throttled lists the resources the configuration throttles; under mu.
func (e *Enforcer) throttled() []string {
	var rs []string
	if e.cfg.Disk == wire.ModeThrottle {
		rs = append(rs, wire.ResourceDisk)
	}
	if e.cfg.Net == wire.ModeThrottle && !e.sharesLink() {
		rs = append(rs, wire.ResourceNetIn, wire.ResourceNetOut)
	}
	return rs
}

// sharesLink says the network is divided in the kernel (tcshare.go): it
// is throttled and its speed is stated.
func (e *Enforcer) sharesLink() bool {
	return e.cfg.Net == wire.ModeThrottle && e.cfg.LinkKiBps > 0
}

// ceiling is resource r's known speed (MiB/s), 0 where it is estimated.
func (e *Enforcer) ceiling(r string) float64 {
	kibps := e.cfg.LinkKiBps
	if r == wire.ResourceDisk {
		kibps = e.cfg.DiskKiBps
	}
	return float64(kibps) / 1024
}

// Rebalance re-plans and sets the throttled resources' caps from what each
// managed domain moved since the last call (see the comment above), and
// returns the caps in force.
func (e *Enforcer) Rebalance(ctx context.Context, shares map[string]float64) (map[string]map[string]float64, error) {
	e.mu.Lock()
	rs := e.throttled()
	e.th.shares = maps.Clone(shares)
	shared := e.sharesLink()
	e.mu.Unlock()
	if len(rs) == 0 && !shared {
		return nil, nil
	}
	doms, _, err := e.managed()
	if err != nil {
		return nil, err
	}
	defer freeAll(doms)
	e.mu.Lock()
	th := &e.th
	now, counters, last := th.readAt, th.read, th.plans.Last()
	th.read = nil
	e.mu.Unlock()
	if counters == nil || !now.After(last) {
		counters = e.readIO(doms)
		now = time.Now()
	}
	var errs []error
	var held map[string]map[string]float64
	if slices.Contains(rs, wire.ResourceNetIn) {
		devs, err := heldCounts()
		if err != nil {
			errs = append(errs, fmt.Errorf("virt: reading the network shaping's counters: %w", err))
		}
		held = heldByVM(counters, devs)
	}
	e.mu.Lock()
	if th.plans.Plans == nil {
		th.plans.Plans, th.set, th.taps = map[string]*agent.Throttle{}, map[string]map[string]float64{}, map[string][]string{}
		for _, r := range rs {
			p := &agent.Throttle{Ceiling: e.ceiling(r)}
			th.plans.Plans[r] = p
		}
	}
	sofar := make(map[string]map[string]float64, len(counters))
	for vm, c := range counters {
		sofar[vm] = map[string]float64{wire.ResourceNetIn: c.netIn, wire.ResourceNetOut: c.netOut}
		if !c.diskUnread {
			sofar[vm][wire.ResourceDisk] = c.disk
		}
	}
	want := th.plans.Plan(shares, sofar, held, now)
	// What to set: the new caps, and 0 (no limit) where a cap was set
	// before but none is planned now.
	type change struct {
		vm   string
		caps map[string]float64
	}
	var todo []change
	for vm := range doms {
		next := map[string]float64{}
		for _, r := range rs {
			next[r] = want[vm][r]
		}
		prev, known := th.set[vm]
		if counters[vm].diskUnread {
			// Its disk cap cannot be set without asking its QEMU: the
			// one in force stays until the domain is asked again.
			if _, has := next[wire.ResourceDisk]; has {
				next[wire.ResourceDisk] = prev[wire.ResourceDisk]
				if !known {
					delete(next, wire.ResourceDisk)
				}
			}
		}
		if !known || differs(prev, next) {
			todo = append(todo, change{vm, next})
		}
	}
	e.mu.Unlock()

	var errMu sync.Mutex
	fail := func(err error) {
		errMu.Lock()
		errs = append(errs, err)
		errMu.Unlock()
	}
	eachAtOnce(todo, func(c change) {
		d := doms[c.vm]
		ok := true
		if v, has := c.caps[wire.ResourceDisk]; has && !counters[c.vm].diskUnread {
			switch err := e.setDiskCap(c.vm, d, counters[c.vm].disks, v); {
			case errors.Is(err, errUnanswered):
				ok = false // set when it answers, or again at a later tick
			case err != nil:
				fail(fmt.Errorf("virt: %s disk throttle: %w", c.vm, err))
				ok = false
			}
		}
		if _, has := c.caps[wire.ResourceNetIn]; has {
			nics := counters[c.vm].nics
			e.mu.Lock()
			e.th.taps[c.vm] = nics
			e.mu.Unlock()
			if err := setNetCaps(nics, c.caps[wire.ResourceNetIn], c.caps[wire.ResourceNetOut]); err != nil {
				fail(fmt.Errorf("virt: %s network throttle: %w", c.vm, err))
				ok = false
			}
		}
		if ok {
			e.mu.Lock()
			e.th.set[c.vm] = c.caps
			e.mu.Unlock()
		}
	})
	if err := e.forgetTaps(doms); err != nil {
		errs = append(errs, err)
	}
	var parts map[string]map[string]float64
	if shared {
		e.mu.Lock()
		if e.th.link == nil {
			e.th.link = &sharedLink{bps: linkMargin * e.ceiling(wire.ResourceNetIn) * mib}
		}
		link := e.th.link
		e.mu.Unlock()
		var err error
		if parts, err = link.apply(shares, counters); err != nil {
			errs = append(errs, err)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]map[string]float64{}
	for vm, p := range parts {
		if _, live := doms[vm]; live {
			out[vm] = p
		}
	}
	for vm, caps := range e.th.set {
		if _, live := doms[vm]; !live {
			delete(e.th.set, vm)
			continue
		}
		for r, v := range caps {
			if v > 0 {
				if out[vm] == nil {
					out[vm] = map[string]float64{}
				}
				out[vm][r] = v
			}
		}
	}
	return out, errors.Join(errs...)
}

// heldByVM sums each VM's held counts (heldCounts, by device) over its
// taps, each direction apart: into the guest on the tap, out of it on the
// tap's IFB. A direction with a tap not shaped (no cap, or not yet) has no
// count, so the VM is not taken as pressed in it.
func heldByVM(counters map[string]ioCounters, devs map[string]float64) map[string]map[string]float64 {
	if devs == nil {
		return nil
	}
	held := map[string]map[string]float64{}
	for vm, c := range counters {
		if len(c.nics) == 0 {
			continue
		}
		dirs := map[string]float64{}
		for r, dev := range map[string]func(string) string{
			wire.ResourceNetIn:  func(tap string) string { return tap },
			wire.ResourceNetOut: ifbName,
		} {
			sum, shaped := 0.0, true
			for _, tap := range c.nics {
				n, ok := devs[dev(tap)]
				sum, shaped = sum+n, shaped && ok
			}
			if shaped {
				dirs[r] = sum
			}
		}
		if len(dirs) > 0 {
			held[vm] = dirs
		}
	}
	return held
}

// forgetTaps removes the network shaping and IFBs of the VMs that are no
// longer among doms (all of them when doms is nil), and once per enforcer
// the IFBs whose tap is gone (a former run's).
func (e *Enforcer) forgetTaps(doms map[string]*libvirt.Domain) error {
	e.mu.Lock()
	var gone []string
	for vm, taps := range e.th.taps {
		if _, live := doms[vm]; !live {
			gone = append(gone, taps...)
			delete(e.th.taps, vm)
		}
	}
	sweep := !e.th.swept && e.cfg.Net == wire.ModeThrottle
	e.th.swept = e.th.swept || sweep
	e.mu.Unlock()
	var errs []error
	for _, tap := range gone {
		if err := unshapeTap(tap); err != nil {
			errs = append(errs, fmt.Errorf("virt: removing %s's shaping: %w", tap, err))
		}
	}
	if sweep {
		if err := removeStaleIFBs(); err != nil {
			errs = append(errs, fmt.Errorf("virt: removing stale IFBs: %w", err))
		}
	}
	return errors.Join(errs...)
}

// differs reports whether two cap sets differ by more than 10 % (or one is
// a limit and the other none). Setting a drive's throttle restarts QEMU's
// leaky bucket, which lets a request through at once: re-set every tick, a
// guest reading 1 MiB at a time beat its cap noticeably, so caps change
// only on a 10 % move.
func differs(a, b map[string]float64) bool {
	for r, x := range b {
		y := a[r]
		if (x == 0) != (y == 0) || math.Abs(x-y) > 0.1*max(x, y) {
			return true
		}
	}
	return false
}

// setDiskCap caps d's disks together at mbps MB/s (0: no limit), through
// ask: errUnanswered when the domain's QEMU has not answered in time.
func (e *Enforcer) setDiskCap(vm string, d *libvirt.Domain, disks []string, mbps float64) error {
	var errs []error
	for _, dev := range disks {
		p := &libvirt.DomainBlockIoTuneParameters{TotalBytesSecSet: true, TotalBytesSec: uint64(math.Round(mbps * mib))}
		if mbps > 0 {
			p.GroupNameSet, p.GroupName = true, throttleGroup
		}
		err := e.ask(vm, d, fmt.Sprintf("virDomainSetBlockIoTune %s %.2f MB/s", dev, mbps), true, func(d *libvirt.Domain) error {
			return d.SetBlockIoTune(dev, p, libvirt.DOMAIN_AFFECT_LIVE)
		})
		if errors.Is(err, errUnanswered) {
			return err // the domain's other disks wait for it too
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", dev, err))
		}
	}
	return errors.Join(errs...)
}

// Modes says how the enforcer delivers each resource's shares.
func (e *Enforcer) Modes() []wire.ResourceMode {
	e.mu.Lock()
	defer e.mu.Unlock()
	cpu := wire.ResourceMode{Resource: wire.ResourceCPU, Mode: wire.ModeWeights, Why: "cpu_shares"}
	if e.cfg.HardCap {
		cpu.Why = "cpu_shares and a vcpu_quota hard cap"
	}
	out := []wire.ResourceMode{cpu}
	for _, r := range []struct{ name, mode, why string }{
		{wire.ResourceDisk, e.cfg.Disk, e.cfg.DiskWhy},
		{wire.ResourceNetIn, e.cfg.Net, e.cfg.NetWhy},
		{wire.ResourceNetOut, e.cfg.Net, e.cfg.NetWhy},
	} {
		m := wire.ResourceMode{Resource: r.name, Mode: r.mode, Why: r.why}
		if m.Mode == "" {
			m.Mode = wire.ModeNone
		}
		if p := e.th.plans.Plans[r.name]; p != nil {
			m.Capacity = p.Capacity
		}
		out = append(out, m)
	}
	return out
}

// readIO reads every domain's I/O counters (domainIO), askTogether at a
// time (eachAtOnce), and closes the QEMU connections of domains gone.
func (e *Enforcer) readIO(doms map[string]*libvirt.Domain) map[string]ioCounters {
	ask := e.asksQEMU()
	out := make(map[string]ioCounters, len(doms))
	var mu sync.Mutex
	eachAtOnce(slices.Collect(maps.Keys(doms)), func(vm string) {
		c := e.domainIO(vm, doms[vm], ask(vm))
		mu.Lock()
		out[vm] = c
		mu.Unlock()
	})
	e.closeQEMUConns(doms)
	return out
}

// domainIO reads d's I/O counters: bytes read and written on its disks
// (virDomainBlockStats, unless askQEMU is false: see asksQEMU), received
// and sent on its interfaces (virDomainInterfaceStats; libvirt reports a
// tap's counters from the guest's side: rx is into the guest). A device
// whose statistics cannot be read counts nothing.
func (e *Enforcer) domainIO(vm string, d *libvirt.Domain, askQEMU bool) ioCounters {
	var c ioCounters
	devs, ok := e.devicesOf(vm, d)
	if !ok {
		return c
	}
	for _, dev := range devs.disks {
		c.disks = append(c.disks, dev)
		if !askQEMU {
			c.diskUnread = true
			continue
		}
		var st *libvirt.DomainBlockStats
		err := e.ask(vm, d, "virDomainBlockStats "+dev, true, func(d *libvirt.Domain) (err error) {
			st, err = d.BlockStats(dev)
			return err
		})
		if errors.Is(err, errUnanswered) {
			c.diskUnread, askQEMU = true, false // and its other disks wait too
			continue
		}
		if err == nil {
			if st.RdBytesSet {
				c.disk += float64(st.RdBytes) / mib
			}
			if st.WrBytesSet {
				c.disk += float64(st.WrBytes) / mib
			}
		}
	}
	c.macs = devs.macs
	for _, nic := range devs.taps {
		c.nics = append(c.nics, nic)
		if st, err := d.InterfaceStats(nic); err == nil {
			if st.RxBytesSet {
				c.netIn += float64(st.RxBytes) / mib
			}
			if st.TxBytesSet {
				c.netOut += float64(st.TxBytes) / mib
			}
		}
	}
	return c
}

// devices are a domain's disks and taps, as its XML named them when it
// had the ID id.
type devices struct {
	id          uint
	disks, taps []string
	macs        []string // the taps' guests' MACs, where the XML gives them
	read        time.Time
}

// devicesTTL is how long a domain's devices are taken from the last
// reading of its XML: disks and taps change with a restart (a new ID) or
// a hot-plug, seldom within a minute.
const devicesTTL = time.Minute

// devicesOf are vm's disks and taps. Its XML is read only for a domain
// not seen with its ID in devicesTTL: libvirt answers the XML of a domain
// whose job a slow call holds (a disk statistics call to a busy or
// starved QEMU, a weight change waiting behind one) only when the job is
// free, seconds later, and every tick read every domain's (make e2e: a
// bid change waited 4.4 s behind one).
func (e *Enforcer) devicesOf(vm string, d *libvirt.Domain) (devices, bool) {
	id, err := d.GetID()
	if err != nil {
		return devices{}, false
	}
	e.mu.Lock()
	known, ok := e.devs[vm]
	e.mu.Unlock()
	if ok && known.id == id && time.Since(known.read) < devicesTTL {
		return known, true
	}
	start := time.Now()
	desc, err := d.GetXMLDesc(0)
	e.timed(vm, "virDomainGetXMLDesc", start, err)
	if err != nil {
		return devices{}, false
	}
	var dx libvirtxml.Domain
	if dx.Unmarshal(desc) != nil || dx.Devices == nil {
		return devices{}, false
	}
	devs := devices{id: id, read: time.Now()}
	for _, disk := range dx.Devices.Disks {
		if disk.Target == nil || disk.Target.Dev == "" || disk.Device == "cdrom" || disk.Device == "floppy" {
			continue
		}
		devs.disks = append(devs.disks, disk.Target.Dev)
	}
	for _, nic := range dx.Devices.Interfaces {
		if nic.Target != nil && nic.Target.Dev != "" {
			devs.taps = append(devs.taps, nic.Target.Dev)
			if nic.MAC != nil && nic.MAC.Address != "" {
				devs.macs = append(devs.macs, nic.MAC.Address)
			}
		}
	}
	e.mu.Lock()
	if e.devs == nil {
		e.devs = map[string]devices{}
	}
	e.devs[vm] = devs
	e.mu.Unlock()
	return devs, true
}

// SetModes sets how disk and network shares are delivered (see Config),
// once the caller has looked at the host (DiskDevices) to choose.
func (e *Enforcer) SetModes(disk, diskWhy, net, netWhy string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cfg.Disk, e.cfg.DiskWhy, e.cfg.Net, e.cfg.NetWhy = disk, diskWhy, net, netWhy
}
