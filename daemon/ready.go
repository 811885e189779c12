package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/obs"
)

// What each daemon depends on, for /readyz (obs.Server.Ready): its NATS
// connection, and the bank's store (SQL), the broker's (the plans bucket)
// or the agent's libvirt. Each check is one short round trip, bounded by
// readyTimeout, as a prober calls /readyz every few seconds.

// readyTimeout bounds one dependency's check.
const readyTimeout = 2 * time.Second

// NATSReady checks that nc is connected (nil: no connection yet).
func NATSReady(nc *nats.Conn) obs.HealthFunc {
	return func() error {
		if nc == nil {
			return fmt.Errorf("not connected yet")
		}
		if !nc.IsConnected() {
			return fmt.Errorf("connection %s is %s", nc.Opts.Name, nc.Status())
		}
		return nil
	}
}

// Ready is what the bank depends on: NATS and its store.
func (b *Bank) Ready() []obs.Dependency {
	return []obs.Dependency{{Name: obs.DepNATS, Check: NATSReady(b.NC)}, {Name: obs.DepStore, Check: b.Healthy}}
}

// Ready is what a broker replica depends on: NATS and the plans bucket.
func (b *Broker) Ready() []obs.Dependency {
	return []obs.Dependency{{Name: obs.DepNATS, Check: NATSReady(b.NC)}, {Name: obs.DepStore, Check: b.StoreReady}}
}

// StoreReady checks that the plans bucket answers.
func (b *Broker) StoreReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if _, err := b.Assets.Plans.Status(ctx); err != nil {
		return fmt.Errorf("plans bucket: %w", err)
	}
	return nil
}

// Pinger is an enforcer that can say whether its hypervisor answers
// (libvirt's connection).
type Pinger interface {
	Ping() error
}

// Ready is what an agent depends on: NATS and its host's hypervisor —
// libvirt, or nothing for a simulated host.
func (a *Agent) Ready() []obs.Dependency {
	libvirt := obs.Dependency{Name: obs.DepLibvirt, Unused: "a simulated host"}
	if p, ok := a.cfg.Enforcer.(Pinger); ok {
		libvirt = obs.Dependency{Name: obs.DepLibvirt, Check: p.Ping}
	}
	return []obs.Dependency{{Name: obs.DepNATS, Check: NATSReady(a.NC)}, libvirt}
}
