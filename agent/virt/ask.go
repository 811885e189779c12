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

// errUnanswered is a call still waiting on the domain's QEMU after
// askWait; it goes on, and the domain is not asked again until it ends.
var errUnanswered = errors.New("virt: the domain's QEMU has not answered yet")

// ask runs call on vm's domain d, one at a time per domain, and waits
// askWait for it: a call not answered by then goes on by itself (on its
// own reference to the domain) and makes asksQEMU pass over the domain
// until it ends.
func (e *Enforcer) ask(vm string, d *libvirt.Domain, name string, call func(d *libvirt.Domain) error) error {
	e.mu.Lock()
	if e.asking[vm] {
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
	e.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		defer h.Free()
		start := time.Now()
		err := call(&h)
		e.timed(vm, name, start, err)
		e.mu.Lock()
		delete(e.asking, vm)
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
