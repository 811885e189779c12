package wire

import (
	"errors"
	"strings"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
)

func checkAmount(what string, m money.Micro) error {
	if err := m.CheckPositive(); err != nil {
		return Errorf(ErrBadRequest, "%s %d micro-credits: %v", what, int64(m), err)
	}
	return nil
}

// ---- bank ----

// GrantRequest mints Amount into User's account (creating it). ID makes the
// grant idempotent: a repeated ID applies once and replies as the first did.
type GrantRequest struct {
	Versioned
	ID     string      `json:"id"`
	User   string      `json:"user"`
	Amount money.Micro `json:"amount_micro"`
	Memo   string      `json:"memo,omitempty"`
}

// MaxMemo bounds a memo's length.
const MaxMemo = 200

func checkMemo(m string) error {
	if len(m) > MaxMemo {
		return Errorf(ErrBadRequest, "memo longer than %d bytes", MaxMemo)
	}
	return nil
}

func (r *GrantRequest) Validate() error {
	if err := checkMemo(r.Memo); err != nil {
		return err
	}
	if err := CheckID("grant id", r.ID); err != nil {
		return err
	}
	if err := CheckName("user", r.User); err != nil {
		return err
	}
	return checkAmount("grant amount", r.Amount)
}

// GrantReply answers a GrantRequest.
type GrantReply struct {
	Transfer string      `json:"transfer"`
	User     string      `json:"user"`
	Amount   money.Micro `json:"amount_micro"`
	Balance  money.Micro `json:"balance_micro"`
	Replayed bool        `json:"replayed,omitempty"`
}

// HoldRequest moves Amount of User's money into escrow under hold ID until
// Expires. ID makes it idempotent.
type HoldRequest struct {
	Versioned
	ID      string      `json:"id"`
	User    string      `json:"user"`
	Amount  money.Micro `json:"amount_micro"`
	Expires time.Time   `json:"expires"`
	// Hosts are the hosts whose providers may capture from the hold; empty
	// means any host.
	Hosts []string `json:"hosts,omitempty"`
	Memo  string   `json:"memo,omitempty"`
	// Mandate is the user's signed spend or submit the hold funds, when a
	// broker places it: the bank holds only HoldIDFor(user, its request id),
	// no more than it allows (see mandate.go).
	Mandate *SignedRequest `json:"mandate,omitempty"`
}

// MaxHoldHosts bounds a hold's beneficiaries.
const MaxHoldHosts = 10_000

func (r *HoldRequest) Validate() error {
	if len(r.Hosts) > MaxHoldHosts {
		return Errorf(ErrBadRequest, "a hold names at most %d hosts, got %d", MaxHoldHosts, len(r.Hosts))
	}
	for _, h := range r.Hosts {
		if err := CheckName("host", h); err != nil {
			return err
		}
	}
	if err := checkMemo(r.Memo); err != nil {
		return err
	}
	if err := CheckID("hold id", r.ID); err != nil {
		return err
	}
	if err := CheckName("user", r.User); err != nil {
		return err
	}
	if r.Expires.IsZero() {
		return Errorf(ErrBadRequest, "hold needs an expiry time")
	}
	return checkAmount("hold amount", r.Amount)
}

// Hold states.
const (
	HoldOpen   = "open"
	HoldClosed = "closed"
)

// HoldInfo describes a hold. Remaining = Amount − Captured − Released.
type HoldInfo struct {
	ID       string      `json:"id"`
	User     string      `json:"user"`
	Amount   money.Micro `json:"amount_micro"`
	Captured money.Micro `json:"captured_micro"`
	Released money.Micro `json:"released_micro"`
	Expires  time.Time   `json:"expires"`
	Status   string      `json:"status"`
	Hosts    []string    `json:"hosts,omitempty"`
}

// Remaining is what the hold can still capture or release.
func (h HoldInfo) Remaining() money.Micro { return h.Amount - h.Captured - h.Released }

// HoldReply answers a HoldRequest.
type HoldReply struct {
	Hold     HoldInfo    `json:"hold"`
	Balance  money.Micro `json:"balance_micro"`
	Replayed bool        `json:"replayed,omitempty"`
}

// CaptureLeg asks to bring the total captured from Hold for VM on the batch's
// host up to Cumulative. Cumulative, not a delta: a replayed or re-issued leg
// can only ever move money once, and a leg whose Cumulative is at or below
// what was already captured moves nothing. ID is the leg's idempotency id,
// "hold/host/vm/tick".
type CaptureLeg struct {
	ID         string      `json:"id"`
	Hold       string      `json:"hold"`
	VM         string      `json:"vm"`
	Cumulative money.Micro `json:"cumulative_micro"`
	// Owner is the VM's owner on the host, when the agent knows it: the
	// bank captures only from a hold of that user.
	Owner string `json:"owner,omitempty"`
}

// CaptureBatch is one agent tick's captures: every bid the host charged.
type CaptureBatch struct {
	Versioned
	Host string       `json:"host"`
	Tick int64        `json:"tick"`
	Legs []CaptureLeg `json:"legs"`
}

