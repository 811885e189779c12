// Package mandate is end-to-end user authorization: a user's own signed
// request, carried with everything done for it, that every component
// spending the user's money checks for itself.
//
// A user's spend (or submit, or spend --more) is signed by the user. The
// broker keeps that signed request — the mandate — with the plan and
// passes it on with everything it does for the plan: every bid it sends an
// agent (wire.Bid.Mandate) and the hold and extensions it asks of the bank
// (wire.HoldRequest.Mandate, wire.ExtendRequest.Mandate). Read checks the
// user's signature (signing.CheckRequest, not its freshness: a mandate is
// checked long after it was sent) and reads what it allows; it does not
// know who signed, so its checkers resolve the signer's key (whois) and
// ask Mandate.SignedBy. The checkers live with what they guard — the bank
// (bank/mandate.go), the broker (broker/mandate.go) and every agent
// (agent/mandate.go) — so a broker, a forged plan record or a replayed
// message cannot widen what the user signed:
//
//   - the hold a mandate funds is HoldIDFor(user, the mandate's request
//     id): one hold per signed request, of that user;
//   - an agent charges a bid only for a VM the mandate names and the
//     user owns on that host, only until the mandate's period ends (Until);
//   - the bank holds no more than the mandate's Budget, expiring no later
//     than its period's end (HoldUntil), for the hosts of the VMs it names
//     as the broker places them, and extends a hold only by what a signed
//     adjustment of that plan adds, only into that plan's hold
//     (HoldIDFor(user, the plan it names)).
//
// # Pace and share: the mandate is the whole authority
//
// A signed spend or submit says how fast its money may go, not only how
// much: its Pace, the shortest time the budget may be spent over, and its
// VMShare, the most one VM may spend of the plan's rate. The bank keeps
// them with the hold as its terms (a schedule of Terms: the hold's amount
// from its creation over Pace, and each extension's from the time it was
// made over what is left of that pace, ExtensionPace) and checks every
// capture leg against them: what the hold has paid never exceeds
// Allowed(terms, now), what one VM has taken never exceeds its VMShare of
// that (ShareOf), both Slack ahead of the bank's clock. Agents refuse a bid
// faster than RateCap, and an honest broker clamps its bids to it (Clamp).
// So a stolen agent key takes no more than its host's VMs could have been
// charged by now (plus Slack's worth), and a stolen broker key cannot
// spend a user's money faster, longer, elsewhere or on another plan than
// the user signed.
//
// Why a linear schedule is sound for honest plans: each round the broker
// spends what remains over the time left, at most c times evenly (c =
// Duration/Pace, what the strategy's PlanCaps signs), so the spent S(t)
// obeys dS/dt ≤ c·(A − S)/(D − t) and, comparing with the equality's
// solution A·(1 − (1 − t/D)^c), S(t) ≤ c·A·t/D = A·t/Pace; an extension of
// M at t_e adds at most M·(t − t_e)/(its pace) likewise. An extension's
// pace is what is left of the hold's pace, not of the plan: the same for a
// plan spending evenly (its pace is its duration), and for one signed to
// spend faster, the time by which it may have spent everything. A submit's
// pace is its job's shortest run (strategies.DeadlinePace): DeadlineEDF
// spends what is left over the job's predicted rest, work·(1 − progress)/q
// with q at most strategies.MaxDeadlineShare, which is no shorter than what
// is left of that run while the broker's estimate of the work is no lower
// than the one signed and the job progresses no faster than its share.
// The brokertest scripts run every strategy honestly and check each charge
// against these bounds (its pace audit).
//
// A Mandate is therefore the terms read from the signed body, not the body:
// what the checkers compare is a field of it, so binding more of the
// request is a new field read here and a new comparison in the checkers.
package mandate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Grace is how long past a mandate's period its plan may still be charged
// (the broker's settle time and the agents' last captures).
const Grace = 10 * time.Minute

// Errors of mandates; all are forbidden.
var (
	ErrMissing    = fmt.Errorf("%w: no mandate (the user's signed request)", wire.ErrForbidden)
	ErrNotAllowed = fmt.Errorf("%w: mandate does not allow this", wire.ErrForbidden)
)

