package virt

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Namespace is the XML namespace of mrmarket's domain metadata.
const Namespace = "https://mrmarket.dev/xmlns/vm/1"

// Limits of the mappings (see the package doc).
const (
	MinCPUShares   = 2
	MaxCPUShares   = 10000
	MinBlkioWeight = 100
	MaxBlkioWeight = 1000
	vcpuPeriod     = 100_000 // µs
	minVcpuQuota   = 1_000   // µs
)

// Errors of the enforcer.
var (
	ErrUnknownDomain = errors.New("virt: no such managed domain")
)

// Config configures an Enforcer.
type Config struct {
	// URI is the libvirt connection URI, e.g. qemu:///system.
	URI string
	// HostCPUs is the host's CPUs, for the hard cap; default 1.
	HostCPUs float64
	// HardCap adds vcpu_quota caps to the cpu_shares weights.
	HardCap bool
	// Disk is how disk shares are delivered: wire.ModeThrottle (per-VM
	// caps of the measured bandwidth, re-spread each tick), ModeWeights
	// (blkio weights, which only BFQ reads), or ModeNone / "" (not
	// governed). DiskWhy says what chose it, for Modes.
	Disk, DiskWhy string
	// Net is how network shares are delivered, into and out of the VMs:
	// wire.ModeThrottle or ModeNone / "". NetWhy says what chose it.
	Net, NetWhy string
	// LinkKiBps, when positive, is the link's speed (KiB/s, each
	// direction): the network throttles never divide more than it.
	LinkKiBps uint
	// DiskKiBps, when positive, is the speed of the device the managed
	// disks are on (KiB/s, reads and writes together): the disk throttle
	// divides it instead of estimating it.
	DiskKiBps uint
}

// Enforcer governs a host's domains through libvirt. Safe for concurrent use.
type Enforcer struct {
	cfg  Config
	conn *libvirt.Connect
	// qemu are the domains' own connections for the calls their QEMU
	// answers (onQEMUConn); none when borrowed (those calls use conn).
	qemu map[string]*libvirt.Connect

	cache domainCache
	// applyMu orders Apply and Applied: the scale and the weights in
	// force they read are the ones the last Apply left.
	applyMu sync.Mutex

	mu sync.Mutex
	// applied is the share last applied to each VM, scale the S of
	// cpu_shares = q·S it was applied at (see the package doc).
	applied  map[string]float64
	scale    float64
	borrowed bool // the connection is the caller's
	// io is what IOUsage saw last (the managed domains' MB moved, when)
	// and peak the fastest the host's domains moved together since.
	io   ioSample
	peak agent.IOUse
	th   throttles
	log  *slog.Logger // slow calls (timed)
	// cpuSeen is what Usage read last (asksQEMU).
	cpuSeen cpuSample
	// asking is the domains with a call to their QEMU running (ask).
	asking map[string]bool
	// stuck is how many calls to QEMUs wait past askWait (maxStuck).
	stuck int
	devs  map[string]devices // each domain's disks and taps (devicesOf)
	// emuFailed is the CPUs each domain's emulator threads could not be
	// pinned to (alignEmulator): not tried again until its vCPUs move.
	emuFailed map[string]string
}

// SlowCall is how long a libvirt call on one domain may take before the
// enforcer logs it: the agent ticks every second or so, and a call that
// waits on the domain's job or its QEMU holds the tick.
const SlowCall = time.Second

// SetLogger sets where the enforcer reports libvirt calls slower than
// SlowCall and the emulator threads it pins (by default nowhere).
func (e *Enforcer) SetLogger(l *slog.Logger) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.log = l
}

// timed reports call on vm, begun at start, if it took SlowCall or more.
func (e *Enforcer) timed(vm, call string, start time.Time, err error) {
	took := time.Since(start)
	if took < SlowCall {
		return
	}
	e.mu.Lock()
	l := e.log
	e.mu.Unlock()
	if l != nil {
		l.Warn("slow libvirt call", "vm", vm, "call", call, "took", took.Round(time.Millisecond), "err", err)
	}
}

var (
	_ agent.Enforcer     = (*Enforcer)(nil)
	_ agent.IOMeter      = (*Enforcer)(nil)
	_ agent.Rebalancer   = (*Enforcer)(nil)
	_ agent.ModeReporter = (*Enforcer)(nil)
	_ agent.WaitMeter    = (*Enforcer)(nil)
)