// MaxLegs bounds a capture batch.
const MaxLegs = 100_000

func (b *CaptureBatch) Validate() error {
	if err := CheckName("host", b.Host); err != nil {
		return err
	}
	if b.Tick < 0 {
		return Errorf(ErrBadRequest, "negative tick %d", b.Tick)
	}
	if len(b.Legs) == 0 || len(b.Legs) > MaxLegs {
		return Errorf(ErrBadRequest, "a capture batch needs 1 to %d legs, got %d", MaxLegs, len(b.Legs))
	}
	seen := make(map[string]bool, len(b.Legs))
	for _, l := range b.Legs {
		if err := CheckID("leg id", l.ID); err != nil {
			return err
		}
		if err := CheckID("hold id", l.Hold); err != nil {
			return err
		}
		if err := CheckName("vm", l.VM); err != nil {
			return err
		}
		if err := checkAmount("cumulative capture", l.Cumulative); err != nil {
			return err
		}
		if l.Owner != "" {
			if err := CheckName("owner", l.Owner); err != nil {
				return err
			}
		}
		key := l.Hold + "\x00" + l.VM
		if seen[l.ID] || seen[key] {
			return Errorf(ErrBadRequest, "duplicate leg %q (one leg per hold and VM per batch)", l.ID)
		}
		seen[l.ID], seen[key] = true, true
	}
	return nil
}

// LegResult is the outcome of one leg. Applied is what this leg moved now;
// Captured is the total captured for (hold, host, vm) after it. Exhausted
// says the hold has nothing left: the agent must zero its bids on it. Error
// is set when the leg was refused (unknown, closed or expired hold); the other
// legs of the batch still apply.
type LegResult struct {
	ID        string      `json:"id"`
	Hold      string      `json:"hold"`
	VM        string      `json:"vm"`
	Applied   money.Micro `json:"applied_micro"`
	Captured  money.Micro `json:"captured_micro"`
	Exhausted bool        `json:"exhausted,omitempty"`
	Error     *Error      `json:"error,omitempty"`
}

// CaptureReply answers a CaptureBatch, one result per leg in order.
type CaptureReply struct {
	Legs    []LegResult `json:"legs"`
	Applied money.Micro `json:"applied_micro"`
}

// ReleaseRequest closes hold Hold of User and returns its remainder.
// Releasing a closed hold is a no-op that replies with the hold.
//
// With Amount, only that much of what the hold has left goes back and the
// hold stays open (spend --less): ID then makes it idempotent (required),
// and an Amount above what is left is refused.
type ReleaseRequest struct {
	Versioned
	Hold   string      `json:"hold"`
	User   string      `json:"user"`
	ID     string      `json:"id,omitempty"`
	Amount money.Micro `json:"amount_micro,omitempty"`
}

func (r *ReleaseRequest) Validate() error {
	if err := CheckID("hold id", r.Hold); err != nil {
		return err
	}
	if r.Amount != 0 {
		if err := checkAmount("release amount", r.Amount); err != nil {
			return err
		}
		if err := CheckID("release id", r.ID); err != nil {
			return err
		}
	}
	return CheckName("user", r.User)
}

// ReleaseReply answers a ReleaseRequest.
type ReleaseReply struct {
	Hold     HoldInfo    `json:"hold"`
	Released money.Micro `json:"released_micro"`
	Balance  money.Micro `json:"balance_micro"`
}

// BalanceRequest asks for User's account.
type BalanceRequest struct {
	Versioned
	User string `json:"user"`
}

func (r *BalanceRequest) Validate() error { return CheckName("user", r.User) }

// BalanceReply is a user's account: spendable balance, money held in open
// holds, total granted and total spent (captured from the user's holds).
type BalanceReply struct {
	User    string      `json:"user"`
	Balance money.Micro `json:"balance_micro"`
	Held    money.Micro `json:"held_micro"`
	Granted money.Micro `json:"granted_micro"`
	Spent   money.Micro `json:"spent_micro"`
	Holds   []HoldInfo  `json:"holds"`
}

// LedgerRequest asks for the whole ledger and its invariant.
type LedgerRequest struct {
	Versioned
}

func (r *LedgerRequest) Validate() error { return nil }

// Account kinds.
const (
	AccountUser     = "user"
	AccountProvider = "provider"
	AccountEscrow   = "escrow"
	AccountMint     = "mint"
)

// Account is one ledger account.
type Account struct {
	ID      string      `json:"id"`
	Kind    string      `json:"kind"`
	Balance money.Micro `json:"balance_micro"`
}

// LedgerReply is the ledger and the check of its invariant:
// Σ balances (users, providers) + Σ open holds = Σ granted, no balance below
// zero. Violations lists what is wrong; empty means the invariant holds.
type LedgerReply struct {
	Accounts   []Account   `json:"accounts"`
	Granted    money.Micro `json:"granted_micro"`
	Balances   money.Micro `json:"balances_micro"`
	OpenHolds  money.Micro `json:"open_holds_micro"`
	Violations []string    `json:"violations"`
}

