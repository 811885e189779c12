// Package strategies holds mrmarket's spending strategies and the
// deadline algorithms behind the broker's deadline service: pure code, no
// I/O and no clock, so each is testable over a fixed input and the
// simulator runs exactly the code the broker runs.
//
// # Strategies are the allocation
//
// The registered strategies (ByName, keyed by a plan's strategy name) are
// the only way the broker computes rates. Each round, for each plan it
// runs, the broker gathers a Snapshot of the plan — what it has left to
// spend and the time left, its VMs with their hosts and idleness, and
// whatever else the strategy Reads: its workflows and active stages, its
// capped boost, its hosts' prices and its own rates there, or its job's
// state and the EDF decision — and the strategy answers with a Decision:
// a budget over a duration for each VM to fund (never more in all than the
// plan has left) and the new active stages. The broker then sends the bids
// that changed.
//
//   - fair (FairShare): the budget left, evenly over the VMs, for the time
//     left — Sandholm and Lai's baseline.
//   - workflow (WorkflowPriority): split over the workflows by weight
//     (Eq. 8), each part evenly over the workflow's VMs.
//   - stage (StagePriority): each workflow's part split over its remaining
//     stages by weight (Eq. 9), the active stage's part spent in an equal
//     slice of the time left; a stage whose VMs are all idle is done
//     (once they were seen busy, for a stage reported started).
//   - stage-bottleneck (StagePriority with Boosted): the same across
//     stages, bottleneck elimination among the active stage's VMs.
//   - bottleneck (BottleneckElimination): idle VMs give a fraction of the
//     flat rate to the busy ones (Alg. 5.1), boosts capped system-wide
//     (CapBoosts).
//   - best-response (BestResponse): the rate spread over the plan's hosts
//     against the others' rates there (§5.4).
//   - deadline (DeadlineEDF): an admitted job's share of its hosts, as EDF
//     decided over all jobs (EDF), realised as rates.
//
// The rest of the package is what those and the deadline service build
// on: WeightSplit, CapBoosts, BestResponse.Rates, MRM's queue, price and
// estimator (mrm.go, estimate.go), ARIA's bounds and slots, Jockey's
// control loop, Lin et al.'s overlap policies and the price predictions.
//
// The papers are cited by short forms (docs/PAPERS.md has them in full):
// Sandholm and Lai, "MapReduce Optimization Using Regulated Dynamic
// Prioritization" (the share rule, the spending strategies and the price
// prediction); MRM, Moshref et al.'s "MRM: Delivering Predictability and
// Service Differentiation in Shared Compute Clusters"; ARIA, Verma,
// Cherkasova and Campbell's "ARIA: Automatic Resource Inference and
// Allocation for MapReduce Environments"; Jockey, Ferguson et al.'s
// "Jockey: Guaranteed Job Latency in Data Parallel Clusters"; and Lin et
// al., Lin, Wierman, Zhang and Tan's "Joint Optimization of Overlapping
// Phases in MapReduce".
//
// # One job profile
//
// JobProfile, a MapReduce job's ARIA profile, is the one profile type of
// mrmarket, and it lives here because this package is pure (it imports
// only internal/money): the contract (internal/wire, whose job files carry
// it under their "profile" key), the YARN monitor that measures it and the
// task model that draws task times from it may all import it, where this
// package may import none of them. Each algorithm takes its view from the
// one type: ARIA's bounds and slots read it whole, Jockey's progress
// indicator its stage times (StageSecs), Lin et al.'s model its overlap
// work (OverlapWork).
package strategies

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
)

// Errors returned by the package's algorithms (estimate.go has the
// estimator's ErrTooFewJobs).
var (
	// ErrUnknown means no strategy has the name asked for.
	ErrUnknown = errors.New("strategies: unknown strategy")
	// ErrWeights means weights are missing, negative, not finite or all zero.
	ErrWeights = errors.New("strategies: weights must be finite, non-negative and not all zero")
	// ErrBestResponse means the best-response inputs are unusable.
	ErrBestResponse = errors.New("strategies: best response needs a positive budget rate, and non-negative finite prices and weights")
	// ErrInfeasible means no allocation can meet the deadline.
	ErrInfeasible = errors.New("strategies: the deadline cannot be met")
	// ErrNoTable means Jockey's controller has no C(p, a) samples.
	ErrNoTable = errors.New("strategies: Jockey needs a C(p, a) table")
	// ErrOverlapJob reports an overlap job with a negative, NaN or infinite
	// release or size (or, for SimulateOverlap, a job without map or
	// shuffle work).
	ErrOverlapJob = errors.New("strategies: invalid overlap job")
	// ErrNoHistory means a price prediction has no observations yet.
	ErrNoHistory = errors.New("strategies: no price history for this host yet")
)

