package agent

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// SimEnforcer is a simulated host: its VMs receive CPU in proportion to the
// shares applied, work-conserving (a VM that wants less than its share leaves
// the rest to the others, as CPU shares do on Linux), integrated lazily
// between calls on the injected clock. Each VM wants the whole host unless
// SetDemand says otherwise; what it wants and is not given it waits for
// (CPUWait), and processes outside the market (SetForeignLoad) run ahead of
// the VMs.
type SimEnforcer struct {
	mu      sync.Mutex
	now     func() time.Time
	cpus    float64
	foreign float64 // CPUs taken by processes outside the market
	vms     []VM
	shares  map[string]float64
	demand  map[string]float64 // CPUs wanted
	used    map[string]float64 // CPU-seconds
	waited  map[string]float64 // CPU-seconds wanted and not given
	last    time.Time
	// alloc is the allocation allocate gave last, kept until the shares,
	// the demand or the foreign load change (stale): the simulator sets
	// every VM's demand at every refresh, mostly to what it was.
	alloc map[string]float64
	stale bool
	// I/O: the host's bandwidth, each VM's current rates and MB so far
	// (SetIO; see IOMeter).
	ioCap   IOUse
	ioRate  map[string]IOUse
	ioMoved map[string]IOUse
	// Throttles (SetThrottled) and the caps they set.
	throttle ThrottleSet
	caps     map[string]map[string]float64
}

var _ WaitMeter = (*SimEnforcer)(nil)

// NewSimEnforcer makes a simulated host with cpus CPUs and vms on the clock now.
func NewSimEnforcer(now func() time.Time, cpus float64, vms ...VM) *SimEnforcer {
	if now == nil {
		now = time.Now
	}
	if cpus <= 0 {
		cpus = 1
	}
	s := &SimEnforcer{now: now, cpus: cpus, shares: map[string]float64{}, demand: map[string]float64{},
		used: map[string]float64{}, waited: map[string]float64{}, last: now(), ioRate: map[string]IOUse{}, ioMoved: map[string]IOUse{},
		stale: true}
	for _, vm := range vms {
		s.vms = append(s.vms, vm)
		s.demand[vm.ID] = cpus
	}
	return s
}

// VMs lists the simulated VMs.
func (s *SimEnforcer) VMs(context.Context) ([]VM, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]VM(nil), s.vms...), nil
}

// AddVM adds a VM that wants the whole host.
func (s *SimEnforcer) AddVM(vm VM) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.integrate()
	s.vms = append(s.vms, vm)
	s.demand[vm.ID] = s.cpus
	s.stale = true
}

// SetDemand sets how many CPUs vm wants from now on (0 = idle).
func (s *SimEnforcer) SetDemand(vm string, cpus float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.integrate()
	d := max(cpus, 0)
	if old, ok := s.demand[vm]; !ok || old != d {
		s.stale = true
	}
	s.demand[vm] = d
}

// SetForeignLoad makes processes outside the market take cpus of the
// host's CPUs ahead of the VMs (an overcommitted host), from now on.
func (s *SimEnforcer) SetForeignLoad(cpus float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.integrate()
	s.foreign = cpus
	s.stale = true
}

// CPUWait is the CPU time each VM wanted and was not given, up to now.
func (s *SimEnforcer) CPUWait(context.Context) (map[string]time.Duration, error) {
	return s.upToNow(func() map[string]float64 { return s.waited }), nil
}

// SetIOCapacity sets the host's disk and network bandwidth (MB/s) its
// VMs' I/O is measured against; 0 leaves a resource unmeasured.
func (s *SimEnforcer) SetIOCapacity(c IOUse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ioCap = c
}

// SetIO sets the disk and network bandwidth vm moves from now on (MB/s);
// the simulator that delivers it says so.
func (s *SimEnforcer) SetIO(vm string, rate IOUse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ioRate[vm] == rate {
		return // the simulator says so at every refresh; integrating is for a change
	}
	s.integrate()
	s.ioRate[vm] = rate
}

// IOUsage is each VM's I/O up to now, in MB.
func (s *SimEnforcer) IOUsage(context.Context) (map[string]IOUse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.integrate()
	out := make(map[string]IOUse, len(s.vms))
	for _, vm := range s.vms {
		out[vm.ID] = s.ioMoved[vm.ID]
	}
	return out, nil
}

// SetThrottled makes the host deliver its disk and/or network shares by
// throttles, as the libvirt agent does where the device does not weigh its
// users: each agent tick Rebalance plans per-VM caps (Throttle) from what
// the VMs moved, and the simulator that delivers the I/O reads them (Caps).
func (s *SimEnforcer) SetThrottled(disk, net bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttle = ThrottleSet{Plans: map[string]*Throttle{}}
	if disk {
		s.throttle.Plans[wire.ResourceDisk] = &Throttle{}
	}
	if net {
		s.throttle.Plans[wire.ResourceNet] = &Throttle{}
	}
}

// Rebalance re-plans the throttled resources' caps from what each VM moved
// since the last call (see Rebalancer).
func (s *SimEnforcer) Rebalance(_ context.Context, shares map[string]float64) (map[string]map[string]float64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.throttle.Plans) == 0 {
		return nil, nil
	}
	s.integrate()
	sofar := make(map[string]map[string]float64, len(s.vms))
	for _, vm := range s.vms {
		m := s.ioMoved[vm.ID]
		sofar[vm.ID] = map[string]float64{wire.ResourceDisk: m.Disk, wire.ResourceNet: m.Net}
	}
	caps := s.throttle.Plan(shares, sofar, nil, s.now())
	s.caps = caps
	out := make(map[string]map[string]float64, len(caps))
	for vm, c := range caps {
		out[vm] = maps.Clone(c)
	}
	return out, nil
}