// New connects to libvirt, with the domain events that keep its cache
// current.
func New(cfg Config) (*Enforcer, error) {
	if cfg.HostCPUs <= 0 {
		cfg.HostCPUs = 1
	}
	_ = startEventLoop() // before the connection: without a loop its events are not read
	conn, err := libvirt.NewConnect(cfg.URI)
	if err != nil {
		return nil, fmt.Errorf("virt: connecting to %s: %w", cfg.URI, err)
	}
	e := &Enforcer{cfg: cfg, conn: conn, applied: map[string]float64{}}
	e.cache.watch(conn)
	return e, nil
}

// NewWithConn makes an enforcer on an open connection (which it does not
// close): the test driver keeps its state per connection. It registers no
// events on a connection it does not own (they would hold it open until
// Close), so it lists the domains at every call, and it makes every call
// on it, those a QEMU answers too.
func NewWithConn(cfg Config, conn *libvirt.Connect) (*Enforcer, error) {
	if cfg.HostCPUs <= 0 {
		cfg.HostCPUs = 1
	}
	e := &Enforcer{cfg: cfg, conn: conn, applied: map[string]float64{}, borrowed: true}
	e.cache.byName, e.cache.dirty, e.cache.wake = map[string]*domain{}, map[string]bool{}, make(chan struct{}, 1)
	return e, nil
}

// Close removes the network shaping the throttles set (the taps' qdiscs
// and their IFBs: without the agent nothing would re-plan them) and closes
// the libvirt connection.
func (e *Enforcer) Close() error {
	err := e.forgetTaps(nil)
	e.mu.Lock()
	link := e.th.link
	e.th.link = nil
	e.mu.Unlock()
	if link != nil {
		err = errors.Join(err, link.close())
	}
	e.cache.close(e.conn)
	if e.borrowed {
		return err
	}
	_, cerr := e.conn.Close()
	e.closeQEMUConns(nil)
	return errors.Join(err, cerr)
}

// CPUShares maps a share q to cpu_shares at the least scale, q·10000.
func CPUShares(q float64) uint64 {
	return cpuWeight(q, minScale)
}

// The scale S of cpu_shares = q·S stays in [minScale, maxScale]: never
// coarser than q·10000, and the managed domains' weights, which sum to
// about S, stay within a few times those of unmanaged domains.
const (
	minScale = MaxCPUShares
	maxScale = 4 * minScale
)

// cpuWeight maps a share q to cpu_shares at scale s.
func cpuWeight(q, s float64) uint64 {
	return uint64(min(max(math.Round(q*s), MinCPUShares), MaxCPUShares))
}

// chooseScale picks the scale for the shares next, given the scale cur
// that prev were applied at and the weights in force (0: unknown). CFS
// weights are relative, so when one VM's bid changes the others' shares
// all change by one factor, and the scale that absorbs it leaves their
// weights as they are. Of the scales that keep every weight within
// [MinCPUShares, MaxCPUShares] and the scale within its range — cur, the
// one each VM's change implies, and the range's geometric middle — it
// takes the one that changes the fewest weights, the middle on a tie (so
// a full rescale leaves room either way).
func chooseScale(cur float64, prev, next map[string]float64, inForce map[string]uint64) float64 {
	top := 0.0
	for _, q := range next {
		top = max(top, q)
	}
	hi := float64(maxScale)
	if top > 0 {
		hi = max(min(hi, MaxCPUShares/top), minScale)
	}
	changes := func(s float64) int {
		n := 0
		for vm, q := range next {
			if cpuWeight(q, s) != inForce[vm] {
				n++
			}
		}
		return n
	}
	best := math.Sqrt(minScale * hi)
	fewest := changes(best)
	candidates := []float64{cur}
	for vm, q := range next {
		if p := prev[vm]; p > 0 && q > 0 {
			candidates = append(candidates, cur*p/q)
		}
	}
	slices.Sort(candidates)
	last := 0.0
	for _, s := range candidates {
		if s < minScale || s > hi || s-last <= 1e-9*s {
			continue // out of range, or the same factor as the last one tried
		}
		last = s
		if n := changes(s); n < fewest {
			best, fewest = s, n
		}
	}
	return best
}

// BlkioWeight maps a share q to a blkio weight.
func BlkioWeight(q float64) uint {
	return uint(min(max(math.Round(q*MaxBlkioWeight), MinBlkioWeight), MaxBlkioWeight))
}