// HoldIDFor is the hold that funds user's signed request requestID (its
// id, or the signature's nonce when it has none): derived, so an agent and
// the bank can check a bid or a hold is the one the user's mandate funds.
func HoldIDFor(user, requestID string) string {
	sum := sha256.Sum256([]byte(user + "\x00" + requestID))
	tag := hex.EncodeToString(sum[:6])
	if len(requestID) > 150 {
		return "hold-" + hex.EncodeToString(sum[:16])
	}
	return "hold-" + requestID + "-" + tag
}

// Mandate is what a user's signed request allows, as read from it.
type Mandate struct {
	// Signer is who signed it (its key, time and nonce).
	Signer signing.Caller
	// Subject is the subject it was signed for (wire.BrokerSpend,
	// wire.BrokerSubmit, wire.BrokerAdjust).
	Subject string
	// User is the user whose money it spends.
	User string
	// RequestID is the request's id, or its nonce when it has none.
	RequestID string
	// Hold is the hold it funds (HoldIDFor(User, RequestID)); empty for an
	// adjustment.
	Hold string
	// VMs are the VMs it names; nil for an adjustment.
	VMs map[string]bool
	// Budget is the most it lets be held: a spend's budget, a submit's
	// budget or max price (0: no bound signed), an adjustment's More.
	Budget money.Micro
	// Until is when charging it must stop (zero for an adjustment), on the
	// signer's clock — or, with MarketClock, on the market's (a submit's
	// deadline is a time on the market's clock, which a simulation may run
	// apart from the wall clock signatures are timed by).
	Until       time.Time
	MarketClock bool
	// Plan is the plan an adjustment is for.
	Plan string
	// Pace is the shortest time Budget may be spent over: a spend's signed
	// pace or its Duration, a submit's signed pace or, unsigned (an older
	// client), wire.MinPace — its total alone binds. Zero for an
	// adjustment, whose pace is the rest of its plan's (ExtensionPace).
	Pace time.Duration
	// VMShare is the most one VM may spend of the plan's rate, in
	// millionths (wire.FullShare when not signed); 0 for an adjustment.
	VMShare int64
}

// SignedBy checks that p, the principal who signed m (whois of
// m.Signer.Key), may sign it: the user whose money it spends, or an admin.
func (m Mandate) SignedBy(p wire.Principal) error {
	if !(p.Role == wire.RoleUser && p.Name == m.User) && p.Role != wire.RoleAdmin {
		return fmt.Errorf("%w: signed by %s (%s), not by %s", ErrNotAllowed, p.Name, p.Role, m.User)
	}
	return nil
}

// Read checks r's signature and reads what it allows. It does not know
// who signed: the caller resolves Signer.Key (whois) and checks the
// principal is User (or an admin: Mandate.SignedBy).
func Read(r wire.SignedRequest) (Mandate, error) {
	c, err := signing.CheckRequest(r)
	if err != nil {
		return Mandate{}, err
	}
	m := Mandate{Signer: c, Subject: r.Subject}
	switch r.Subject {
	case wire.BrokerSpend:
		var req wire.SpendRequest
		if err := json.Unmarshal(r.Body, &req); err != nil {
			return Mandate{}, fmt.Errorf("%w: spend body: %v", ErrNotAllowed, err)
		}
		m.User, m.RequestID, m.Budget = req.User, req.ID, req.Budget
		m.VMs = setOf(req.AllVMs())
		m.Until = c.Time.Add(req.Duration.D() + Grace)
		m.Pace, m.VMShare = req.Duration.D(), int64(wire.FullShare)
		if req.Pace != 0 {
			m.Pace = req.Pace.D()
		}
		if req.VMShare != 0 {
			m.VMShare = req.VMShare
		}
	case wire.BrokerSubmit:
		var req wire.SubmitRequest
		if err := json.Unmarshal(r.Body, &req); err != nil {
			return Mandate{}, fmt.Errorf("%w: submit body: %v", ErrNotAllowed, err)
		}
		m.User, m.RequestID, m.VMs = req.User, req.ID, setOf(req.Job.VMs)
		m.Budget = req.Budget
		if m.Budget == 0 {
			m.Budget = req.MaxPrice
		}
		m.Until = submitUntil(&req, c.Time)
		m.MarketClock = !req.Deadline.IsZero()
		m.Pace, m.VMShare = max(req.Pace.D(), wire.MinPace), int64(wire.FullShare)
	case wire.BrokerAdjust:
		var req wire.AdjustRequest
		if err := json.Unmarshal(r.Body, &req); err != nil {
			return Mandate{}, fmt.Errorf("%w: adjust body: %v", ErrNotAllowed, err)
		}
		m.User, m.RequestID, m.Budget, m.Plan = req.User, req.ID, req.More, req.Plan
		return m, nil
	default:
		return Mandate{}, fmt.Errorf("%w: signed for %s, not a spend or a submit", ErrNotAllowed, r.Subject)
	}
	if m.RequestID == "" {
		m.RequestID = NonceID(c.Nonce)
	}
	m.Hold = HoldIDFor(m.User, m.RequestID)
	return m, nil
}