// TransferRequest moves Amount from user From to user To. ID makes it
// idempotent.
type TransferRequest struct {
	Versioned
	ID     string      `json:"id"`
	From   string      `json:"from"`
	To     string      `json:"to"`
	Amount money.Micro `json:"amount_micro"`
	Memo   string      `json:"memo,omitempty"`
}

func (r *TransferRequest) Validate() error {
	if err := CheckID("transfer id", r.ID); err != nil {
		return err
	}
	if err := CheckName("from user", r.From); err != nil {
		return err
	}
	if err := CheckName("to user", r.To); err != nil {
		return err
	}
	if r.From == r.To {
		return Errorf(ErrBadRequest, "a transfer from %q to itself", r.From)
	}
	if err := checkMemo(r.Memo); err != nil {
		return err
	}
	return checkAmount("transfer amount", r.Amount)
}

// TransferReply answers a TransferRequest with the payer's new balance.
type TransferReply struct {
	Transfer string      `json:"transfer"`
	Balance  money.Micro `json:"balance_micro"`
	Replayed bool        `json:"replayed,omitempty"`
}

// FairShareUser is the income schedule user meaning "every user": the
// amount is split evenly among all user accounts each period.
const FairShareUser = "*"

// IncomeSetRequest sets (or, with Amount 0, removes) the income schedule of
// User: Amount granted every Every, exactly once per period. User "*"
// splits Amount evenly among all users each period (fair share).
type IncomeSetRequest struct {
	Versioned
	User   string      `json:"user"`
	Amount money.Micro `json:"amount_micro"`
	Every  Duration    `json:"every"`
}

// MinIncomePeriod bounds how often income is granted.
const MinIncomePeriod = time.Minute

func (r *IncomeSetRequest) Validate() error {
	if r.User != FairShareUser {
		if err := CheckName("user", r.User); err != nil {
			return err
		}
	}
	if r.Amount == 0 {
		return nil
	}
	if err := checkAmount("income amount", r.Amount); err != nil {
		return err
	}
	if r.Every.D() < MinIncomePeriod || r.Every.D() > MaxDuration {
		return Errorf(ErrBadRequest, "income period must be between %s and %s, got %s", MinIncomePeriod, MaxDuration, r.Every.D())
	}
	return nil
}

// IncomeSchedule is one income schedule.
type IncomeSchedule struct {
	User       string      `json:"user"`
	Amount     money.Micro `json:"amount_micro"`
	Every      Duration    `json:"every"`
	Anchor     time.Time   `json:"anchor"`
	LastPeriod int64       `json:"last_period"`
}

// IncomeSetReply lists the schedules after the change.
type IncomeSetReply struct {
	Schedules []IncomeSchedule `json:"schedules"`
}

// StatementRequest asks for the transfers of one account: a user's (User)
// or any account by id (Account, e.g. "provider:host-1"), newest first.
type StatementRequest struct {
	Versioned
	User    string `json:"user,omitempty"`
	Account string `json:"account,omitempty"`
	Limit   int    `json:"limit,omitempty"`
}

// MaxStatement bounds a statement's entries.
const MaxStatement = 10_000

func (r *StatementRequest) Validate() error {
	if (r.User == "") == (r.Account == "") {
		return Errorf(ErrBadRequest, "a statement needs exactly one of user or account")
	}
	if r.User != "" {
		if err := CheckName("user", r.User); err != nil {
			return err
		}
	} else if err := CheckID("account", r.Account); err != nil {
		return err
	}
	if r.Limit < 0 || r.Limit > MaxStatement {
		return Errorf(ErrBadRequest, "limit must be 0 (default 100) to %d", MaxStatement)
	}
	return nil
}

// StatementEntry is one transfer as seen from the account: Amount is
// positive for money in, negative for money out.
type StatementEntry struct {
	Transfer     string      `json:"transfer"`
	Kind         string      `json:"kind"`
	Counterparty string      `json:"counterparty"`
	Amount       money.Micro `json:"amount_micro"`
	At           time.Time   `json:"at"`
	Memo         string      `json:"memo,omitempty"`
}

// StatementReply is an account's balance and recent transfers.
type StatementReply struct {
	Account string           `json:"account"`
	Balance money.Micro      `json:"balance_micro"`
	Entries []StatementEntry `json:"entries"`
}

// Roles of principals.
const (
	RoleAdmin  = "admin"
	RoleUser   = "user"
	RoleAgent  = "agent"
	RoleBroker = "broker"
	// RoleBank signs the bank's answers that others act on (capture
	// results); it is never a payer or a payee.
	RoleBank = "bank"
)

// PrincipalRequest registers (or re-registers) the NKey public key Key as
// principal Name with Role. For an agent, Name is its host id. Cert is the
// principal record sealed by the admin key (SealPrincipal): a bank that
// knows its admin key refuses a registration without one that matches.
type PrincipalRequest struct {
	Versioned
	Key  string  `json:"key"`
	Name string  `json:"name"`
	Role string  `json:"role"`
	Cert *Sealed `json:"cert,omitempty"`
}

