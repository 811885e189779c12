package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
)

// Mandates: end-to-end user authorization.
//
// A user's spend (or submit, or spend --more) is signed by the user. The
// broker keeps that signed request — the mandate — with the plan and
// passes it on with everything it does for the plan: every bid it sends an
// agent (Bid.Mandate) and the hold and extensions it asks of the bank
// (HoldRequest.Mandate, ExtendRequest.Mandate). An agent and the bank then
// check for themselves what the user asked for, so a broker, a forged plan
// record or a replayed message cannot widen it:
//
//   - the hold a mandate funds is HoldIDFor(user, the mandate's request
//     id): one hold per signed request, of that user;
//   - an agent charges a bid only for a VM the mandate names and the
//     user owns on that host, only until the mandate's period ends (Until);
//   - the bank holds no more than the mandate's Budget and extends a hold
//     only by what a signed adjustment of that plan adds. The budget is
//     therefore bounded by the bank: bids may name any budget, but what the
//     agents capture never goes past what the user's signed requests put in
//     the hold.

// MandateGrace is how long past a mandate's period its plan may still be
// charged (the broker's settle time and the agents' last captures).
const MandateGrace = 10 * time.Minute

// Errors of mandates; all are forbidden.
var (
	ErrNoMandate  = fmt.Errorf("%w: no mandate (the user's signed request)", ErrForbidden)
	ErrBadMandate = fmt.Errorf("%w: mandate does not allow this", ErrForbidden)
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
	Signer Caller
	// Subject is the subject it was signed for (BrokerSpend, BrokerSubmit,
	// BrokerAdjust).
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
}

// SignedBy checks that p, the principal who signed m (whois of
// m.Signer.Key), may sign it: the user whose money it spends, or an admin.
func (m Mandate) SignedBy(p Principal) error {
	if !(p.Role == RoleUser && p.Name == m.User) && p.Role != RoleAdmin {
		return fmt.Errorf("%w: signed by %s (%s), not by %s", ErrBadMandate, p.Name, p.Role, m.User)
	}
	return nil
}

// Mandate checks r's signature and reads what it allows. It does not know
// who signed: the caller resolves Signer.Key (whois) and checks the
// principal is User (or an admin).
func (r SignedRequest) Mandate() (Mandate, error) {
	c, err := r.Check()
	if err != nil {
		return Mandate{}, err
	}
	m := Mandate{Signer: c, Subject: r.Subject}
	switch r.Subject {
	case BrokerSpend:
		var req SpendRequest
		if err := json.Unmarshal(r.Body, &req); err != nil {
			return Mandate{}, fmt.Errorf("%w: spend body: %v", ErrBadMandate, err)
		}
		m.User, m.RequestID, m.Budget = req.User, req.ID, req.Budget
		m.VMs = setOf(req.AllVMs())
		m.Until = c.Time.Add(req.Duration.D() + MandateGrace)
	case BrokerSubmit:
		var req SubmitRequest
		if err := json.Unmarshal(r.Body, &req); err != nil {
			return Mandate{}, fmt.Errorf("%w: submit body: %v", ErrBadMandate, err)
		}
		m.User, m.RequestID, m.VMs = req.User, req.ID, setOf(req.Job.VMs)
		m.Budget = req.Budget
		if m.Budget == 0 {
			m.Budget = req.MaxPrice
		}
		m.Until = submitUntil(&req, c.Time)
		m.MarketClock = !req.Deadline.IsZero()
	case BrokerAdjust:
		var req AdjustRequest
		if err := json.Unmarshal(r.Body, &req); err != nil {
			return Mandate{}, fmt.Errorf("%w: adjust body: %v", ErrBadMandate, err)
		}
		m.User, m.RequestID, m.Budget, m.Plan = req.User, req.ID, req.More, req.Plan
		return m, nil
	default:
		return Mandate{}, fmt.Errorf("%w: signed for %s, not a spend or a submit", ErrBadMandate, r.Subject)
	}
	if m.RequestID == "" {
		m.RequestID = c.Nonce
	}
	m.Hold = HoldIDFor(m.User, m.RequestID)
	return m, nil
}

// submitUntil is how long a submit lets its job be charged: a job with a
// deadline runs at most a quarter of its window past it (the broker's
// rule), a best-effort one at most MaxDuration from its signing.
func submitUntil(req *SubmitRequest, signed time.Time) time.Time {
	if req.Deadline.IsZero() {
		return signed.Add(MaxDuration)
	}
	return req.Deadline.Add(max(req.Deadline.Sub(signed)/4, 0) + MandateGrace)
}

func setOf(vms []string) map[string]bool {
	out := make(map[string]bool, len(vms))
	for _, vm := range vms {
		out[vm] = true
	}
	return out
}

// MandateCache remembers mandates already read, by signature, so a round
// of many bids on one plan costs one verification. At most Size entries
// (default 4096); when full it starts over. Safe for concurrent use.
type MandateCache struct {
	Size int

	mu sync.Mutex
	m  map[string]Mandate
}

// Read is r.Mandate(), from the cache when r's signature was read before.
// A refused mandate is not cached.
func (c *MandateCache) Read(r *SignedRequest) (Mandate, error) {
	key := r.Sig + "\x00" + r.Key
	c.mu.Lock()
	m, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return m, nil
	}
	m, err := r.Mandate()
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

// SignMandate signs req (stamped with this version) for subject as s and
// returns it as the mandate a broker would carry: what a user's client
// sends, for tests and tools that act as one.
func SignMandate(s *Signer, subject string, req Message) (*SignedRequest, error) {
	req.stamp()
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	msg, err := s.Sign(subject, body)
	if err != nil {
		return nil, err
	}
	r, _ := SignedRequestOf(subject, msg.Header, msg.Data)
	return &r, nil
}