// Strategy is a registered allocation rule: given a snapshot of one plan,
// what each of its VMs should spend. A strategy never allocates more in
// all than the snapshot's Remaining, funds each VM at most once, and
// leaves out what it cannot fund (a VM whose part rounds to nothing, a
// plan with no time or money left).
type Strategy interface {
	// Name is the plan strategy the strategy is registered under.
	Name() string
	// Reads says which of a snapshot's optional parts the strategy looks
	// at; the broker gathers only those.
	Reads() Reads
	// Allocate decides one plan's round.
	Allocate(s Snapshot) Decision
	// Caps is how fast it spends a plan of shape s at most (caps.go):
	// what its user signs as the plan's pace and VM share.
	Caps(s Shape) Caps
}

// Reads names the optional parts of a Snapshot.
type Reads uint8

// The optional parts of a Snapshot.
const (
	ReadsVMs       Reads = 1 << iota // VMs
	ReadsWorkflows                   // Workflows
	ReadsBoost                       // Boost
	ReadsPrices                      // Prices and OwnRates
	ReadsJob                         // Job
)

// Snapshot is one plan at one moment, as its strategy sees it. Remaining,
// Left, Stage and HostWeights are always there; the rest only when the
// strategy Reads them.
type Snapshot struct {
	// Remaining is what the plan has neither spent nor committed to bids
	// that ran, and Left the time to its end.
	Remaining money.Micro
	Left      time.Duration
	// Budget and Duration are the plan's whole budget (with adjustments)
	// and period: what a fixed split of the budget is a split of.
	Budget   money.Micro
	Duration time.Duration
	// VMs are the plan's VMs the broker knows, in the plan's order.
	VMs []VM
	// Workflows are the plan's workflows, each stage with those of its
	// VMs the broker knows; Stage is each workflow's active stage.
	Workflows []Workflow
	Stage     []int
	// Held says, per workflow, that its active stage was reported started
	// (Broker.StageStarted) and its VMs have not been seen busy since: a
	// stage whose job has not begun computing is not left for its idle
	// VMs. Nil: none held.
	Held []bool
	// Boost is the plan's bottleneck-elimination boost, capped with
	// everyone else's (CapBoosts).
	Boost float64
	// Prices is each of the plan's hosts' price (the sum of the rates of
	// every bid on it) and OwnRates the rate of the plan's bid running on
	// each of its VMs.
	Prices   map[string]float64
	OwnRates map[string]float64
	// HostWeights are best response's values of a whole host (default 1).
	HostWeights map[string]float64
	// Job is a deadline plan's job and what EDF decided for it.
	Job *Job
}

// VM is a plan's VM as a round sees it.
type VM struct {
	Name string
	Host string // where its bid goes
	Idle bool
}

// Allocation is what a round wants one VM to have: Budget over Duration
// from now, at the constant rate Budget/Duration.
type Allocation struct {
	VM       string
	Host     string
	Budget   money.Micro
	Duration time.Duration
}

// Decision is a strategy's answer for one plan: its VMs' allocations, in
// the plan's order, each workflow's active stage, and which of them are
// still held (Snapshot.Held).
type Decision struct {
	Allocs []Allocation
	Stage  []int
	Held   []bool
}

// spendable reports whether the snapshot has money and time to spend.
func (s Snapshot) spendable() bool { return s.Left > 0 && s.Remaining > 0 }

// nothing is the decision to spend nothing and stay at the same stages.
func (s Snapshot) nothing() Decision { return Decision{Stage: s.Stage, Held: s.Held} }

// registry holds the registered strategies by name.
var registry = map[string]Strategy{}

func register(ss ...Strategy) {
	for _, s := range ss {
		registry[s.Name()] = s
	}
}

func init() {
	register(FairShare{}, WorkflowPriority{}, StagePriority{}, StagePriority{Carry: true}, StagePriority{Boosted: true, Carry: true},
		BottleneckElimination{}, BestResponse{}, DeadlineEDF{})
}

// ByName returns the strategy registered as name.
func ByName(name string) (Strategy, error) {
	if s, ok := registry[name]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("%w %q (known: %v)", ErrUnknown, name, Names())
}

// Names lists the registered strategies' names, sorted.
func Names() []string { return slices.Sorted(maps.Keys(registry)) }

// FairShare spends the budget left evenly over the plan's VMs at a
// constant rate for the time left (Sandholm and Lai's baseline): budgets differ by
// at most one micro-credit and sum to what is left.
type FairShare struct{}

// Name is "fair".
func (FairShare) Name() string { return "fair" }

// Reads the plan's VMs.
func (FairShare) Reads() Reads { return ReadsVMs }

// Allocate splits s.Remaining evenly over s.VMs, in their order.
func (FairShare) Allocate(s Snapshot) Decision {
	if !s.spendable() {
		return s.nothing()
	}
	return Decision{Allocs: even(make([]Allocation, 0, len(s.VMs)), s.VMs, s.Remaining, s.Left), Stage: s.Stage}
}

// even appends total split evenly over vms for d (money.Split: the first
// parts a micro-credit larger), leaving out parts of nothing.
func even(out []Allocation, vms []VM, total money.Micro, d time.Duration) []Allocation {
	if len(vms) == 0 {
		return out
	}
	for i, part := range money.Split(total, len(vms)) {
		if part > 0 {
			out = append(out, Allocation{VM: vms[i].Name, Host: vms[i].Host, Budget: part, Duration: d})
		}
	}
	return out
}
