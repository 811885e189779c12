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

// maxStuck is how many calls to QEMUs may be left waiting past askWait at
// once, over all domains, before no other is made: each holds one of the
// workers libvirtd shares among all its connections (max_workers 20, less
// those it keeps; sixteen stuck calls held every call of every connection,
// docs/PLATFORM.md).
const maxStuck = 8

// askTogether is how many domains a tick reads or sets at once
// (eachAtOnce).
const askTogether = 4

// errUnanswered is a call still waiting on the domain's QEMU after
// askWait; it goes on, and the domain is not asked again until it ends.
// It is also a call to a QEMU not made because maxStuck others wait: for
// the caller both are a domain not read, or not set, this time.
var errUnanswered = errors.New("virt: the domain's QEMU has not answered yet")

// ask runs call on vm's domain d, one at a time per domain, and waits
// askWait for it: a call not answered by then goes on by itself (on its
// own reference to the domain) and makes asksQEMU pass over the domain
// until it ends. A call the domain's QEMU answers (qemu: statistics and
// throttles, not a cgroup weight) is made on a connection of the domain's
// own (qemuConn), and not while maxStuck others wait.
func (e *Enforcer) ask(vm string, d *libvirt.Domain, name string, qemu bool, call func(d *libvirt.Domain) error) error {
	var uuid string
	if qemu && !e.borrowed {
		var err error
		if uuid, err = d.GetUUIDString(); err != nil { // the handle's own: no call
			return err
		}
	}
	e.mu.Lock()
	if e.asking[vm] || qemu && e.stuck >= maxStuck {
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
	var ended, late bool // under e.mu
	done := make(chan error, 1)
	go func() {
		defer h.Free()
		start := time.Now()
		var err error
		if uuid != "" {
			err = e.onQEMUConn(vm, uuid, call)
		} else {
			err = call(&h)
		}
		e.timed(vm, name, start, err)
		e.mu.Lock()
		delete(e.asking, vm)
		if late {
			e.stuck--
		}
		ended = true
		e.mu.Unlock()
		done <- err
	}()
	t := time.NewTimer(askWait)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		e.mu.Lock()
		if !ended && qemu {
			late = true
			e.stuck++
		}
		e.mu.Unlock()
		return errUnanswered
	}
}

// onQEMUConn runs call on vm's domain (by its UUID) through vm's own
// connection for the calls its QEMU answers, opening it the first time.
// While a call waits on a starved QEMU, libvirt holds other calls of its
// connection, seemingly at random (docs/PLATFORM.md): on the agent's main
// connection it held the tick's listing, read-back and weights (make e2e:
// 17-24 s), and on one connection shared by all domains' QEMU calls, a
// few stuck on idle guests froze every guest's disk cap (a cap left on a
// busy guest for 10 s, run 33). ask makes one call per domain at a time,
// so a domain's connection waits only on its own QEMU.
func (e *Enforcer) onQEMUConn(vm, uuid string, call func(d *libvirt.Domain) error) error {
	e.mu.Lock()
	conn := e.qemu[vm]
	e.mu.Unlock()
	if conn == nil {
		var err error
		if conn, err = libvirt.NewConnect(e.cfg.URI); err != nil {
			return err
		}
		e.mu.Lock()
		if e.qemu == nil {
			e.qemu = map[string]*libvirt.Connect{}
		}
		e.qemu[vm] = conn
		e.mu.Unlock()
	}
	d, err := conn.LookupDomainByUUIDString(uuid)
	if err != nil {
		return err
	}
	defer d.Free()
	return call(d)
}

// closeQEMUConns closes the QEMU connections of the domains not in keep
// (all of them when keep is nil) that no call is using.
func (e *Enforcer) closeQEMUConns(keep map[string]*libvirt.Domain) {
	e.mu.Lock()
	var gone []*libvirt.Connect
	for vm, conn := range e.qemu {
		if _, ok := keep[vm]; (keep == nil || !ok) && !e.asking[vm] {
			gone = append(gone, conn)
			delete(e.qemu, vm)
		}
	}
	e.mu.Unlock()
	for _, conn := range gone {
		_, _ = conn.Close()
	}
}

// eachAtOnce runs do for every one of items (a domain each), askTogether
// at a time: each of do's calls to a QEMU waits askWait at most (ask), so
// reading or setting a host's domains waits that about once per
// askTogether of them, not once per domain (make e2e: a tick's I/O reading
// took 1.3 s with four slow QEMUs asked one after another).
func eachAtOnce[T any](items []T, do func(T)) {
	work := make(chan T)
	var wg sync.WaitGroup
	for range min(askTogether, len(items)) {
		wg.Go(func() {
			for x := range work {
				do(x)
			}
		})
	}
	for _, x := range items {
		work <- x
	}
	close(work)
	wg.Wait()
}