// VcpuQuota is the per-vCPU quota (µs per vcpuPeriod) that caps a domain
// with vcpus vCPUs at q of hostCPUs.
func VcpuQuota(q, hostCPUs float64, vcpus uint) int64 {
	if vcpus == 0 {
		vcpus = 1
	}
	return max(int64(math.Round(q*hostCPUs*vcpuPeriod/float64(vcpus))), minVcpuQuota)
}

type vmMeta struct {
	XMLName xml.Name `xml:"vm"`
	Owner   string   `xml:"owner,attr"`
}

// VMs lists the managed domains. It is the agent's tick, so it lists
// them from libvirt in full, repairing the cache and where a domain's
// emulator threads may run (alignEmulator).
func (e *Enforcer) VMs(context.Context) ([]agent.VM, error) {
	doms, owners, err := e.managedFrom(true)
	if err != nil {
		return nil, err
	}
	defer freeAll(doms)
	vms := make([]agent.VM, 0, len(doms))
	for name, d := range doms {
		p := placementOf(d)
		e.alignEmulator(name, d, p)
		vms = append(vms, agent.VM{ID: name, Owner: owners[name], CPUs: p.cpus()})
	}
	e.mu.Lock()
	for vm := range e.emuFailed {
		if _, ok := doms[vm]; !ok {
			delete(e.emuFailed, vm)
		}
	}
	e.mu.Unlock()
	sort.Slice(vms, func(i, j int) bool { return vms[i].ID < vms[j].ID })
	return vms, nil
}

// Apply enforces shares on every named domain, all resources at once,
// calling libvirt only for the domains whose settings change (see the
// package doc, "Mappings and their distortion").
func (e *Enforcer) Apply(_ context.Context, shares map[string]float64) error {
	e.applyMu.Lock()
	defer e.applyMu.Unlock()
	targets, err := e.targets(shares)
	if err != nil {
		return err
	}
	defer freeTargets(targets)
	e.mu.Lock()
	blkio := e.cfg.Disk == wire.ModeWeights
	prev := make(map[string]float64, len(shares))
	for vm := range shares {
		if q, ok := e.applied[vm]; ok {
			prev[vm] = q
		}
	}
	inForce := make(map[string]uint64, len(targets))
	for vm, t := range targets {
		inForce[vm] = t.weight
	}
	scale := chooseScale(e.scale, prev, shares, inForce)
	e.scale = scale
	e.mu.Unlock()
	var errs []error
	for vm, q := range shares {
		t, ok := targets[vm]
		if !ok {
			errs = append(errs, &agent.GoneError{VM: vm, Err: ErrUnknownDomain})
			continue
		}
		w := cpuWeight(q, scale)
		// A hard cap is absolute: it changes with the VM's share.
		p, known := prev[vm]
		recap := e.cfg.HardCap && (!known || p != q)
		if w != t.weight || recap || !e.cfg.HardCap && !t.uncapped {
			// Through ask: libvirt changes a weight under the domain's
			// job, which a disk call to a QEMU starved of CPU holds for
			// tens of seconds; the other VMs' weights, the tick and the
			// host's state must not wait for it. A change not answered
			// yet is made when the job is free, and the next tick's
			// Apply makes the latest one.
			uncapping := !t.uncapped
			err := e.ask(vm, t.dom, fmt.Sprintf("virDomainSetSchedulerParametersFlags cpu_shares %d", w), false, func(d *libvirt.Domain) error {
				return e.applyCPU(d, q, w, uncapping)
			})
			if errors.Is(err, errUnanswered) {
				e.mu.Lock()
				e.applied[vm] = q
				e.mu.Unlock()
				continue
			}
			if err != nil {
				e.cache.forget(vm)
				errs = append(errs, goneOr(vm, fmt.Errorf("virt: %s cpu: %w", vm, err)))
				continue
			}
			e.cache.record(vm, t.entry, func(d *domain) { d.weight, d.uncapped = w, true })
		}
		e.mu.Lock()
		e.applied[vm] = q
		e.mu.Unlock()
		if b := BlkioWeight(q); blkio && b != t.blkio {
			if err := ApplyDisk(t.dom, q); err != nil {
				e.cache.forget(vm)
				errs = append(errs, goneOr(vm, fmt.Errorf("virt: %s blkio: %w", vm, err)))
				continue
			}
			e.cache.record(vm, t.entry, func(d *domain) { d.blkio = b })
		}
	}
	return errors.Join(errs...)
}

// goneOr is err, or for a domain libvirt no longer has (destroyed between
// the listing and the call) the agent's GoneError.
func goneOr(vm string, err error) error {
	var lerr libvirt.Error
	if errors.As(err, &lerr) && lerr.Code == libvirt.ERR_NO_DOMAIN {
		return &agent.GoneError{VM: vm, Err: err}
	}
	return err
}