// NonceID is the id of a request that has none: its signature's nonce,
// which is base64url and so starts with '-' or '_' one time in 32, and an
// id must start with a letter or digit (wire.CheckID): such a nonce gets
// an "n" in front. A nonce that is an id already stays as it is, so the
// plans and holds named after one keep their names.
func NonceID(nonce string) string {
	if wire.CheckID("id", nonce) == nil {
		return nonce
	}
	return "n" + nonce
}

// HoldUntil is the latest a hold m funds may expire, on the clock of now
// (the bank's): the end of m's period, grace included, and
// signing.MaxSkew for the signer's clock. Unless m is on the market's
// clock, Until is on the signer's and signingNow is now on it.
func (m Mandate) HoldUntil(now, signingNow time.Time) time.Time {
	if m.MarketClock {
		return m.Until.Add(signing.MaxSkew)
	}
	return now.Add(m.Until.Sub(signingNow) + signing.MaxSkew)
}

// HoldEnd is when a hold m funds ends for a plan that started at start on
// the market's clock, when the request arrived: its period's end, grace
// included, on that clock. It is the same on every try of placing the
// hold, and within HoldUntil while the plan started within MaxSkew of the
// signature.
func (m Mandate) HoldEnd(start time.Time) time.Time {
	if m.MarketClock {
		return m.Until
	}
	return start.Add(m.Until.Sub(m.Signer.Time))
}

// submitUntil is how long a submit lets its job be charged: a job with a
// deadline runs at most a quarter of its window past it (the broker's
// rule), a best-effort one at most wire.MaxDuration from its signing.
func submitUntil(req *wire.SubmitRequest, signed time.Time) time.Time {
	if req.Deadline.IsZero() {
		return signed.Add(wire.MaxDuration)
	}
	return req.Deadline.Add(max(req.Deadline.Sub(signed)/4, 0) + Grace)
}

// Slack is the tolerance of every pace check: a leg may capture what the
// schedule allows Slack from now, and an agent takes a bid as fast as the
// pace less Slack allows. It covers an agent's tick, the time between a
// plan's start at the broker and its hold at the bank, and the clocks of
// the bank's replicas apart.
const Slack = 30 * time.Second

// Term is one part of a hold's schedule: Amount, paid no faster than
// evenly over Pace from Start.
type Term struct {
	Amount money.Micro
	Start  time.Time
	Pace   time.Duration
}

// Allowed is the most a hold of these terms may have paid by now: the sum
// of each term's Amount·(now + Slack − Start)/Pace, within 0 and Amount,
// each rounded down (128-bit products: money.Charge).
func Allowed(terms []Term, now time.Time) money.Micro {
	var sum money.Micro
	for _, t := range terms {
		part, err := money.Charge(t.Amount, now.Add(Slack).Sub(t.Start), t.Pace)
		if err != nil {
			continue // a term without a pace allows nothing
		}
		sum += part
	}
	return sum
}

