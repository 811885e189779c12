package service

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// Sentinel errors of a table's declaration (Table.Check).
var (
	ErrNoHandler      = errors.New("service: endpoint has no handler (declare it with Op)")
	ErrBadName        = errors.New("service: endpoint name must be letters, digits, '-' or '_'")
	ErrDuplicate      = errors.New("service: endpoint declared twice")
	ErrNoRoles        = errors.New("service: a signed endpoint must allow some role")
	ErrOpenRoles      = errors.New("service: an unsigned endpoint is open to everyone and allows no roles")
	ErrNoActsFor      = errors.New("service: an endpoint allowing a role only for its own requests needs who the request acts for")
	ErrReplayableOpen = errors.New("service: only a signed endpoint can be replayable")
)

// Allow is a role an endpoint admits. With Own, a principal of the role is
// admitted only for requests acting for itself: a user for its own money, an
// agent for its own host (Principal.Name equal to the endpoint's acts-for).
type Allow struct {
	Role string
	Own  bool
	// as maps an Own principal's name to what the request acts for (its
	// account id, say); nil compares the name itself (OwnAs).
	as func(name string) string
}

// Role admits every principal of role.
func Role(role string) Allow { return Allow{Role: role} }

// Own admits a principal of role only for requests acting for itself.
func Own(role string) Allow { return Allow{Role: role, Own: true} }

// OwnAs admits a principal of role only for requests acting for as(its
// name): an agent reads the statement of ProviderAccount(its host), a user
// of UserAccount(its name). Acts-for values of different roles then never
// collide (a user named like a host is not that host's provider).
func OwnAs(role string, as func(name string) string) Allow {
	return Allow{Role: role, Own: true, as: as}
}

func (a Allow) String() string {
	if a.Own {
		return a.Role + " (own)"
	}
	return a.Role
}

// admits reports whether p may send a request acting for actsFor.
func (a Allow) admits(p wire.Principal, actsFor string) bool {
	return p.Role == a.Role && (!a.Own || a.self(p.Name) == actsFor)
}

// self is what a principal named name acts for under a.
func (a Allow) self(name string) string {
	if a.as == nil {
		return name
	}
	return a.as(name)
}

// Endpoint is one request/reply subject of a component. Declare the plain
// fields, then give it its typed handler with Op.
type Endpoint struct {
	// Name is the operation: micro's endpoint name and the metrics' op label.
	Name string
	// Subject is where requests come.
	Subject string
	// Queue is the queue group replicas share; "" subscribes plainly.
	Queue string
	// Signed endpoints take only signed requests from the roles in Allow
	// (when the Authorizer knows identities); unsigned ones are open.
	Signed bool
	Allow  []Allow
	// What is what a refused principal may not do, for the refusal
	// "<name> (<role>) may not <What>[ <acts for>]".
	What string
	// Replayable marks a signed read: its nonce is not recorded, so a
	// replayed signature is answered again instead of refused. Only for
	// requests that change nothing (a replay learns what the signer could
	// read anyway, within the signature's freshness window); it spares
	// every read a write to the nonce store.
	Replayable bool
	// Audit marks a request that moves money: each one that succeeds is
	// published to the audit stream (Options.Audit) with its signed request,
	// its principal and its result.
	Audit bool
	// Bulk marks a request that starts new work (a spend, a submit, a
	// hold): with Fair queuing it is served only when no other request
	// waits, so a flood of new work does not hold up the requests that
	// end work or read it (a cancel, plans, a capture).
	Bulk bool

	request string // the wire request type, for listings
	decode  func(data []byte) (any, error)
	actsFor func(req any) string
	// mine, set by OpMine, fills an empty acts-for field with the name of
	// the Own principal asking: "my plans".
	mine   func(req any, name string)
	handle func(ctx context.Context, req any) (any, error)
}

// Bulk is e marked Endpoint.Bulk.
func Bulk(e Endpoint) Endpoint {
	e.Bulk = true
	return e
}

// Request is what an endpoint decodes into: a pointer to a wire request
// struct that validates itself.
type Request[T any] interface {
	*T
	wire.Validator
}

