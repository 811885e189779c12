// Package strategies holds mrmarket's spending strategies: pure functions
// from a snapshot of a plan's inputs to per-VM allocations. Nothing here does
// I/O or reads a clock; the broker gathers the inputs, calls a Strategy, and
// turns the allocations into bids. That keeps every strategy testable over a
// fixed snapshot and lets the simulator run exactly the code the broker runs.
//
// Today there is one strategy, the constant-rate "fair" split of seed 003:
// the budget divided evenly over the plan's VMs, each spent at a constant
// rate for the whole duration. The [strategies] issue adds workflow and stage
// priority, bottleneck elimination and best response behind the same
// interface.
package strategies

import (
	"errors"
	"fmt"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
)

// Errors returned by strategies.
var (
	// ErrNoTargets means a plan named no VMs.
	ErrNoTargets = errors.New("strategies: a plan needs at least one VM")
	// ErrBudget means the budget cannot give every VM at least one micro-credit.
	ErrBudget = errors.New("strategies: budget too small for the plan's VMs")
	// ErrDuration means the plan's duration is not positive.
	ErrDuration = errors.New("strategies: duration must be greater than zero")
	// ErrUnknown means no strategy has the name asked for.
	ErrUnknown = errors.New("strategies: unknown strategy")
)

// Target is a VM a plan may spend on, and the host it runs on.
type Target struct {
	VM   string
	Host string
}

// Allocation is the part of a plan's budget a VM spends over the plan's
// duration; its constant rate is Budget/Duration.
type Allocation struct {
	VM     string
	Host   string
	Budget money.Micro
}

// Input is everything a strategy may look at.
type Input struct {
	Budget   money.Micro
	Duration time.Duration
	Targets  []Target
}

func (in Input) check() error {
	switch {
	case len(in.Targets) == 0:
		return ErrNoTargets
	case in.Duration <= 0:
		return ErrDuration
	case in.Budget < money.Micro(len(in.Targets)):
		return fmt.Errorf("%w: %s for %d VMs", ErrBudget, in.Budget, len(in.Targets))
	}
	return nil
}

// Strategy turns a plan's inputs into allocations whose budgets sum exactly
// to the plan's budget.
type Strategy interface {
	Name() string
	Plan(in Input) ([]Allocation, error)
}

// FairShare spends the budget evenly over the targets at a constant rate
// (seed 003's baseline): budgets differ by at most one micro-credit and sum
// exactly to the plan's budget.
type FairShare struct{}

// Name is "fair".
func (FairShare) Name() string { return "fair" }

// Plan splits in.Budget evenly over in.Targets, in their order.
func (FairShare) Plan(in Input) ([]Allocation, error) {
	if err := in.check(); err != nil {
		return nil, err
	}
	parts := money.Split(in.Budget, len(in.Targets))
	out := make([]Allocation, len(in.Targets))
	for i, t := range in.Targets {
		out[i] = Allocation{VM: t.VM, Host: t.Host, Budget: parts[i]}
	}
	return out, nil
}

// ByName returns the strategy called name.
func ByName(name string) (Strategy, error) {
	switch name {
	case "fair":
		return FairShare{}, nil
	}
	return nil, fmt.Errorf("%w %q (known: fair)", ErrUnknown, name)
}