// applyCPU sets d's weight for share q (its cap too with HardCap; without,
// it removes a former cap when uncapping).
func (e *Enforcer) applyCPU(d *libvirt.Domain, q float64, weight uint64, uncapping bool) error {
	shares := &libvirt.DomainSchedulerParameters{CpuSharesSet: true, CpuShares: weight}
	if !e.cfg.HardCap {
		if err := d.SetSchedulerParametersFlags(shares, libvirt.DOMAIN_AFFECT_LIVE); err != nil {
			return err
		}
		if uncapping {
			return uncap(d)
		}
		return nil
	}
	info, err := d.GetInfo()
	if err != nil {
		return err
	}
	// The vCPU quotas live in child cgroups of the domain's: cgroup v1
	// refuses a child quota above its parent's, and one libvirt call does
	// not fix the order it writes them in (raising a cap failed). So: lift
	// the vCPU quotas, set the domain-wide one, then the vCPU ones (never
	// above it).
	shares.VcpuPeriodSet, shares.VcpuPeriod = true, vcpuPeriod
	shares.VcpuQuotaSet, shares.VcpuQuota = true, -1
	if err := d.SetSchedulerParametersFlags(shares, libvirt.DOMAIN_AFFECT_LIVE); err != nil {
		return err
	}
	// The whole domain too: QEMU's emulator threads are outside the vCPU
	// quotas, so a domain capped on its vCPUs alone uses more than its cap
	// (docs/PLATFORM.md).
	// The cap is q of the CPUs the domain may run on (its vCPUs, or the
	// host CPUs they are pinned to), not of the whole host: a domain
	// pinned to 2 of 8 CPUs capped at q × 8 would not be capped at all.
	cpus := e.cfg.HostCPUs
	if n := placementOf(d).cpus(); n > 0 {
		cpus = min(cpus, n)
	}
	global := &libvirt.DomainSchedulerParameters{GlobalPeriodSet: true, GlobalPeriod: vcpuPeriod,
		GlobalQuotaSet: true, GlobalQuota: VcpuQuota(q, cpus, 1)}
	if err := d.SetSchedulerParametersFlags(global, libvirt.DOMAIN_AFFECT_LIVE); err != nil {
		return err
	}
	vcpu := &libvirt.DomainSchedulerParameters{VcpuQuotaSet: true, VcpuQuota: VcpuQuota(q, cpus, info.NrVirtCpu)}
	return d.SetSchedulerParametersFlags(vcpu, libvirt.DOMAIN_AFFECT_LIVE)
}

// uncap removes a CPU cap left on d (by an agent run with --hard-cap before
// this one): without --hard-cap a domain is governed by its weight alone.
// Once per domain and enforcer: nothing else caps it. The domain-wide
// quota goes first: cgroup v1 refuses a vCPU quota above its parent's.
func uncap(d *libvirt.Domain) error {
	cur, err := d.GetSchedulerParametersFlags(libvirt.DOMAIN_AFFECT_LIVE)
	if err != nil {
		return err
	}
	if cur.GlobalQuotaSet && cur.GlobalQuota > 0 {
		if err := d.SetSchedulerParametersFlags(&libvirt.DomainSchedulerParameters{GlobalQuotaSet: true, GlobalQuota: -1}, libvirt.DOMAIN_AFFECT_LIVE); err != nil {
			return err
		}
	}
	if cur.VcpuQuotaSet && cur.VcpuQuota > 0 {
		return d.SetSchedulerParametersFlags(&libvirt.DomainSchedulerParameters{VcpuQuotaSet: true, VcpuQuota: -1}, libvirt.DOMAIN_AFFECT_LIVE)
	}
	return nil
}

// ApplyDisk sets d's blkio weight for share q.
func ApplyDisk(d *libvirt.Domain, q float64) error {
	return d.SetBlkioParameters(&libvirt.DomainBlkioParameters{WeightSet: true, Weight: BlkioWeight(q)}, libvirt.DOMAIN_AFFECT_LIVE)
}

