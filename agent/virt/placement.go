package virt

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"libvirt.org/go/libvirt"
)

// vcpuPlacement is where a domain's vCPUs may run: how many there are and
// the union of the host CPUs they are pinned to (nil when libvirt cannot
// say).
type vcpuPlacement struct {
	vcpus uint
	union []bool
}

// placementOf reads d's vCPUs and their pins; zero when libvirt cannot say.
func placementOf(d *libvirt.Domain) vcpuPlacement {
	info, err := d.GetInfo()
	if err != nil {
		return vcpuPlacement{}
	}
	p := vcpuPlacement{vcpus: info.NrVirtCpu}
	if pins, err := d.GetVcpuPinInfo(libvirt.DOMAIN_AFFECT_LIVE); err == nil && len(pins) > 0 {
		for _, row := range pins {
			for cpu, ok := range row {
				if cpu >= len(p.union) {
					p.union = append(p.union, make([]bool, cpu+1-len(p.union))...)
				}
				p.union[cpu] = p.union[cpu] || ok
			}
		}
	}
	return p
}

// cpus is how many host CPUs the domain can run on at once: its vCPUs, at
// most the host CPUs they are pinned to; 0 when libvirt cannot say (the
// agent then takes the whole host).
func (p vcpuPlacement) cpus() float64 {
	n := float64(p.vcpus)
	if pinned := count(p.union); pinned > 0 {
		n = min(n, float64(pinned))
	}
	return n
}

// pinned says the vCPUs may not run on some host CPU: the union leaves
// one out.
func (p vcpuPlacement) pinned() bool {
	c := count(p.union)
	return c > 0 && c < len(p.union)
}

// alignEmulator keeps the QEMU threads of vm that are not its vCPUs (its
// emulator threads: the main loop, which moves the guest's disk and
// network data, and QEMU's helpers) on the host CPUs its vCPUs are pinned
// to, when they may run elsewhere (see the package doc, "Where a
// domain's threads run"). A failure is logged once for each placement.
func (e *Enforcer) alignEmulator(vm string, d *libvirt.Domain, p vcpuPlacement) {
	if !p.pinned() {
		return
	}
	emu, err := d.GetEmulatorPinInfo(libvirt.DOMAIN_AFFECT_LIVE)
	if err == nil && within(emu, p.union) {
		return
	}
	want := cpuList(p.union)
	e.mu.Lock()
	tried := e.emuFailed[vm] == want
	l := e.log
	e.mu.Unlock()
	if tried {
		return
	}
	if err == nil {
		err = e.ask(vm, d, "virDomainPinEmulator "+want, false, func(d *libvirt.Domain) error {
			return d.PinEmulator(p.union, libvirt.DOMAIN_AFFECT_LIVE)
		})
		if errors.Is(err, errUnanswered) { // made when the domain's job is free; read again next tick
			return
		}
	}
	e.mu.Lock()
	if err != nil {
		if e.emuFailed == nil {
			e.emuFailed = map[string]string{}
		}
		e.emuFailed[vm] = want
	} else {
		delete(e.emuFailed, vm)
	}
	e.mu.Unlock()
	if l == nil {
		return
	}
	if err != nil {
		l.Warn("virt: could not keep the domain's emulator threads on its vCPUs' CPUs: its weight is divided over CPUs its vCPUs cannot use",
			"vm", vm, "cpus", want, "was", cpuList(emu), "err", err)
		return
	}
	l.Info("virt: emulator threads pinned to the domain's vCPUs' CPUs", "vm", vm, "cpus", want, "was", cpuList(emu))
}

// within says every CPU set in a is set in b (a CPU beyond b's length is
// not in b).
func within(a, b []bool) bool {
	for cpu, ok := range a {
		if ok && (cpu >= len(b) || !b[cpu]) {
			return false
		}
	}
	return true
}

func count(set []bool) int {
	n := 0
	for _, ok := range set {
		if ok {
			n++
		}
	}
	return n
}

// cpuList writes a CPU set as libvirt's cpuset syntax does ("0-2,5").
func cpuList(set []bool) string {
	var parts []string
	for cpu := 0; cpu < len(set); cpu++ {
		if !set[cpu] {
			continue
		}
		end := cpu
		for end+1 < len(set) && set[end+1] {
			end++
		}
		if end == cpu {
			parts = append(parts, strconv.Itoa(cpu))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", cpu, end))
		}
		cpu = end
	}
	return strings.Join(parts, ",")
}
