package virt

import (
	"errors"
	"sync"
	"time"

	"libvirt.org/go/libvirt"
)

// askWait is how long a tick waits for one call a domain's QEMU must
// answer (asksQEMU): a domain whose QEMU loses the CPU during a call (the
// host turning busy) would otherwise hold the tick for as long.
const askWait = 250 * time.Millisecond

// maxQEMUCalls is how many calls that a QEMU must answer may be in flight
// at once, over all domains: fewer than the five calls of one connection
// libvirtd serves at a time (max_client_requests), so that a call on the
// connection for them (Enforcer.qemu) is served while others are stuck
// on starved QEMUs, and a small part of the workers libvirtd shares among
// all its connections (max_workers).
const maxQEMUCalls = 4

// errUnanswered is a call still waiting on the domain's QEMU after
// askWait; it goes on, and the domain is not asked again until it ends.
// It is also a call to a QEMU not made because maxQEMUCalls others wait:
// for the caller both are a domain not read, or not set, this time.
var errUnanswered = errors.New("virt: the domain's QEMU has not answered yet")

// ask runs call on vm's domain d, one at a time per domain, and waits
// askWait for it: a call not answered by then goes on by itself (on its
// own reference to the domain) and makes asksQEMU pass over the domain
// until it ends. A call the domain's QEMU answers (qemu: statistics and
// throttles, not a cgroup weight) is made on the enforcer's connection
// for such calls, and not while maxQEMUCalls others are in flight.
func (e *Enforcer) ask(vm string, d *libvirt.Domain, name string, qemu bool, call func(d *libvirt.Domain) error) error {
	var uuid string
	if qemu && e.qemu != e.conn {
		var err error
		if uuid, err = d.GetUUIDString(); err != nil { // the handle's own: no call
			return err
		}
	}
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
		var err error
		if uuid != "" {
			var qd *libvirt.Domain
			if qd, err = e.qemu.LookupDomainByUUIDString(uuid); err == nil {
				err = call(qd)
				_ = qd.Free()
			}
		} else {
			err = call(&h)
		}
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

// eachAtOnce runs do for every one of vms, maxQEMUCalls at a time: each
// of do's calls to a QEMU waits askWait at most (ask), so reading or
// setting a host's domains waits that about once per maxQEMUCalls of
// them, not once per domain (make e2e: a tick's I/O reading took 1.3 s
// with four slow QEMUs asked one after another).
func eachAtOnce(vms []string, do func(vm string)) {
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(maxQEMUCalls, len(vms)) {
		wg.Go(func() {
			for vm := range work {
				do(vm)
			}
		})
	}
	for _, vm := range vms {
		work <- vm
	}
	close(work)
	wg.Wait()
}