func (r *PrincipalRequest) Validate() error {
	if err := CheckPublicKey(r.Key); err != nil {
		return err
	}
	if err := CheckName("principal name", r.Name); err != nil {
		return err
	}
	return CheckRole(r.Role)
}

// Principal is a registered identity. Cert is its admin-sealed record
// (SealPrincipal): whoever learns a principal over the network trusts it
// only when Cert opens with the admin key (OpenPrincipal).
type Principal struct {
	Key  string  `json:"key"`
	Name string  `json:"name"`
	Role string  `json:"role"`
	Cert *Sealed `json:"cert,omitempty"`
}

// WhoisRequest asks who the NKey public key Key is.
type WhoisRequest struct {
	Versioned
	Key string `json:"key"`
}

func (r *WhoisRequest) Validate() error { return CheckPublicKey(r.Key) }

// ---- agent ----

// Bid is a spending rate on one VM: Budget over Duration, funded by Hold of
// Owner's plan. The agent starts charging when it accepts the bid.
type Bid struct {
	VM       string      `json:"vm"`
	Owner    string      `json:"owner"`
	Plan     string      `json:"plan"`
	Hold     string      `json:"hold"`
	Budget   money.Micro `json:"budget_micro"`
	Duration Duration    `json:"duration"`
	// Mandate is the owner's signed spend or submit the bid acts for (see
	// mandate.go); an agent that knows identities charges nothing without
	// it. In a BidRequest one bid of each plan carries it and the plan's
	// other bids take it from that one (a mandate naming thousands of VMs
	// travels once per request).
	Mandate *SignedRequest `json:"mandate,omitempty"`
}

// Validate checks one bid's fields.
func (b *Bid) Validate() error {
	if err := CheckName("vm", b.VM); err != nil {
		return err
	}
	if err := CheckName("owner", b.Owner); err != nil {
		return err
	}
	if err := CheckID("plan id", b.Plan); err != nil {
		return err
	}
	if err := CheckID("hold id", b.Hold); err != nil {
		return err
	}
	if err := checkAmount("bid budget", b.Budget); err != nil {
		return err
	}
	return CheckDuration(b.Duration)
}

// BidRequest changes bids on one host: Set places or replaces the bid on
// each named VM, Cancel removes the bids of Plan on the named VMs. Either
// both apply or, if any part is invalid, nothing does.
type BidRequest struct {
	Versioned
	Set    []Bid    `json:"set,omitempty"`
	Cancel []string `json:"cancel,omitempty"`
	Plan   string   `json:"plan,omitempty"` // whose bids Cancel removes
}

func (r *BidRequest) Validate() error {
	if len(r.Set) == 0 && len(r.Cancel) == 0 {
		return Errorf(ErrBadRequest, "bid request sets and cancels nothing")
	}
	seen := map[string]bool{}
	for i := range r.Set {
		if err := r.Set[i].Validate(); err != nil {
			return err
		}
		if seen[r.Set[i].VM] {
			return Errorf(ErrBadRequest, "vm %q appears twice", r.Set[i].VM)
		}
		seen[r.Set[i].VM] = true
	}
	if len(r.Cancel) > 0 {
		if err := CheckID("plan id", r.Plan); err != nil {
			return err
		}
	}
	for _, vm := range r.Cancel {
		if err := CheckName("vm", vm); err != nil {
			return err
		}
	}
	return nil
}

// VMState is one VM as its host sees it. Rate is the sum of its funded
// bids' rates, micro-credits per second (several plans may bid on one VM:
// their rates add up); Share is the fraction of the host the VM is entitled
// to; Util is the fraction of one host's capacity it used over the last
// tick; Idle means it used little of what it is entitled to (its share, and
// the CPUs it may run on). Bids are the VM's bids, one per plan, by plan id.
type VMState struct {
	VM    string  `json:"vm"`
	Owner string  `json:"owner"`
	Rate  float64 `json:"rate_micro_per_s"`
	Share float64 `json:"share"`
	Util  float64 `json:"util"`
	// Idle: the VM stayed below the agent's idle threshold of its
	// entitlement for its last k ticks.
	Idle bool    `json:"idle,omitempty"`
	Bids []VMBid `json:"bids,omitempty"`
	// Caps are the bandwidth caps (MB/s) the host's throttles give the VM
	// now, by resource (ResourceDisk, ResourceNetIn, ResourceNetOut): its
	// share of the measured capacity, re-spread each tick.
	Caps map[string]float64 `json:"caps_mb_per_s,omitempty"`
}

// Resources a host shares among its VMs.
const (
	ResourceCPU    = "cpu"
	ResourceDisk   = "disk"
	ResourceNetIn  = "net-in"  // into the VM
	ResourceNetOut = "net-out" // out of the VM
	ResourceNet    = "net"     // both directions as one link (the simulator's)
)

// How a host delivers a resource's shares.
const (
	ModeWeights  = "weights"  // the kernel divides by weights (CPU shares; blkio under BFQ)
	ModeThrottle = "throttle" // per-VM caps of the measured capacity, re-spread each tick
	ModeNone     = "none"     // not governed: the shares are not delivered
)