// Op gives e its handler: requests are decoded strictly (wire.Decode) into a
// fresh *T and handed to handle, whose result is the reply. actsFor names
// the principal a request acts for (its user, its host); it is needed when e
// allows a role only for its own requests, else it may be nil.
func Op[T any, PT Request[T], R any](e Endpoint, actsFor func(PT) string, handle func(context.Context, PT) (R, error)) Endpoint {
	e.request = strings.TrimPrefix(fmt.Sprintf("%T", PT(new(T))), "*")
	e.decode = func(data []byte) (any, error) {
		req := PT(new(T))
		return req, wire.Decode(data, req)
	}
	if actsFor != nil {
		e.actsFor = func(req any) string { return actsFor(req.(PT)) }
	}
	e.handle = func(ctx context.Context, req any) (any, error) { return handle(ctx, req.(PT)) }
	return e
}

// OpMine is Op for a read whose request may leave who it acts for empty
// (field): an Own principal that leaves it empty asks for its own, and the
// field is filled with its name before authorization; an admin leaving it
// empty reads everyone's. Without identities (no Authorizer.Identities) the
// field is left as sent.
func OpMine[T any, PT Request[T], R any](e Endpoint, field func(PT) *string, handle func(context.Context, PT) (R, error)) Endpoint {
	e = Op(e, func(r PT) string { return *field(r) }, handle)
	e.mine = func(req any, name string) {
		if f := field(req.(PT)); *f == "" {
			*f = name
		}
	}
	return e
}

// fillMine gives req p's own name when e reads "mine" and p is admitted
// only for its own requests.
func (e *Endpoint) fillMine(p wire.Principal, req any) {
	if e.mine == nil {
		return
	}
	for _, a := range e.Allow {
		if a.Own && a.Role == p.Role && a.as == nil {
			e.mine(req, p.Name)
			return
		}
	}
}

// admits reports whether p may send req on e.
func (e *Endpoint) admits(p wire.Principal, req any) (ok bool, actsFor string) {
	if e.actsFor != nil {
		actsFor = e.actsFor(req)
	}
	for _, a := range e.Allow {
		if a.admits(p, actsFor) {
			return true, actsFor
		}
	}
	return false, actsFor
}

// Table is a component's endpoints, declared once.
type Table []Endpoint

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Check reports a table that cannot be served: an endpoint without a
// handler, a bad or repeated name or subject, a signed endpoint allowing no
// role, an open one allowing roles, or an Own role without acts-for.
func (t Table) Check() error {
	names, subjects := map[string]bool{}, map[string]bool{}
	for _, e := range t {
		var err error
		switch {
		case e.handle == nil:
			err = ErrNoHandler
		case !nameRE.MatchString(e.Name):
			err = ErrBadName
		case names[e.Name] || subjects[e.Subject]:
			err = ErrDuplicate
		case e.Signed && len(e.Allow) == 0:
			err = ErrNoRoles
		case !e.Signed && len(e.Allow) > 0:
			err = ErrOpenRoles
		case e.actsFor == nil && e.ownRoles():
			err = ErrNoActsFor
		case e.Replayable && !e.Signed:
			err = ErrReplayableOpen
		}
		if err != nil {
			return fmt.Errorf("%w: %q on %s", err, e.Name, e.Subject)
		}
		names[e.Name], subjects[e.Subject] = true, true
	}
	return nil
}

// roles are e's allowed roles as listed ("user (own)"); nil for none.
func (e *Endpoint) roles() []string {
	var out []string
	for _, a := range e.Allow {
		out = append(out, a.String())
	}
	return out
}

func (e *Endpoint) ownRoles() bool {
	for _, a := range e.Allow {
		if a.Own {
			return true
		}
	}
	return false
}

// Entry is one line of a table's listing.
type Entry struct {
	Name    string
	Subject string
	Queue   string
	Signed  bool
	// Roles are the roles allowed ("user (own)": only for itself); nil for
	// an open endpoint.
	Roles []string
	// Request is the wire type the endpoint decodes ("wire.GrantRequest").
	Request string
	// Replayable: a signed read whose nonce is not recorded.
	Replayable bool
	// Audit: each success goes to the audit stream.
	Audit bool
}

// List lists the table in its order: the input of NATS subject permissions
// and of docs/SUBJECTS.md.
func (t Table) List() []Entry {
	out := make([]Entry, 0, len(t))
	for _, e := range t {
		out = append(out, Entry{Name: e.Name, Subject: e.Subject, Queue: e.Queue, Signed: e.Signed, Roles: e.roles(), Request: e.request,
			Replayable: e.Replayable, Audit: e.Audit})
	}
	return out
}
