package agent

import (
	"context"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// VM is a virtual machine on the host and the user who owns it.
type VM struct {
	ID    string
	Owner string
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
	// Usage is each VM's cumulative CPU time.
	Usage(ctx context.Context) (map[string]time.Duration, error)
}

// Capturer sends capture batches to the bank (bank.Client does).
type Capturer interface {
	Capture(ctx context.Context, batch *wire.CaptureBatch) (wire.CaptureReply, error)
}

// Publisher publishes the host's state each tick.
type Publisher interface {
	Publish(ctx context.Context, st wire.HostState) error
}