// ResourceMode says how a host delivers one resource's shares, so no one
// is shown a share nothing enforces.
type ResourceMode struct {
	Resource string `json:"resource"`
	Mode     string `json:"mode"`
	// Capacity is, for a throttle, the measured bandwidth the caps divide
	// (MB/s; 0 until the VMs have moved data).
	Capacity float64 `json:"capacity_mb_per_s,omitempty"`
	// Why says what decided the mode (e.g. the disk's scheduler).
	Why string `json:"why,omitempty"`
}

// VMBid is one plan's bid on a VM as its agent keeps it: Rate is its
// budget over its duration (0 once it ended), Charged what it has charged
// so far.
type VMBid struct {
	Plan    string      `json:"plan"`
	Hold    string      `json:"hold"`
	Rate    float64     `json:"rate_micro_per_s"`
	Budget  money.Micro `json:"budget_micro"`
	Charged money.Micro `json:"charged_micro"`
	Ends    time.Time   `json:"ends"`
}

// Bid is the VM's bid of plan, if it has one.
func (v *VMState) Bid(plan string) (VMBid, bool) {
	for _, b := range v.Bids {
		if b.Plan == plan {
			return b, true
		}
	}
	return VMBid{}, false
}

// HostState is a host's published state: Price is the sum of the rates of
// its funded bids (micro-credits per second), the y of Eq. 1 of Sandholm
// and Lai (Regulated Dynamic Prioritization).
type HostState struct {
	Versioned
	Host  string    `json:"host"`
	Time  time.Time `json:"time"`
	Tick  int64     `json:"tick"`
	Price float64   `json:"price_micro_per_s"`
	VMs   []VMState `json:"vms"`
	// Resources says how the host delivers each resource's shares.
	Resources []ResourceMode `json:"resources,omitempty"`
}

// Validate checks a state message received from the network.
func (s *HostState) Validate() error {
	if err := CheckName("host", s.Host); err != nil {
		return err
	}
	for i := range s.VMs {
		if err := CheckName("vm", s.VMs[i].VM); err != nil {
			return err
		}
	}
	return nil
}

// StateRequest asks an agent for its current state.
type StateRequest struct {
	Versioned
}

func (r *StateRequest) Validate() error { return nil }

// ---- broker ----

// Strategy names.
const (
	StrategyFair     = "fair"     // constant rate, the baseline
	StrategyWorkflow = "workflow" // workflow priority (Sandholm and Lai, Regulated Dynamic Prioritization, Eq. 8)
	StrategyStage    = "stage"    // stage priority (Eq. 9): each stage a fixed part of the budget
	// StrategyStageCarry is ours: stage priority that re-splits what is
	// left over the stages left, so an early stage's unspent money carries
	// forward to the later ones.
	StrategyStageCarry = "stage-carry"
	// StrategyStageBottleneck is ours: stage-carry across a workflow's
	// stages, bottleneck elimination (Boost) among the active stage's VMs.
	StrategyStageBottleneck = "stage-bottleneck"
	StrategyBottleneck      = "bottleneck"    // bottleneck elimination (Alg. 5.1)
	StrategyBestResp        = "best-response" // best response across hosts (§5.4)
)

// Strategies lists the strategy names.
var Strategies = []string{StrategyFair, StrategyWorkflow, StrategyStage, StrategyStageCarry, StrategyBottleneck, StrategyBestResp, StrategyStageBottleneck}

// StagedStrategy reports whether strategy moves a plan through its
// workflows' stages (stage priority and its variants).
func StagedStrategy(strategy string) bool {
	return strategy == StrategyStage || strategy == StrategyStageCarry || strategy == StrategyStageBottleneck
}

// WorkflowSpec is one workflow of a plan: its weight (workflow priority)
// and its stages in order (stage priority).
type WorkflowSpec struct {
	Name   string      `json:"name"`
	Weight float64     `json:"weight"`
	Stages []StageSpec `json:"stages"`
}

// StageSpec is one stage of a workflow: its weight and its VMs.
type StageSpec struct {
	Name   string   `json:"name"`
	Weight float64  `json:"weight"`
	VMs    []string `json:"vms"`
}

// SpendRequest asks the broker to spend Budget of User's money over Duration
// with Strategy, on VMs or on the VMs of Workflows (a workflow descriptor).
// ID, when given, makes the request idempotent. Boost is bottleneck
// elimination's f ∈ [0, 1); HostWeights are best response's preferences
// (default 1 per host).
type SpendRequest struct {
	Versioned
	ID          string             `json:"id,omitempty"`
	User        string             `json:"user"`
	Budget      money.Micro        `json:"budget_micro"`
	Duration    Duration           `json:"duration"`
	VMs         []string           `json:"vms,omitempty"`
	Workflows   []WorkflowSpec     `json:"workflows,omitempty"`
	Strategy    string             `json:"strategy"`
	Boost       float64            `json:"boost,omitempty"`
	HostWeights map[string]float64 `json:"host_weights,omitempty"`
}

