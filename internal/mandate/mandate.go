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
//   - the bank holds no more than the mandate's Budget and extends a hold
//     only by what a signed adjustment of that plan adds. The budget is
//     therefore bounded by the bank: bids may name any budget, but what the
//     agents capture never goes past what the user's signed requests put in
//     the hold.
//
// A Mandate is therefore the terms read from the signed body, not the body:
// what the checkers compare is a field of it, so binding more of the
// request (its rates, its period, its hosts, its plan) is a new field read
// here and a new comparison in the checkers, with no change on the wire.
package mandate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
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
		m.RequestID = c.Nonce
	}
	m.Hold = HoldIDFor(m.User, m.RequestID)
	return m, nil
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
