package agent

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// VM is a virtual machine on the host and the user who owns it. CPUs is
// how many of the host's CPUs it can run on at once (its vCPUs, fewer if
// pinned to fewer host CPUs); 0 means all of them. It bounds what the VM
// can use, so it bounds its entitlement (see the package doc, "Idle").
type VM struct {
	ID    string
	Owner string
	CPUs  float64
}

// Enforcer is how an agent sees and governs its host's VMs. The libvirt
// enforcer and SimEnforcer implement it.
type Enforcer interface {
	// VMs lists the host's VMs.
	VMs(ctx context.Context) ([]VM, error)
	// Apply enforces shares (VM id → fraction of the host, summing to 1).
	Apply(ctx context.Context, shares map[string]float64) error
	// Applied reads back the shares in force, for the reconcile pass.
	Applied(ctx context.Context) (map[string]float64, error)
	// Usage is each VM's cumulative CPU time: what its guest ran, without
	// its emulator's own threads where the enforcer can tell them apart.
	Usage(ctx context.Context) (map[string]time.Duration, error)
}

// IOMeter is an Enforcer that also counts the I/O each VM does on the
// resources the host shares by the same weights (disk, network), so that a
// VM waiting on its disk or network is busy, not idle: the idle rule —
// and so bottleneck elimination and stage priority, which move money away
// from idle VMs — looks at every governed resource, not the CPU alone.
type IOMeter interface {
	// IOUsage is each VM's cumulative I/O per resource, in MB.
	IOUsage(ctx context.Context) (map[string]IOUse, error)
	// IOCapacity is the host's bandwidth per resource in MB/s; 0 for a
	// resource it does not share.
	IOCapacity() IOUse
}

// WaitMeter is an Enforcer that also counts the time each VM's vCPUs were
// runnable but not running, waiting for a host CPU (the steal time its
// guest sees), so that the idle rule tells a VM starved of CPU — by
// processes outside the market on an overcommitted host — from one that
// wants none (see the package doc, "Idle").
type WaitMeter interface {
	// CPUWait is each VM's cumulative vCPU wait; a VM it cannot say is
	// absent.
	CPUWait(ctx context.Context) (map[string]time.Duration, error)
}

// Rebalancer is an Enforcer that delivers some resources' shares by
// throttles (see Throttle): every tick, after measuring, the agent hands it
// the shares in force, and it re-spreads the caps over the VMs by what
// each moved since; it returns each VM's caps (MB/s by resource, see
// wire.ResourceDisk …).
type Rebalancer interface {
	Rebalance(ctx context.Context, shares map[string]float64) (map[string]map[string]float64, error)
}

// ModeReporter is an Enforcer that says how it delivers each resource's
// shares (wire.ModeWeights, ModeThrottle, ModeNone), which the agent
// publishes with the host's state: no one is shown a share nothing
// enforces.
type ModeReporter interface {
	Modes() []wire.ResourceMode
}

// IOUse is an amount per I/O resource: MB moved, or MB/s.
type IOUse struct{ Disk, Net float64 }

// Capturer sends capture batches to the bank (bank.Client does).
type Capturer interface {
	Capture(ctx context.Context, batch *wire.CaptureBatch) (wire.CaptureReply, error)
}

// Publisher publishes the host's state each tick.
type Publisher interface {
	Publish(ctx context.Context, st wire.HostState) error
}

// enforce applies the shares the book calls for. It reads them under mu
// only once it holds enforceMu, so whichever call applies last applies the
// newest set: a stale set never overwrites a newer one. With reconcile (the
// tick's level-triggered pass) it first reads back what is in force and
// applies only on a difference; a difference while the set is the one last
// applied is drift, changed behind the agent's back, and counted.
func (a *Agent) enforce(ctx context.Context, reconcile bool, l *laps) error {
	a.enforceMu.Lock()
	defer a.enforceMu.Unlock()
	l.lap("apply_wait")
	a.mu.Lock()
	want := a.desired
	a.mu.Unlock()
	if reconcile && sameShares(want, a.applied) {
		got, err := a.cfg.Enforcer.Applied(ctx)
		l.lap("read_back")
		if err == nil {
			changed, missing := compareShares(want, got)
			if len(changed) == 0 && !missing {
				// A VM found that want does not name is new since the
				// listing: the next tick's takes it in.
				return nil
			}
			if len(changed) > 0 {
				a.cfg.Metrics.Error("agent", "drift")
				a.cfg.Logger.Warn("agent: shares changed behind the agent's back; repairing", "host", a.cfg.Host, "vms", changed, "want", want, "found", got)
			}
		}
	}
	err := a.cfg.Enforcer.Apply(ctx, want)
	for gone := goneVMs(err); len(gone) > 0; gone = goneVMs(err) {
		// Deleted since the list the shares came from: dropped, and the
		// others' shares (which take up what it had) applied at once
		// rather than at the next tick's listing.
		var dropped bool
		if want, dropped = a.drop(gone); !dropped {
			break
		}
		a.cfg.Logger.Info("agent: VM gone since it was listed; dropped until it is listed again", "host", a.cfg.Host, "vms", gone)
		err = a.cfg.Enforcer.Apply(ctx, want)
	}
	l.lap("apply")
	if err != nil {
		return fmt.Errorf("agent %s: applying shares: %w", a.cfg.Host, err)
	}
	a.applied = want
	return nil
}

// GoneError is how an Enforcer's Apply reports a VM it was given that no
// longer exists (deleted after it was listed), having applied the others.
type GoneError struct {
	VM  string
	Err error // the Enforcer's own error for it
}

func (e *GoneError) Error() string { return fmt.Sprintf("VM %q is gone: %v", e.VM, e.Err) }
func (e *GoneError) Unwrap() error { return e.Err }

// goneVMs are the VMs err reports gone (GoneError), anywhere in its tree.
func goneVMs(err error) []string {
	var out []string
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case *GoneError:
			out = append(out, e.VM)
		case interface{ Unwrap() []error }:
			for _, err := range e.Unwrap() {
				walk(err)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return out
}

// drop takes gone out of the VM list, as a listing without them would
// (their bids settled and dropped), and gives the shares of the rest; false
// if none of them was listed.
func (a *Agent) drop(gone []string) (map[string]float64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	list := make([]VM, 0, len(a.vms))
	for _, vm := range a.vms {
		if !slices.Contains(gone, vm.ID) {
			list = append(list, vm)
		}
	}
	if len(list) == len(a.vms) {
		return a.desired, false
	}
	now := a.cfg.Now()
	a.setVMs(list, now)
	a.desired = Shares(a.vmIDs(), a.rates(now))
	return a.desired, true
}

// compareShares lists the VMs of want whose share in got differs (sorted),
// and says whether got lacks one of want's VMs (gone since the listing).
func compareShares(want, got map[string]float64) (changed []string, missing bool) {
	for vm, q := range want {
		p, ok := got[vm]
		switch {
		case !ok:
			missing = true
		case math.Abs(p-q) > 1e-9:
			changed = append(changed, vm)
		}
	}
	slices.Sort(changed)
	return changed, missing
}

func sameShares(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for vm, q := range a {
		p, ok := b[vm]
		if !ok || math.Abs(p-q) > 1e-9 {
			return false
		}
	}
	return true
}