// MaxPlanVMs bounds the VMs of one plan.
const MaxPlanVMs = 100_000

func checkWeight(what string, w float64) error {
	if !(w >= 0) || w > 1e9 {
		return Errorf(ErrBadRequest, "%s weight must be between 0 and 1e9, got %v", what, w)
	}
	return nil
}

// AllVMs lists the plan's VMs: VMs, or those of every stage of every
// workflow, each once.
func (r *SpendRequest) AllVMs() []string {
	if len(r.Workflows) == 0 {
		return r.VMs
	}
	var out []string
	seen := map[string]bool{}
	for _, w := range r.Workflows {
		for _, s := range w.Stages {
			for _, vm := range s.VMs {
				if !seen[vm] {
					seen[vm] = true
					out = append(out, vm)
				}
			}
		}
	}
	return out
}

func (r *SpendRequest) Validate() error {
	if r.ID != "" {
		if err := CheckID("plan id", r.ID); err != nil {
			return err
		}
	}
	if err := CheckName("user", r.User); err != nil {
		return err
	}
	if err := checkAmount("budget", r.Budget); err != nil {
		return err
	}
	if err := CheckDuration(r.Duration); err != nil {
		return err
	}
	if len(r.VMs) > 0 && len(r.Workflows) > 0 {
		return Errorf(ErrBadRequest, "a plan names VMs or workflows, not both")
	}
	if err := checkWorkflows(r.Workflows); err != nil {
		return err
	}
	vms := r.AllVMs()
	if len(vms) == 0 || len(vms) > MaxPlanVMs {
		return Errorf(ErrBadRequest, "a plan needs 1 to %d VMs, got %d", MaxPlanVMs, len(vms))
	}
	if err := checkWorkflowVMs(r.Workflows); err != nil {
		return err
	}
	if err := checkPlanVMs(vms, len(r.Workflows) == 0); err != nil {
		return err
	}
	if r.Budget < money.Micro(len(vms)) {
		return Errorf(ErrBadRequest, "budget %s cannot fund %d VMs (at least 0.000001 each)", r.Budget, len(vms))
	}
	if !(r.Boost >= 0 && r.Boost < 1) {
		return Errorf(ErrBadRequest, "boost must be in [0, 1), got %v", r.Boost)
	}
	var hostWeights float64
	for h, w := range r.HostWeights {
		if err := CheckName("host", h); err != nil {
			return err
		}
		if err := checkWeight("host "+h, w); err != nil {
			return err
		}
		hostWeights += w
	}
	if len(r.HostWeights) > 0 && hostWeights == 0 {
		return Errorf(ErrBadRequest, "host weights are all 0: the plan could fund no host")
	}
	return r.checkStrategy()
}

// checkWorkflows checks the weights and that no workflow or stage is
// empty, nor weighs nothing: weights all 0 would hold money that no rate
// could ever spend.
func checkWorkflows(workflows []WorkflowSpec) error {
	var total float64
	for _, w := range workflows {
		total += w.Weight
		var stages float64
		for _, st := range w.Stages {
			stages += st.Weight
		}
		if len(w.Stages) > 0 && stages == 0 {
			return Errorf(ErrBadRequest, "the stages of workflow %q all weigh 0: it could spend nothing", w.Name)
		}
	}
	if len(workflows) > 0 && total == 0 {
		return Errorf(ErrBadRequest, "the workflows all weigh 0: the plan could spend nothing")
	}
	for _, w := range workflows {
		if err := checkWeight("workflow "+w.Name, w.Weight); err != nil {
			return err
		}
		if len(w.Stages) == 0 {
			return Errorf(ErrBadRequest, "workflow %q has no stages", w.Name)
		}
		for _, st := range w.Stages {
			if err := checkWeight("stage "+st.Name, st.Weight); err != nil {
				return err
			}
			if len(st.VMs) == 0 {
				return Errorf(ErrBadRequest, "stage %q of workflow %q has no VMs", st.Name, w.Name)
			}
		}
	}
	return nil
}

// checkWorkflowVMs: a VM belongs to one workflow, but the stages of a
// workflow run one after the other and may use the same VMs.
func checkWorkflowVMs(workflows []WorkflowSpec) error {
	owner := map[string]int{}
	for w, wf := range workflows {
		for _, st := range wf.Stages {
			inStage := map[string]bool{}
			for _, vm := range st.VMs {
				if inStage[vm] {
					return Errorf(ErrBadRequest, "vm %q listed twice in stage %q", vm, st.Name)
				}
				inStage[vm] = true
				if o, ok := owner[vm]; ok && o != w {
					return Errorf(ErrBadRequest, "vm %q is in two workflows", vm)
				}
				owner[vm] = w
			}
		}
	}
	return nil
}