// Caps is vm's throttle caps now (MB/s; 0 for a resource not capped).
func (s *SimEnforcer) Caps(vm string) IOUse {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.caps[vm]
	return IOUse{Disk: c[wire.ResourceDisk], Net: c[wire.ResourceNet]}
}

// IOCapacity is the bandwidth SetIOCapacity set.
func (s *SimEnforcer) IOCapacity() IOUse {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ioCap
}

// Apply enforces shares from now on.
func (s *SimEnforcer) Apply(_ context.Context, shares map[string]float64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for vm := range shares {
		if !s.has(vm) {
			return fmt.Errorf("sim: no VM %q on this host", vm)
		}
	}
	s.integrate()
	s.shares = make(map[string]float64, len(shares))
	for vm, q := range shares {
		s.shares[vm] = q
	}
	s.stale = true
	return nil
}

// Tamper changes vm's share behind the agent's back, as an operator or a
// crashed hypervisor might; the agent's reconcile pass must repair it.
func (s *SimEnforcer) Tamper(vm string, share float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.integrate()
	s.shares[vm] = share
	s.stale = true
}

// InForce is the shares in force, as Applied reads them back but not
// copied: the simulator reads them at every change of a host's demand.
// The caller neither changes nor keeps the map.
func (s *SimEnforcer) InForce() map[string]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shares
}

// Applied reads back the shares in force.
func (s *SimEnforcer) Applied(context.Context) (map[string]float64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]float64, len(s.shares))
	for vm, q := range s.shares {
		out[vm] = q
	}
	return out, nil
}

// Usage is each VM's CPU time up to now.
func (s *SimEnforcer) Usage(context.Context) (map[string]time.Duration, error) {
	return s.upToNow(func() map[string]float64 { return s.used }), nil
}

// upToNow is, for each VM, the CPU-seconds of the account secs gives (read
// under mu), integrated up to now.
func (s *SimEnforcer) upToNow(secs func() map[string]float64) map[string]time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.integrate()
	of := secs()
	out := make(map[string]time.Duration, len(s.vms))
	for _, vm := range s.vms {
		out[vm.ID] = time.Duration(of[vm.ID] * float64(time.Second))
	}
	return out
}

func (s *SimEnforcer) has(id string) bool {
	for _, vm := range s.vms {
		if vm.ID == id {
			return true
		}
	}
	return false
}

// integrate accounts the CPU delivered since the last call at the current
// allocation.
func (s *SimEnforcer) integrate() {
	now := s.now()
	dt := now.Sub(s.last).Seconds()
	s.last = now
	if dt <= 0 {
		return
	}
	alloc := s.allocate()
	for vm, cpu := range alloc {
		s.used[vm] += cpu * dt
	}
	for vm, d := range s.demand {
		s.waited[vm] += max(min(d, s.cpus)-alloc[vm], 0) * dt
	}
	for vm, r := range s.ioRate {
		m := s.ioMoved[vm]
		m.Disk += r.Disk * dt
		m.Net += r.Net * dt
		s.ioMoved[vm] = m
	}
}

// allocate is the host's CPU allocation under the applied shares (equal
// weights before any Apply); the caller does not change it.
func (s *SimEnforcer) allocate() map[string]float64 {
	if !s.stale {
		return s.alloc
	}
	weights := s.shares
	if len(weights) == 0 {
		weights = make(map[string]float64, len(s.vms))
		for _, vm := range s.vms {
			weights[vm.ID] = 1
		}
	}
	s.alloc, s.stale = AllocateTo(s.alloc, max(s.cpus-s.foreign, 0), weights, s.demand), false
	return s.alloc
}

// Allocate divides cpus among VMs by work-conserving proportional sharing,
// as CPU shares do on Linux (water-filling): every VM with demand gets its
// weight's part of what is left, a VM wanting less keeps its demand and
// frees the rest for the others. It is what SimEnforcer delivers and what
// the cluster simulator (hadoopvm/sim) runs. VMs with no weight or no demand
// get nothing.
func Allocate(cpus float64, weights, demand map[string]float64) map[string]float64 {
	return AllocateTo(nil, cpus, weights, demand)
}

// AllocateTo is Allocate into alloc, emptied first (nil: a new map), for
// a caller that allocates again and again (the simulator, at every
// change of a host's demand) and need not keep the last allocation.
func AllocateTo(alloc map[string]float64, cpus float64, weights, demand map[string]float64) map[string]float64 {
	if alloc == nil {
		alloc = map[string]float64{}
	}
	clear(alloc)
	var room [16]string // a host's VMs, most often: no slice on the heap
	active := room[:0]
	for vm, d := range demand {
		if d > 0 && weights[vm] > 0 {
			active = append(active, vm)
		}
	}
	slices.Sort(active)
	left := cpus
	for len(active) > 0 && left > 1e-12 {
		var w float64
		for _, vm := range active {
			w += weights[vm]
		}
		still := active[:0] // filtered in place: each round keeps fewer
		freed := 0.0
		for _, vm := range active {
			if need := demand[vm]; need <= left*weights[vm]/w {
				alloc[vm] = need
				freed += need
			} else {
				still = append(still, vm)
			}
		}
		if len(still) == len(active) { // none satisfied: active is unchanged
			for _, vm := range active {
				alloc[vm] = left * weights[vm] / w
			}
			break
		}
		left -= freed
		active = still
	}
	return alloc
}
