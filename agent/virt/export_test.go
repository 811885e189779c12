package virt

import (
	"context"
	"errors"
	"fmt"

	"libvirt.org/go/libvirt"
)

// HeldCounts and ShapeDev are the network throttle's reading of its
// shaping's counters and its shaping of one device (tcnet.go).
var HeldCounts, ShapeDev = heldCounts, shapeDev

// ApplyListingEveryDomain is Apply as it was before the domain cache, kept
// for BenchmarkBidToLibvirt to measure the new path against: it lists every
// active domain and reads each one's metadata, then sets cpu_shares =
// q·10000 on every named domain and removes a former cap from each.
func (e *Enforcer) ApplyListingEveryDomain(_ context.Context, shares map[string]float64) error {
	doms, err := e.conn.ListAllDomains(libvirt.CONNECT_LIST_DOMAINS_ACTIVE)
	if err != nil {
		return fmt.Errorf("virt: listing domains: %w", err)
	}
	byName := map[string]*libvirt.Domain{}
	for i := range doms {
		d := &doms[i]
		if name, _, ok := managedName(d); ok {
			byName[name] = d
		} else {
			_ = d.Free()
		}
	}
	defer freeAll(byName)
	var errs []error
	for vm, q := range shares {
		d, ok := byName[vm]
		if !ok {
			errs = append(errs, fmt.Errorf("%w: %q", ErrUnknownDomain, vm))
			continue
		}
		if err := e.applyCPU(d, q, CPUShares(q), true); err != nil {
			errs = append(errs, fmt.Errorf("virt: %s cpu: %w", vm, err))
			continue
		}
		e.mu.Lock()
		e.applied[vm] = q
		e.mu.Unlock()
	}
	return errors.Join(errs...)
}