// Applied reads back the CPU weights in force (see the package doc), and
// takes them as what is set: a weight changed behind the enforcer's back
// is set again by the next Apply.
func (e *Enforcer) Applied(context.Context) (map[string]float64, error) {
	e.applyMu.Lock()
	defer e.applyMu.Unlock()
	targets, err := e.targets(nil)
	if err != nil {
		return nil, err
	}
	defer freeTargets(targets)
	read := make(map[string]uint64, len(targets))
	for vm, t := range targets {
		p, err := t.dom.GetSchedulerParametersFlags(libvirt.DOMAIN_AFFECT_LIVE)
		if err != nil || !p.CpuSharesSet {
			continue
		}
		read[vm] = p.CpuShares
		e.cache.record(vm, t.entry, func(d *domain) { d.weight = p.CpuShares })
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	scale := e.scale
	if scale == 0 {
		scale = minScale
	}
	out := make(map[string]float64, len(read))
	for vm, w := range read {
		if q, ok := e.applied[vm]; ok && (cpuWeight(q, scale) == w || e.asking[vm]) {
			// (A domain with a call in flight may have a weight change
			// waiting behind it (Apply, through ask): not drift.)
			out[vm] = q
		} else {
			out[vm] = float64(w) / scale
		}
	}
	return out, nil
}

// Usage is the CPU time each managed domain's guest ran: its vCPU threads',
// read from the host's accounts of its QEMU process (processTimes), or the
// whole domain's (virDomainGetInfo) where those cannot be read. The agent
// judges a VM idle or busy by it, and an idle TCG guest's QEMU spends two
// to three times its vCPUs' time on its own main loop and timers
// (docs/E2E.md): counted, a guest that sleeps looked busy to a bar a tenth
// of a small share. What a guest's devices move is measured as its I/O.
// A domain's source stays the same while its QEMU runs (the vCPU threads
// are named when it starts), so the agent's differences do not mix them.
// Usage also notes which domains' QEMU ran under minAnswerCPU since the
// last call (asksQEMU), on the whole domain's time: that is what must run
// to answer.
func (e *Enforcer) Usage(context.Context) (map[string]time.Duration, error) {
	domains := map[string]time.Duration{}
	use, err := e.timePerDomain(func(vm string, d *libvirt.Domain) (time.Duration, bool, error) {
		start := time.Now()
		info, err := d.GetInfo()
		e.timed(vm, "virDomainGetInfo", start, err)
		if err != nil {
			return 0, false, nil
		}
		domains[vm] = time.Duration(info.CpuTime)
		if pid, ok := readPid(pidFile(e.cfg.URI, vm)); ok {
			if ran, ok := guestRan("/proc", pid); ok {
				return ran, true, nil
			}
		}
		return domains[vm], true, nil
	})
	if err == nil {
		e.mu.Lock()
		e.cpuSeen.next(domains, time.Now())
		e.mu.Unlock()
	}
	return use, err
}

// minAnswerCPU is the least CPU (a fraction of one) a domain's QEMU must
// have had over the last Usage interval for the enforcer to ask it
// anything (asksQEMU): a QEMU the host starves answers nothing until it
// runs. Idle TCG guests beside busy ones run their vCPUs 15–25 ms a second
// at a share of 0.14, and 0–5 ms at the least weight (docs/E2E.md).
const minAnswerCPU = 0.01

// cpuSample is what Usage read last and the one before, per domain.
type cpuSample struct {
	at, before time.Time
	now, prev  map[string]time.Duration
}

func (c *cpuSample) next(use map[string]time.Duration, at time.Time) {
	c.before, c.prev = c.at, c.now
	c.at, c.now = at, use
}

// starved says whether vm's QEMU ran under minAnswerCPU between the last
// two readings (false when there are not two).
func (c *cpuSample) starved(vm string) bool {
	dt := c.at.Sub(c.before).Seconds()
	now, ok1 := c.now[vm]
	prev, ok2 := c.prev[vm]
	return ok1 && ok2 && dt > 0 && (now-prev).Seconds()/dt < minAnswerCPU
}

// timePerDomain reads a time of each managed domain (read says whether it
// has one, or fails the whole reading).
func (e *Enforcer) timePerDomain(read func(vm string, d *libvirt.Domain) (time.Duration, bool, error)) (map[string]time.Duration, error) {
	doms, _, err := e.managed()
	if err != nil {
		return nil, err
	}
	defer freeAll(doms)
	out := make(map[string]time.Duration, len(doms))
	for vm, d := range doms {
		t, ok, err := read(vm, d)
		if err != nil {
			return nil, err
		}
		if ok {
			out[vm] = t
		}
	}
	return out, nil
}

// CPUWait is each managed domain's vCPUs' time runnable but waiting for a
// host CPU, summed: their scheduling delay (the steal time the guest sees),
// read from the host's accounts of the domain's QEMU process (procwait.go
// says why not from libvirt's vCPU statistics). A domain whose process
// cannot be read (another libvirt driver, a remote host, an agent without
// the rights) is absent: the agent judges its idleness by its use alone.
func (e *Enforcer) CPUWait(context.Context) (map[string]time.Duration, error) {
	return e.timePerDomain(func(vm string, d *libvirt.Domain) (time.Duration, bool, error) {
		wait, ok := VCPUWait(e.cfg.URI, vm)
		return wait, ok, nil
	})
}

// asksQEMU says, for each managed domain, whether the enforcer may make
// calls that the domain's QEMU must answer (libvirt's disk statistics and
// disk caps go through its monitor): only while the domain has a CPU
// share (applied, or the last the throttles were planned for), and its
// QEMU ran at least minAnswerCPU over the last Usage interval (a small
// share beside busy guests starves it too). A domain without a share
// gets the least weight there is, and beside busy ones its QEMU may get
// no CPU at all; such a call would then never return, holding libvirt's
// job on the domain, and the bid that would give it CPU (a weight change
// takes the same job) would wait behind it.
func (e *Enforcer) asksQEMU() func(vm string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	applied, planned := maps.Clone(e.applied), maps.Clone(e.th.shares)
	starved := maps.Clone(e.asking) // still waiting on an earlier call
	if starved == nil {
		starved = map[string]bool{}
	}
	for vm := range e.cpuSeen.now {
		starved[vm] = starved[vm] || e.cpuSeen.starved(vm)
	}
	return func(vm string) bool { return (applied[vm] > 0 || planned[vm] > 0) && !starved[vm] }
}

// IOUsage is each managed domain's I/O so far, in MB: bytes read and
// written on its disks (virDomainBlockStats), received and sent on its
// interfaces (virDomainInterfaceStats). A device whose statistics cannot
// be read counts nothing; a domain whose disks are not read (asksQEMU) is
// absent. Each call also updates the host's peak rates (IOCapacity).
func (e *Enforcer) IOUsage(context.Context) (map[string]agent.IOUse, error) {
	doms, _, err := e.managed()
	if err != nil {
		return nil, err
	}
	defer freeAll(doms)
	out := make(map[string]agent.IOUse, len(doms))
	counters := e.readIO(doms)
	for vm, c := range counters {
		if !c.diskUnread { // else its use is unknown this time
			out[vm] = c.use()
		}
	}
	now := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.peak = e.io.next(out, now, e.peak)
	e.th.read, e.th.readAt = counters, now // Rebalance plans from these
	return out, nil
}

// IOCapacity is the fastest the host's managed domains have moved data
// together (MB/s, each resource over one interval between IOUsage calls):
// a measured stand-in for the device's bandwidth, against which a domain's
// own rate says whether it is busy. A device whose speed is stated (the
// link's, the disk's: ceiling) has that instead.
func (e *Enforcer) IOCapacity() agent.IOUse {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.peak
	if v := e.ceiling(wire.ResourceNetIn); v > 0 {
		c.Net = v
	}
	if v := e.ceiling(wire.ResourceDisk); v > 0 {
		c.Disk = v
	}
	return c
}

// ioSample is one IOUsage reading.
type ioSample struct {
	moved map[string]agent.IOUse
	at    time.Time
}

// next records moved at now and returns peak raised to the host's total
// rate since the previous reading (domains in both only: a new domain's
// history is not a rate).
func (s *ioSample) next(moved map[string]agent.IOUse, now time.Time, peak agent.IOUse) agent.IOUse {
	if dt := now.Sub(s.at).Seconds(); s.moved != nil && dt > 0 {
		var total agent.IOUse
		for vm, m := range moved {
			if before, ok := s.moved[vm]; ok {
				total.Disk += max(m.Disk-before.Disk, 0)
				total.Net += max(m.Net-before.Net, 0)
			}
		}
		peak.Disk, peak.Net = max(peak.Disk, total.Disk/dt), max(peak.Net, total.Net/dt)
	}
	s.moved, s.at = moved, now
	return peak
}

// Ping reports whether libvirt answers (the agent's /readyz): one round
// trip to the daemon, which a dead connection or a hung libvirtd fails.
func (e *Enforcer) Ping() error {
	if alive, err := e.conn.IsAlive(); err != nil || !alive {
		return fmt.Errorf("libvirt: connection is not alive (%v)", err)
	}
	if _, err := e.conn.GetLibVersion(); err != nil {
		return fmt.Errorf("libvirt: %w", err)
	}
	return nil
}
