package virt

import (
	"errors"
	"time"

	"libvirt.org/go/libvirt"
)

// askWait is how long a tick waits for one call a domain's QEMU must
// answer (asksQEMU): a domain whose QEMU loses the CPU during a call (the
// host turning busy) would otherwise hold the tick for as long.
const askWait = 250 * time.Millisecond

// maxQEMUCalls is how many calls that a QEMU must answer may be in flight
// at once, over all domains. libvirtd serves at most five calls of one
// connection at a time (max_client_requests) and queues the rest, and
// about twenty over all its connections (max_workers, less those it
// keeps): calls stuck on QEMUs starved of CPU beyond these hold every
// other call with them (make e2e: the tick's listing of the domains, which
// asks no QEMU, waited 17 s behind such calls; docs/PLATFORM.md). Two
// leave the connection three for the tick's listing, read-back and weight
// changes, and a bid change's.
const maxQEMUCalls = 2

// errUnanswered is a call still waiting on the domain's QEMU after
// askWait; it goes on, and the domain is not asked again until it ends.
// It is also a call to a QEMU not made because maxQEMUCalls others wait:
// for the caller both are a domain not read, or not set, this time.
var errUnanswered = errors.New("virt: the domain's QEMU has not answered yet")

// ask runs call on vm's domain d, one at a time per domain, and waits
// askWait for it: a call not answered by then goes on by itself (on its
// own reference to the domain) and makes asksQEMU pass over the domain
// until it ends. A call the domain's QEMU answers (qemu: statistics and
// throttles, not a cgroup weight) is not made while maxQEMUCalls others
// are in flight.
func (e *Enforcer) ask(vm string, d *libvirt.Domain, name string, qemu bool, call func(d *libvirt.Domain) error) error {
	e.mu.Lock()
	if e.asking[vm] || qemu && e.qemuCalls >= maxQEMUCalls {
		e.mu.Unlock()
		return errUnanswered
	}
	h := *d
	if err := h.Ref(); err != nil {
		e.mu.Unlock()
		return err
	}
	if e.asking == nil {
		e.asking = map[string]bool{}
	}
	e.asking[vm] = true
	if qemu {
		e.qemuCalls++
	}
	e.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		defer h.Free()
		start := time.Now()
		err := call(&h)
		e.timed(vm, name, start, err)
		e.mu.Lock()
		delete(e.asking, vm)
		if qemu {
			e.qemuCalls--
		}
		e.mu.Unlock()
		done <- err
	}()
	t := time.NewTimer(askWait)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return errUnanswered
	}
}
