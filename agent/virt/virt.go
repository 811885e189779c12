package virt

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"math"
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
}

// Enforcer governs a host's domains through libvirt. Safe for concurrent use.
type Enforcer struct {
	cfg  Config
	conn *libvirt.Connect

	mu       sync.Mutex
	applied  map[string]float64
	borrowed bool // the connection is the caller's
	// io is what IOUsage saw last (the managed domains' MB moved, when)
	// and peak the fastest the host's domains moved together since.
	io   ioSample
	peak agent.IOUse
	th   throttles
}

var (
	_ agent.Enforcer     = (*Enforcer)(nil)
	_ agent.IOMeter      = (*Enforcer)(nil)
	_ agent.Rebalancer   = (*Enforcer)(nil)
	_ agent.ModeReporter = (*Enforcer)(nil)
)

// New connects to libvirt.
func New(cfg Config) (*Enforcer, error) {
	if cfg.HostCPUs <= 0 {
		cfg.HostCPUs = 1
	}
	conn, err := libvirt.NewConnect(cfg.URI)
	if err != nil {
		return nil, fmt.Errorf("virt: connecting to %s: %w", cfg.URI, err)
	}
	return &Enforcer{cfg: cfg, conn: conn, applied: map[string]float64{}}, nil
}

// NewWithConn makes an enforcer on an open connection (which it does not
// close): the test driver keeps its state per connection.
func NewWithConn(cfg Config, conn *libvirt.Connect) (*Enforcer, error) {
	if cfg.HostCPUs <= 0 {
		cfg.HostCPUs = 1
	}
	return &Enforcer{cfg: cfg, conn: conn, applied: map[string]float64{}, borrowed: true}, nil
}

// Close removes the network shaping the throttles set (the taps' qdiscs
// and their IFBs: without the agent nothing would re-plan them) and closes
// the libvirt connection.
func (e *Enforcer) Close() error {
	err := e.forgetTaps(nil)
	if e.borrowed {
		return err
	}
	_, cerr := e.conn.Close()
	return errors.Join(err, cerr)
}