// ShareOf is share millionths of m, rounded down.
func ShareOf(m money.Micro, share int64) money.Micro {
	if m <= 0 || share <= 0 {
		return 0
	}
	if share >= wire.FullShare {
		return m
	}
	hi, lo := bits.Mul64(uint64(m), uint64(share))
	q, _ := bits.Div64(hi, lo, wire.FullShare) // hi < FullShare: share < FullShare
	return money.Micro(q)
}

// ExtensionPace is the pace of an extension made at: what is left of the
// pace of the hold's first term (first), at least wire.MinPace. A plan
// spending evenly spends what an extension adds over the time it has
// left; one signed to spend up to c times faster (Pace = Duration/c)
// spends it by the time its pace runs out.
func ExtensionPace(first Term, at time.Time) time.Duration {
	return max(first.Start.Add(first.Pace).Sub(at), wire.MinPace)
}

// RateCap is the most a bid of spend's plan may spend per second on one
// VM, in micro-credits, with the plan's signed adjustments more (each a
// Mandate of wire.BrokerAdjust): VMShare of each term's Amount over its
// pace less Slack (at least wire.MinPace), the terms timed by their
// signatures. Agents refuse a bid above it; the broker clamps its bids to
// it (Clamp).
func RateCap(spend Mandate, more []Mandate) float64 {
	first := Term{Amount: spend.Budget, Start: spend.Signer.Time, Pace: spend.Pace}
	rate := perSecond(first.Amount, first.Pace)
	for _, a := range more {
		rate += perSecond(a.Budget, ExtensionPace(first, a.Signer.Time))
	}
	return rate * float64(spend.VMShare) / wire.FullShare
}

func perSecond(amount money.Micro, pace time.Duration) float64 {
	return float64(amount) / max(pace-Slack, wire.MinPace).Seconds()
}

// Allows reports whether a bid of budget over d spends no faster than
// rateCap (RateCap), give or take a micro-credit of rounding.
func Allows(rateCap float64, budget money.Micro, d time.Duration) bool {
	return float64(budget) <= rateCap*d.Seconds()+1
}

// Clamp is budget cut so that it is spent over d no faster than rateCap.
func Clamp(rateCap float64, budget money.Micro, d time.Duration) money.Micro {
	if most := rateCap * d.Seconds(); float64(budget) > most {
		return money.Micro(math.Floor(most))
	}
	return budget
}

func setOf(vms []string) map[string]bool {
	out := make(map[string]bool, len(vms))
	for _, vm := range vms {
		out[vm] = true
	}
	return out
}

// Cache remembers mandates already read, by signature, so a round
// of many bids on one plan costs one verification. At most Size entries
// (default 4096); when full it starts over. Safe for concurrent use.
type Cache struct {
	Size int

	mu sync.Mutex
	m  map[string]Mandate
}

// Read is Read(*r), from the cache when r's signature was read before.
// A refused mandate is not cached.
func (c *Cache) Read(r *wire.SignedRequest) (Mandate, error) {
	key := r.Sig + "\x00" + r.Key
	c.mu.Lock()
	m, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return m, nil
	}
	m, err := Read(*r)
	if err != nil {
		return m, err
	}
	c.mu.Lock()
	size := c.Size
	if size <= 0 {
		size = 4096
	}
	if c.m == nil || len(c.m) >= size {
		c.m = make(map[string]Mandate)
	}
	c.m[key] = m
	c.mu.Unlock()
	return m, nil
}

// Sign signs req (stamped with this version) for subject as s and returns
// it as the mandate a broker would carry: what a user's client sends, for
// tests and tools that act as one.
func Sign(s *signing.Signer, subject string, req wire.Message) (*wire.SignedRequest, error) {
	wire.Stamp(req)
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	msg, err := s.Sign(subject, body)
	if err != nil {
		return nil, err
	}
	r, _ := signing.SignedRequestOf(subject, msg.Header, msg.Data)
	return &r, nil
}
