package wire

import (
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
)

// Subjects of the hosts' agents and of their published states, and the
// JetStream bucket that keeps the last state of every host.
const (
	// AllHostStates matches every host's state publication.
	AllHostStates = "mrm.v1.host.*.state"

	// BucketHosts is the JetStream KV bucket holding the last state of every
	// host, keyed by host id.
	BucketHosts = "MRM_HOSTS"
)

// AgentBidSubject is the subject on which host's agent takes bid changes.
func AgentBidSubject(host string) string { return "mrm.v1.agent." + host + ".bid" }

// AgentStateSubject is the subject on which host's agent answers state requests.
func AgentStateSubject(host string) string { return "mrm.v1.agent." + host + ".state" }

// HostStateSubject is the subject on which host's agent publishes its state every tick.
func HostStateSubject(host string) string { return "mrm.v1.host." + host + ".state" }

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
	// package mandate); an agent that knows identities charges nothing
	// without it. In a BidRequest one bid of each plan carries it and the plan's
	// other bids take it from that one (a mandate naming thousands of VMs
	// travels once per request).
	Mandate *SignedRequest `json:"mandate,omitempty"`
	// More are the owner's signed spend --more of the plan: each adds to
	// what the plan may spend per second, so an agent takes a faster bid
	// only with them. Carried like Mandate, by one bid of each plan.
	More []SignedRequest `json:"more,omitempty"`
}

// MaxMore bounds the adjustments a bid carries.
const MaxMore = 1000

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
	if len(b.More) > MaxMore {
		return Errorf(ErrBadRequest, "a bid carries at most %d adjustments, got %d", MaxMore, len(b.More))
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

// BidBatch is bid changes for one host, each a plan's (a BidRequest),
// in one signed message: a broker's round sends one per host however many
// of its plans change bids there, so a host costs a round one signature,
// one check and one answer rather than one per plan. Each change is taken
// or refused on its own, as it would be alone; BidResults answers each.
type BidBatch struct {
	Versioned
	Changes []BidRequest `json:"changes"`
}

// MaxBidBatch bounds the changes in one batch: a host's plans in a round.
const MaxBidBatch = 10000

// Validate checks the batch's shape; each change is checked on its own
// where it is applied, so one bad change refuses only itself.
func (b *BidBatch) Validate() error {
	switch {
	case len(b.Changes) == 0:
		return Errorf(ErrBadRequest, "bid batch carries no change")
	case len(b.Changes) > MaxBidBatch:
		return Errorf(ErrBadRequest, "a bid batch carries at most %d changes, got %d", MaxBidBatch, len(b.Changes))
	}
	for i := range b.Changes {
		if b.Changes[i].V != b.V {
			return Errorf(ErrBadRequest, "change %d is of version %d, its batch of %d", i, b.Changes[i].V, b.V)
		}
	}
	return nil
}

// OneBid is a batch of req alone, as a client sends a single change.
func OneBid(req *BidRequest) *BidBatch {
	c := *req
	c.V = Version
	return &BidBatch{Changes: []BidRequest{c}}
}

// BidResults answers a BidBatch: Errors[i] is why change i was refused,
// nil where it was taken.
type BidResults struct {
	Errors []*Error `json:"errors"`
}

// Err is change i's refusal, nil if it was taken (or the answer has no
// entry for it: a malformed answer refuses every change).
func (r *BidResults) Err(i int) error {
	if i >= len(r.Errors) {
		return Errorf(ErrInternal, "the answer has %d results, change %d has none", len(r.Errors), i)
	}
	if e := r.Errors[i]; e != nil {
		return e
	}
	return nil
}

// StateRequest asks an agent for its current state.
type StateRequest struct {
	Versioned
}

func (r *StateRequest) Validate() error { return nil }

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

// VMState is one VM as its host sees it. Rate is the sum of its funded
// bids' rates, micro-credits per second (several plans may bid on one VM:
// their rates add up); Share is the fraction of the host the VM is entitled
// to; Util is the fraction of one host's capacity it used over the last
// tick; Idle means it used, or waited for, little of what it is entitled to
// (its share, and the CPUs it may run on): a VM starved of CPU is not idle.
// Bids are the VM's bids, one per plan, by plan id.
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
	// Short are the resources the VM wanted more of than it got, and got
	// less of than its share entitles it to (by more than 0.05 of the
	// resource, for 5 s or more): the agent says where it does not
	// deliver what the VM pays for.
	Short []Shortfall `json:"short,omitempty"`
}

// Shortfall is a VM's share of a resource delivered short, as its agent
// measured it: Entitled is the part of the resource its share gives it
// (of the host's CPUs; of what the VMs using a device moved), Delivered
// the part it got, both in the last tick, and Since when it began.
type Shortfall struct {
	Resource  string    `json:"resource"`
	Entitled  float64   `json:"entitled"`
	Delivered float64   `json:"delivered"`
	Since     time.Time `json:"since"`
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

// VMBid is one plan's bid on a VM as its agent keeps it: Rate is its
// budget over its duration (0 once it ended), Charged what its plan's hold
// has been charged on the VM so far — across the plan's re-bids, each of
// which starts a bid afresh with what is left.
type VMBid struct {
	Plan    string      `json:"plan"`
	Hold    string      `json:"hold"`
	Rate    float64     `json:"rate_micro_per_s"`
	Budget  money.Micro `json:"budget_micro"`
	Charged money.Micro `json:"charged_micro"`
	Ends    time.Time   `json:"ends"`
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