// checkPlanVMs checks the VMs' names and, for a plan of plain VMs
// (unique), that none is listed twice.
func checkPlanVMs(vms []string, unique bool) error {
	seen := map[string]bool{}
	for _, vm := range vms {
		if err := CheckName("vm", vm); err != nil {
			return err
		}
		if seen[vm] && unique {
			return Errorf(ErrBadRequest, "vm %q listed twice", vm)
		}
		seen[vm] = true
	}
	return nil
}

// checkStrategy checks that the strategy is known and has what it needs.
func (r *SpendRequest) checkStrategy() error {
	switch r.Strategy {
	case StrategyFair, StrategyBottleneck, StrategyBestResp, StrategyDeadline:
	case StrategyWorkflow, StrategyStage, StrategyStageCarry, StrategyStageBottleneck:
		if len(r.Workflows) == 0 {
			return Errorf(ErrBadRequest, "strategy %q needs workflows (a plan file)", r.Strategy)
		}
	default:
		return Errorf(ErrBadRequest, "unknown strategy %q (known: %s)", r.Strategy, strings.Join(Strategies, ", "))
	}
	return nil
}

// Plan states.
const (
	PlanRunning   = "running"
	PlanDone      = "done"
	PlanCancelled = "cancelled"
	PlanFailed    = "failed"
)

// PlanVM is one VM of a plan with its part of the budget.
type PlanVM struct {
	VM     string      `json:"vm"`
	Host   string      `json:"host"`
	Budget money.Micro `json:"budget_micro"`
	Rate   float64     `json:"rate_micro_per_s"`
}

// Plan is a running or finished spend plan.
type Plan struct {
	ID       string      `json:"id"`
	User     string      `json:"user"`
	Strategy string      `json:"strategy"`
	Budget   money.Micro `json:"budget_micro"`
	Duration Duration    `json:"duration"`
	Start    time.Time   `json:"start"`
	End      time.Time   `json:"end"`
	Hold     string      `json:"hold"`
	Status   string      `json:"status"`
	VMs      []PlanVM    `json:"vms"`
	// Spent, Released and Held are the bank's figures for the plan's hold
	// (wire.HoldInfo): what the agents captured so far, what went back to
	// the user, and what is still held; Spent + Released + Held = Budget
	// (the hold's amount) once the plan ended. The broker fills them from
	// the bank when it answers; Spent + Released never exceeds Budget.
	Released money.Micro `json:"released_micro"`
	Spent    money.Micro `json:"spent_micro"`
	Held     money.Micro `json:"held_micro"`
	// Figures says where Spent, Released and Held come from: "bank" (the
	// hold as the bank has it), or "estimate" (the broker's own account,
	// when the bank could not be asked; the next answer corrects it).
	Figures string `json:"figures,omitempty"`
	// Stage is the active stage of stage priority (per workflow, in order).
	Stage       []int              `json:"stage,omitempty"`
	Workflows   []WorkflowSpec     `json:"workflows,omitempty"`
	Boost       float64            `json:"boost,omitempty"`
	HostWeights map[string]float64 `json:"host_weights,omitempty"`
	// Owner is the broker replica running the plan.
	Owner string `json:"owner,omitempty"`
}

// AdjustRequest changes a running plan's budget: More adds money (a further
// hold), Less gives back part of what it has not yet spent (released when
// the plan ends). ID makes More idempotent.
type AdjustRequest struct {
	Versioned
	Plan string      `json:"plan"`
	User string      `json:"user"`
	ID   string      `json:"id"`
	More money.Micro `json:"more_micro,omitempty"`
	Less money.Micro `json:"less_micro,omitempty"`
}

// AdjustPlanID is the id of the extension an adjustment makes to its
// plan's hold.
func AdjustPlanID(plan, id string) string { return plan + "/" + id }

func (r *AdjustRequest) Validate() error {
	if err := CheckID("plan id", r.Plan); err != nil {
		return err
	}
	if err := CheckName("user", r.User); err != nil {
		return err
	}
	if err := CheckID("adjust id", r.ID); err != nil {
		return err
	}
	switch {
	case r.More != 0 && r.Less != 0, r.More == 0 && r.Less == 0:
		return Errorf(ErrBadRequest, "an adjustment is either more or less")
	case r.More != 0:
		return checkAmount("more", r.More)
	}
	return checkAmount("less", r.Less)
}

// ExtendRequest adds Amount of User's money to open hold Hold. ID makes it
// idempotent.
type ExtendRequest struct {
	Versioned
	ID     string      `json:"id"`
	Hold   string      `json:"hold"`
	User   string      `json:"user"`
	Amount money.Micro `json:"amount_micro"`
	// Mandate is the user's signed spend --more, when a broker extends:
	// the bank adds no more than it signed (see mandate.go).
	Mandate *SignedRequest `json:"mandate,omitempty"`
}

func (r *ExtendRequest) Validate() error {
	if err := CheckID("extend id", r.ID); err != nil {
		return err
	}
	if err := CheckID("hold id", r.Hold); err != nil {
		return err
	}
	if err := CheckName("user", r.User); err != nil {
		return err
	}
	return checkAmount("extend amount", r.Amount)
}