// CPUShares maps a share q to cpu_shares.
func CPUShares(q float64) uint64 {
	return uint64(min(max(math.Round(q*MaxCPUShares), MinCPUShares), MaxCPUShares))
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

// managed lists the running domains with mrmarket metadata. The caller frees them.
func (e *Enforcer) managed() (map[string]*libvirt.Domain, map[string]string, error) {
	doms, err := e.conn.ListAllDomains(libvirt.CONNECT_LIST_DOMAINS_ACTIVE)
	if err != nil {
		return nil, nil, fmt.Errorf("virt: listing domains: %w", err)
	}
	byName, owners := map[string]*libvirt.Domain{}, map[string]string{}
	for i := range doms {
		d := &doms[i]
		name, err := d.GetName()
		if err != nil || wire.CheckName("vm", name) != nil {
			_ = d.Free()
			continue
		}
		meta, err := d.GetMetadata(libvirt.DOMAIN_METADATA_ELEMENT, Namespace, libvirt.DOMAIN_AFFECT_LIVE)
		var m vmMeta
		if err != nil || xml.Unmarshal([]byte(meta), &m) != nil || wire.CheckName("owner", m.Owner) != nil {
			_ = d.Free()
			continue
		}
		byName[name], owners[name] = d, m.Owner
	}
	return byName, owners, nil
}

func freeAll(doms map[string]*libvirt.Domain) {
	for _, d := range doms {
		_ = d.Free()
	}
}

// VMs lists the managed domains.
func (e *Enforcer) VMs(context.Context) ([]agent.VM, error) {
	doms, owners, err := e.managed()
	if err != nil {
		return nil, err
	}
	defer freeAll(doms)
	vms := make([]agent.VM, 0, len(doms))
	for name, d := range doms {
		vms = append(vms, agent.VM{ID: name, Owner: owners[name], CPUs: runnableCPUs(d)})
	}
	sort.Slice(vms, func(i, j int) bool { return vms[i].ID < vms[j].ID })
	return vms, nil
}

// Apply enforces shares on every named domain, all resources at once.
func (e *Enforcer) Apply(_ context.Context, shares map[string]float64) error {
	doms, _, err := e.managed()
	if err != nil {
		return err
	}
	defer freeAll(doms)
	e.mu.Lock()
	weights := e.cfg.Disk == wire.ModeWeights
	e.mu.Unlock()
	var errs []error
	for vm, q := range shares {
		d, ok := doms[vm]
		if !ok {
			errs = append(errs, fmt.Errorf("%w: %q", ErrUnknownDomain, vm))
			continue
		}
		if err := e.applyCPU(d, q); err != nil {
			errs = append(errs, fmt.Errorf("virt: %s cpu: %w", vm, err))
			continue
		}
		e.mu.Lock()
		e.applied[vm] = q
		e.mu.Unlock()
		if weights {
			if err := ApplyDisk(d, q); err != nil {
				errs = append(errs, fmt.Errorf("virt: %s blkio: %w", vm, err))
			}
		}
	}
	return errors.Join(errs...)
}

// runnableCPUs is how many host CPUs d can run on at once: its vCPUs, at
// most the host CPUs its vCPUs are pinned to (their union); 0 when libvirt
// cannot say (the agent then takes the whole host).
func runnableCPUs(d *libvirt.Domain) float64 {
	info, err := d.GetInfo()
	if err != nil {
		return 0
	}
	n := float64(info.NrVirtCpu)
	if pins, err := d.GetVcpuPinInfo(libvirt.DOMAIN_AFFECT_LIVE); err == nil && len(pins) > 0 {
		var union []bool
		for _, row := range pins {
			for cpu, ok := range row {
				if cpu >= len(union) {
					union = append(union, make([]bool, cpu+1-len(union))...)
				}
				union[cpu] = union[cpu] || ok
			}
		}
		pinned := 0
		for _, ok := range union {
			if ok {
				pinned++
			}
		}
		if pinned > 0 {
			n = min(n, float64(pinned))
		}
	}
	return n
}

func (e *Enforcer) applyCPU(d *libvirt.Domain, q float64) error {
	shares := &libvirt.DomainSchedulerParameters{CpuSharesSet: true, CpuShares: CPUShares(q)}
	if !e.cfg.HardCap {
		if err := d.SetSchedulerParametersFlags(shares, libvirt.DOMAIN_AFFECT_LIVE); err != nil {
			return err
		}
		return uncap(d)
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
	if n := runnableCPUs(d); n > 0 {
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
// The domain-wide quota goes first: cgroup v1 refuses a vCPU quota above
// its parent's.
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

// Applied reads back the CPU weights in force (see the package doc).
func (e *Enforcer) Applied(context.Context) (map[string]float64, error) {
	doms, _, err := e.managed()
	if err != nil {
		return nil, err
	}
	defer freeAll(doms)
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]float64, len(doms))
	for vm, d := range doms {
		p, err := d.GetSchedulerParametersFlags(libvirt.DOMAIN_AFFECT_LIVE)
		if err != nil || !p.CpuSharesSet {
			continue
		}
		if q, ok := e.applied[vm]; ok && CPUShares(q) == p.CpuShares {
			out[vm] = q
		} else {
			out[vm] = float64(p.CpuShares) / MaxCPUShares
		}
	}
	return out, nil
}

// Usage is each managed domain's CPU time.
func (e *Enforcer) Usage(context.Context) (map[string]time.Duration, error) {
	doms, _, err := e.managed()
	if err != nil {
		return nil, err
	}
	defer freeAll(doms)
	out := make(map[string]time.Duration, len(doms))
	for vm, d := range doms {
		info, err := d.GetInfo()
		if err != nil {
			continue
		}
		out[vm] = time.Duration(info.CpuTime)
	}
	return out, nil
}

// IOUsage is each managed domain's I/O so far, in MB: bytes read and
// written on its disks (virDomainBlockStats), received and sent on its
// interfaces (virDomainInterfaceStats). A device whose statistics cannot
// be read counts nothing. Each call also updates the host's peak rates
// (IOCapacity).
func (e *Enforcer) IOUsage(context.Context) (map[string]agent.IOUse, error) {
	doms, _, err := e.managed()
	if err != nil {
		return nil, err
	}
	defer freeAll(doms)
	out := make(map[string]agent.IOUse, len(doms))
	counters := make(map[string]ioCounters, len(doms))
	for vm, d := range doms {
		counters[vm] = domainIO(d)
		out[vm] = counters[vm].use()
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
// own rate says whether it is busy. The network's is the configured link
// when there is one.
func (e *Enforcer) IOCapacity() agent.IOUse {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.peak
	if e.cfg.LinkKiBps > 0 {
		c.Net = float64(e.cfg.LinkKiBps) / 1024
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
