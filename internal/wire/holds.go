package wire

import (
	"maps"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
)

// Subjects of the bank's holds: money in escrow for a plan, captured by the
// hosts' agents, released or extended.
const (
	BankHold    = "mrm.v1.bank.hold"
	BankCapture = "mrm.v1.bank.capture"
	BankRelease = "mrm.v1.bank.release"
	BankExtend  = "mrm.v1.bank.extend"
)

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
	// broker places it: the bank holds only mandate.HoldIDFor(user, its
	// request id), no more than it allows (see package mandate).
	Mandate *SignedRequest `json:"mandate,omitempty"`
	// Placement is where each VM of the plan runs, from the broker's
	// registry, with Mandate: every VM must be one the mandate names, Hosts
	// must be exactly the placement's hosts, and an agent captures only for
	// a VM placed on its own host.
	Placement []Placed `json:"placement,omitempty"`
}

// Placed is a VM and the host it runs on.
type Placed struct {
	VM   string `json:"vm"`
	Host string `json:"host"`
}

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
	if err := checkPlacement(r.Placement, r.Hosts); err != nil {
		return err
	}
	return checkAmount("hold amount", r.Amount)
}

// checkPlacement checks a hold's placement: at most MaxPlanVMs VMs, each
// once, on a named host; and its hosts, when it has any, are the hold's.
func checkPlacement(placement []Placed, hosts []string) error {
	if len(placement) == 0 {
		return nil
	}
	if len(placement) > MaxPlanVMs {
		return Errorf(ErrBadRequest, "a placement names at most %d VMs, got %d", MaxPlanVMs, len(placement))
	}
	seen := make(map[string]bool, len(placement))
	on := map[string]bool{}
	for _, p := range placement {
		if err := CheckName("vm", p.VM); err != nil {
			return err
		}
		if err := CheckName("host", p.Host); err != nil {
			return err
		}
		if seen[p.VM] {
			return Errorf(ErrBadRequest, "vm %q placed twice", p.VM)
		}
		seen[p.VM], on[p.Host] = true, true
	}
	benef := map[string]bool{}
	for _, h := range hosts {
		benef[h] = true
	}
	if !maps.Equal(on, benef) {
		return Errorf(ErrBadRequest, "a hold's hosts must be its placement's hosts")
	}
	return nil
}

// MaxHoldHosts bounds a hold's beneficiaries.
const MaxHoldHosts = 10_000

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

// MaxLegs bounds a capture batch.
const MaxLegs = 100_000

// LegResult is the outcome of one leg. Applied is what this leg moved now;
// Captured is the total captured for (hold, host, vm) after it. Exhausted
// says the hold has nothing left: the agent must zero its bids on it. Cut
// is what the leg asked beyond what the hold's mandate allows by now (its
// pace, its VM share): not captured, and not refused either — a later leg
// of the same cumulative total captures it once the mandate allows. Error
// is set when the leg was refused (unknown, closed or expired hold, a VM
// its mandate does not place on the host); the other legs of the batch
// still apply.
type LegResult struct {
	ID        string      `json:"id"`
	Hold      string      `json:"hold"`
	VM        string      `json:"vm"`
	Applied   money.Micro `json:"applied_micro"`
	Captured  money.Micro `json:"captured_micro"`
	Exhausted bool        `json:"exhausted,omitempty"`
	Cut       money.Micro `json:"cut_micro,omitempty"`
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

// BankOpenHolds lists open holds (for a broker recovering plans it lost).
const BankOpenHolds = "mrm.v1.bank.holds"

// OpenHoldsRequest asks for the open holds whose memo starts with
// MemoPrefix, placed before Before (a hold being placed right now belongs
// to a plan being started).
type OpenHoldsRequest struct {
	Versioned
	MemoPrefix string    `json:"memo_prefix"`
	Before     time.Time `json:"before"`
}

func (r *OpenHoldsRequest) Validate() error {
	if len(r.MemoPrefix) > MaxMemo {
		return Errorf(ErrBadRequest, "memo prefix longer than %d bytes", MaxMemo)
	}
	return nil
}

// OpenHold is an open hold with the memo it was placed with.
type OpenHold struct {
	HoldInfo
	Memo    string    `json:"memo"`
	Created time.Time `json:"created"`
}

// MaxOpenHolds bounds an OpenHoldsReply.
const MaxOpenHolds = 10_000

// OpenHoldsReply answers an OpenHoldsRequest, oldest first, at most
// MaxOpenHolds.
type OpenHoldsReply struct {
	Holds []OpenHold `json:"holds"`
}

// BankHolds reads holds by id (the broker, for the figures of the plans it
// answers about: what the bank captured, released and still holds).
const BankHolds = "mrm.v1.bank.holds.get"

// HoldsRequest asks for the holds IDs.
type HoldsRequest struct {
	Versioned
	IDs []string `json:"ids"`
}

func (r *HoldsRequest) Validate() error {
	if len(r.IDs) == 0 || len(r.IDs) > MaxHoldsRead {
		return Errorf(ErrBadRequest, "ask for 1 to %d holds, got %d", MaxHoldsRead, len(r.IDs))
	}
	for _, id := range r.IDs {
		if err := CheckID("hold id", id); err != nil {
			return err
		}
	}
	return nil
}

// MaxHoldsRead bounds a HoldsRequest.
const MaxHoldsRead = 10_000

// HoldsReply has the holds of a HoldsRequest the bank knows, in its order;
// unknown ids are left out.
type HoldsReply struct {
	Holds []HoldInfo `json:"holds"`
}