// SpendReply answers a SpendRequest.
type SpendReply struct {
	Plan Plan `json:"plan"`
}

// CancelRequest ends User's plan now and releases what it has not spent.
// ID names the request (cancelling is idempotent whatever it is).
type CancelRequest struct {
	Versioned
	Plan string `json:"plan"`
	User string `json:"user"`
	ID   string `json:"id,omitempty"`
}

func (r *CancelRequest) Validate() error {
	if err := CheckID("plan id", r.Plan); err != nil {
		return err
	}
	if r.ID != "" {
		if err := CheckID("cancel id", r.ID); err != nil {
			return err
		}
	}
	return CheckName("user", r.User)
}

// PlansRequest lists plans, of one user when User is set.
type PlansRequest struct {
	Versioned
	User string `json:"user,omitempty"`
}

func (r *PlansRequest) Validate() error {
	if r.User == "" {
		return nil
	}
	return CheckName("user", r.User)
}

// PlansReply answers a PlansRequest.
type PlansReply struct {
	Plans []Plan `json:"plans"`
}

// PriceRequest asks for host prices, of one host when Host is set.
type PriceRequest struct {
	Versioned
	Host string `json:"host,omitempty"`
}

func (r *PriceRequest) Validate() error {
	if r.Host == "" {
		return nil
	}
	return CheckName("host", r.Host)
}

// HostPrice is one host's price as the broker last heard it.
type HostPrice struct {
	Host    string    `json:"host"`
	Price   float64   `json:"price_micro_per_s"`
	VMs     int       `json:"vms"`
	Funded  int       `json:"funded"`
	Updated time.Time `json:"updated"`
	// Retired: the host's agent key was revoked (not rotated): the host is
	// down, its VMs are offered to nobody and no bid goes there.
	Retired bool `json:"retired,omitempty"`
}

// PriceReply answers a PriceRequest, hosts sorted by id.
type PriceReply struct {
	Hosts []HostPrice `json:"hosts"`
}

// VMsRequest lists VMs, filtered by owner and host when set.
type VMsRequest struct {
	Versioned
	Owner string `json:"owner,omitempty"`
	Host  string `json:"host,omitempty"`
}

func (r *VMsRequest) Validate() error {
	if r.Owner != "" {
		if err := CheckName("owner", r.Owner); err != nil {
			return err
		}
	}
	if r.Host != "" {
		return CheckName("host", r.Host)
	}
	return nil
}

// HostVM is a VM with the host it runs on.
type HostVM struct {
	Host string `json:"host"`
	VMState
	// Resources is how the VM's host delivers each resource's shares.
	Resources []ResourceMode `json:"resources,omitempty"`
}

// VMsReply answers a VMsRequest, sorted by host then VM.
type VMsReply struct {
	VMs []HostVM `json:"vms"`
}

// What-if queries of the prediction strategy.
const (
	WhatIfPerformance = "performance" // given spending and guarantee
	WhatIfPrice       = "price"       // given performance and guarantee
	WhatIfGuarantee   = "guarantee"   // given spending and performance
)

// PredictRequest asks a what-if question about Host from its price history:
// given two of Spending (a rate, micro-credits per second), Performance (a
// share of the host, 0..1) and Guarantee (a probability, 0..1), the third.
type PredictRequest struct {
	Versioned
	Host        string  `json:"host"`
	Query       string  `json:"query"`
	Spending    float64 `json:"spending_micro_per_s,omitempty"`
	Performance float64 `json:"performance,omitempty"`
	Guarantee   float64 `json:"guarantee,omitempty"`
}

func (r *PredictRequest) Validate() error {
	if err := CheckName("host", r.Host); err != nil {
		return err
	}
	in01 := func(what string, v float64) error {
		if !(v > 0 && v < 1) {
			return Errorf(ErrBadRequest, "%s must be between 0 and 1 (exclusive), got %v", what, v)
		}
		return nil
	}
	pos := func(what string, v float64) error {
		if !(v > 0) || v > 1e15 {
			return Errorf(ErrBadRequest, "%s must be a positive rate, got %v", what, v)
		}
		return nil
	}
	switch r.Query {
	case WhatIfPerformance:
		return errors.Join(pos("spending", r.Spending), in01("guarantee", r.Guarantee))
	case WhatIfPrice:
		return errors.Join(in01("performance", r.Performance), in01("guarantee", r.Guarantee))
	case WhatIfGuarantee:
		return errors.Join(pos("spending", r.Spending), in01("performance", r.Performance))
	}
	return Errorf(ErrBadRequest, "unknown what-if query %q (performance, price, guarantee)", r.Query)
}

// PredictReply answers with all three quantities and the price statistics
// behind them.
type PredictReply struct {
	Host         string  `json:"host"`
	Observations int64   `json:"observations"`
	MeanPrice    float64 `json:"mean_price_micro_per_s"`
	StdDevPrice  float64 `json:"stddev_price_micro_per_s"`
	Spending     float64 `json:"spending_micro_per_s"`
	Performance  float64 `json:"performance"`
	Guarantee    float64 `json:"guarantee"`
}
