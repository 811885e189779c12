package agent

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// SimEnforcer is a simulated host: its VMs receive CPU in proportion to the
// shares applied, work-conserving (a VM that wants less than its share leaves
// the rest to the others, as CPU shares do on Linux), integrated lazily
// between calls on the injected clock. Each VM wants the whole host unless
// SetDemand says otherwise.
type SimEnforcer struct {
	mu     sync.Mutex
	now    func() time.Time
	cpus   float64
	vms    []VM
	shares map[string]float64
	demand map[string]float64 // CPUs wanted
	used   map[string]float64 // CPU-seconds
	last   time.Time
}

// NewSimEnforcer makes a simulated host with cpus CPUs and vms on the clock now.
func NewSimEnforcer(now func() time.Time, cpus float64, vms ...VM) *SimEnforcer {
	if now == nil {
		now = time.Now
	}
	if cpus <= 0 {
		cpus = 1
	}
	s := &SimEnforcer{now: now, cpus: cpus, shares: map[string]float64{}, demand: map[string]float64{},
		used: map[string]float64{}, last: now()}
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
}

// SetDemand sets how many CPUs vm wants from now on (0 = idle).
func (s *SimEnforcer) SetDemand(vm string, cpus float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.integrate()
	s.demand[vm] = max(cpus, 0)
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
	return nil
}

// Tamper changes vm's share behind the agent's back, as an operator or a
// crashed hypervisor might; the agent's reconcile pass must repair it.
func (s *SimEnforcer) Tamper(vm string, share float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.integrate()
	s.shares[vm] = share
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
	s.mu.Lock()
	defer s.mu.Unlock()
	s.integrate()
	out := make(map[string]time.Duration, len(s.vms))
	for _, vm := range s.vms {
		out[vm.ID] = time.Duration(s.used[vm.ID] * float64(time.Second))
	}
	return out, nil
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
	for vm, cpu := range s.allocate() {
		s.used[vm] += cpu * dt
	}
}

// allocate is work-conserving proportional sharing (water-filling): every
// VM gets its weight's part of what is left, a VM wanting less keeps its
// demand and frees the rest for the others. Without applied shares the
// weights are equal.
func (s *SimEnforcer) allocate() map[string]float64 {
	weight := func(vm string) float64 {
		if len(s.shares) == 0 {
			return 1
		}
		return s.shares[vm]
	}
	alloc := map[string]float64{}
	active := make([]string, 0, len(s.vms))
	for _, vm := range s.vms {
		if s.demand[vm.ID] > 0 && weight(vm.ID) > 0 {
			active = append(active, vm.ID)
		}
	}
	sort.Strings(active)
	left := s.cpus
	for len(active) > 0 && left > 1e-12 {
		var w float64
		for _, vm := range active {
			w += weight(vm)
		}
		var still []string
		freed := 0.0
		for _, vm := range active {
			if need := s.demand[vm]; need <= left*weight(vm)/w {
				alloc[vm] = need
				freed += need
			} else {
				still = append(still, vm)
			}
		}
		if len(still) == len(active) {
			for _, vm := range active {
				alloc[vm] = left * weight(vm) / w
			}
			break
		}
		left -= freed
		active = still
	}
	return alloc
}
