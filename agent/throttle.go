package agent

import "math"

// Throttles are how the agent delivers a resource's shares where the
// device cannot weigh its users (a disk under mq-deadline ignores blkio
// weights; see agent/virt): each VM gets a bandwidth cap, and the caps are
// re-spread every tick over the VMs using the device, so the shares hold
// among them and an idle VM's part is not wasted — work-conserving by
// redistribution, one tick late. The device's bandwidth is not configured
// but measured (Bandwidth), since the caps only divide it in proportion
// while they add up to no more than it delivers.

// idleProbe is the part of its proportional cap an idle VM keeps, so that
// it can show it wants the device again (and be busy the next tick).
const idleProbe = 0.1

// Throttles divides capacity (bytes or MB per second) among the VMs of
// shares: the idle ones keep idleProbe of their proportional part, the busy
// ones divide the rest in proportion to their shares. With none busy every
// VM has its proportional part. VMs without a share get nothing.
func Throttles(capacity float64, shares map[string]float64, busy map[string]bool) map[string]float64 {
	caps := make(map[string]float64, len(shares))
	var total, busyTotal float64
	for vm, q := range shares {
		if q > 0 {
			total += q
			if busy[vm] {
				busyTotal += q
			}
		}
	}
	if total <= 0 || !(capacity > 0) {
		return caps
	}
	if busyTotal == 0 {
		for vm, q := range shares {
			if q > 0 {
				caps[vm] = capacity * q / total
			}
		}
		return caps
	}
	left := capacity
	for vm, q := range shares {
		if q > 0 && !busy[vm] {
			caps[vm] = idleProbe * capacity * q / total
			left -= caps[vm]
		}
	}
	for vm, q := range shares {
		if q > 0 && busy[vm] {
			caps[vm] = left * q / busyTotal
		}
	}
	return caps
}

// Bandwidth estimates a device's bandwidth from what the throttled VMs
// move under their caps: while the busy VMs use all the caps allow (at
// least bindAt of it), the device may do more and the estimate rises by
// Probe a tick; when they move less although busy, the device (or their
// own demand) is the limit and the estimate falls to what they moved. It
// so alternates between what the device delivers and Probe above it: the
// caps bind, and a tick of overshoot moves a share by about Probe × its
// complement (3:1 with Probe 0.1: 0.725 instead of 0.75 for that tick).
type Bandwidth struct {
	Value float64 // the estimate; set it to a first guess (or a measured alone run)
	Probe float64 // the relative step up while the caps bind; default 0.1
}

// bindAt is the part of their caps busy VMs must move for the caps to
// count as binding.
const bindAt = 0.97

// Observe updates the estimate from one tick: moved is what the busy VMs
// moved per second, allowed what their caps allowed them. It returns the
// new estimate.
func (b *Bandwidth) Observe(moved, allowed float64) float64 {
	probe := b.Probe
	if probe <= 0 {
		probe = 0.1
	}
	switch {
	case !(moved > 0) || !(allowed > 0) || math.IsInf(moved, 0) || math.IsInf(allowed, 0):
		// Nothing busy, or nothing to learn from.
	case moved >= bindAt*allowed:
		b.Value = max(b.Value, allowed) * (1 + probe)
	default:
		b.Value = moved
	}
	return b.Value
}
