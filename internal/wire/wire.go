// Package wire is the contract between mrmarket's components on NATS: the
// versioned subjects, the JSON messages, strict decoding, and the error shape
// every reply uses.
//
// Every request is a JSON object with "v": 1 and is decoded strictly: unknown
// fields, trailing data, a wrong version or a failed Validate are rejected with
// a bad_request error before any state is touched. Every reply is an envelope,
// {"v":1,"result":{…}} or {"v":1,"error":{"code":…,"message":…}}, so a client
// can always tell a refusal from a crash. Money is always integer
// micro-credits; rates are floats in micro-credits per second; durations are
// Go duration strings ("10m", "1h30m").
//
// Mutating requests are signed (sign.go: NKeys over subject, body, time and
// nonce, in headers, the body untouched). Clients call with Call, CallAs or
// the typed Do; components serve their subjects through package
// internal/service, which verifies, decodes, authorizes and replies with this
// package's envelope. docs/SUBJECTS.md lists every subject and who may send
// it. A user's signed spend travels on with what is done for it, as a
// mandate agents and the bank check (mandate.go).
package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
)

// Version is the message version this build speaks.
const Version = 1

// Subjects and stream names (docs/SUBJECTS.md lists them with their roles).
const (
	BankGrant     = "mrm.v1.bank.grant"
	BankHold      = "mrm.v1.bank.hold"
	BankCapture   = "mrm.v1.bank.capture"
	BankRelease   = "mrm.v1.bank.release"
	BankBalance   = "mrm.v1.bank.balance"
	BankLedger    = "mrm.v1.bank.ledger"
	BankTransfer  = "mrm.v1.bank.transfer"
	BankIncome    = "mrm.v1.bank.income"
	BankStatement = "mrm.v1.bank.statement"
	BankPrincipal = "mrm.v1.bank.principal"
	BankWhois     = "mrm.v1.bank.whois"
	BankExtend    = "mrm.v1.bank.extend"
	// The registry's key lifecycle (admin): list, revoke, rotate.
	BankPrincipals = "mrm.v1.bank.principals"
	BankRevoke     = "mrm.v1.bank.revoke"
	BankRotate     = "mrm.v1.bank.rotate"
	// RegistryRevoked is where the bank announces each key it revoked
	// (RevokedNotice), once committed: every service that caches identities
	// listens and forgets the key at once.
	RegistryRevoked = "mrm.v1.registry.revoked"

	BrokerSpend   = "mrm.v1.broker.spend"
	BrokerCancel  = "mrm.v1.broker.cancel"
	BrokerPlans   = "mrm.v1.broker.plans"
	BrokerPrice   = "mrm.v1.broker.price"
	BrokerVMs     = "mrm.v1.broker.vms"
	BrokerAdjust  = "mrm.v1.broker.adjust"
	BrokerPredict = "mrm.v1.broker.predict"

	// AllHostStates matches every host's state publication.
	AllHostStates = "mrm.v1.host.*.state"
	// AllEvents matches every audit event; the MRM_EVENTS stream holds them.
	AllEvents = "mrm.v1.events.>"

	// QueueBank and QueueBroker are the queue groups replicas share.
	QueueBank   = "mrm-bank"
	QueueBroker = "mrm-broker"

	// BucketHosts is the JetStream KV bucket holding the last state of every
	// host, keyed by host id.
	BucketHosts = "MRM_HOSTS"
	// BucketPlans holds the broker's plans (key: plan id) and its replicas'
	// heartbeats (key: "replica.<id>").
	BucketPlans = "MRM_PLANS"
	// BucketNonces holds the nonces of the signed requests the broker
	// replicas served (key: a hash of signer and nonce), with a TTL past
	// their freshness: a replay to another replica or after a restart is
	// refused.
	BucketNonces = "MRM_NONCES"
	// StreamEvents is the JetStream stream of audit events.
	StreamEvents = "MRM_EVENTS"
)

// AgentBidSubject is the subject on which host's agent takes bid changes.
func AgentBidSubject(host string) string { return "mrm.v1.agent." + host + ".bid" }

// AgentStateSubject is the subject on which host's agent answers state requests.
func AgentStateSubject(host string) string { return "mrm.v1.agent." + host + ".state" }

// HostStateSubject is the subject on which host's agent publishes its state every tick.
func HostStateSubject(host string) string { return "mrm.v1.host." + host + ".state" }

// EventSubject is the subject of an audit event of a component ("bank", "broker",
// "agent") and kind ("grant", "hold", "plan", …).
func EventSubject(component, kind string) string { return "mrm.v1.events." + component + "." + kind }

// Error codes. Each is also a sentinel (see the Err variables) so callers can
// test a reply error with errors.Is.
const (
	CodeBadRequest   = "bad_request"
	CodeNotFound     = "not_found"
	CodeForbidden    = "forbidden"
	CodeConflict     = "conflict"
	CodeInsufficient = "insufficient_funds"
	CodeExpired      = "expired"
	CodeUnavailable  = "unavailable"
	CodeInternal     = "internal"
)

// Sentinel errors, one per code. Domain packages wrap these in their own
// sentinels (fmt.Errorf("%w: unknown account", wire.ErrNotFound)) so that a
// handler can turn any error into the right code with ToError, and a client
// can match the *Error it receives with errors.Is(err, wire.ErrNotFound).
var (
	ErrBadRequest   = &Error{Code: CodeBadRequest, Message: "bad request"}
	ErrNotFound     = &Error{Code: CodeNotFound, Message: "not found"}
	ErrForbidden    = &Error{Code: CodeForbidden, Message: "forbidden"}
	ErrConflict     = &Error{Code: CodeConflict, Message: "conflict"}
	ErrInsufficient = &Error{Code: CodeInsufficient, Message: "insufficient funds"}
	ErrExpired      = &Error{Code: CodeExpired, Message: "expired"}
	ErrUnavailable  = &Error{Code: CodeUnavailable, Message: "unavailable"}
	ErrInternal     = &Error{Code: CodeInternal, Message: "internal error"}
)

var sentinels = []*Error{ErrBadRequest, ErrNotFound, ErrForbidden, ErrConflict,
	ErrInsufficient, ErrExpired, ErrUnavailable, ErrInternal}

// Error is the error half of a reply envelope.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message }

// Is makes every *Error with the same code match, so errors.Is(err,
// wire.ErrNotFound) holds for a not_found reply whatever its message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Errorf returns a new error of the category of sentinel (one of the Err
// variables) with a formatted message.
func Errorf(sentinel *Error, format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)
}

// ToError turns any error into a reply error: the code of the first sentinel
// it wraps (internal if none) and the error's full message.
func ToError(err error) *Error {
	var we *Error
	if errors.As(err, &we) && err == error(we) {
		return we
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return &Error{Code: s.Code, Message: err.Error()}
		}
	}
	return &Error{Code: CodeInternal, Message: err.Error()}
}

// Validator is implemented by every request: it checks the fields' values
// after strict decoding has checked their shape.
type Validator interface{ Validate() error }

// Versioned is embedded in every message.
type Versioned struct {
	V int `json:"v"`
}

// version reports the message's version.
func (v Versioned) version() int { return v.V }

type versioner interface{ version() int }

// Decode decodes data strictly into req: one JSON object, no unknown fields,
// no trailing data, version 1, then req.Validate(). Every failure wraps
// ErrBadRequest.
func Decode(data []byte, req Validator) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		return Errorf(ErrBadRequest, "malformed message: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Errorf(ErrBadRequest, "malformed message: trailing data after the JSON object")
	}
	if v, ok := req.(versioner); ok && v.version() != Version {
		return Errorf(ErrBadRequest, "unsupported message version %d (this build speaks %d)", v.version(), Version)
	}
	return req.Validate()
}

// envelope is the reply shape.
type envelope struct {
	V      int             `json:"v"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

// EncodeReply encodes a result or an error as a reply envelope.
func EncodeReply(result any, err error) []byte {
	env := envelope{V: Version}
	if err != nil {
		env.Error = ToError(err)
	} else {
		raw, merr := json.Marshal(result)
		if merr != nil {
			env.Error = &Error{Code: CodeInternal, Message: "encoding reply: " + merr.Error()}
		} else {
			env.Result = raw
		}
	}
	b, _ := json.Marshal(env) // RawMessage and strings always marshal
	return b
}

// DecodeReply decodes a reply envelope into result, or returns its *Error.
func DecodeReply(data []byte, result any) error {
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return Errorf(ErrInternal, "malformed reply: %v", err)
	}
	if env.V != Version {
		return Errorf(ErrInternal, "reply version %d, this build speaks %d", env.V, Version)
	}
	if env.Error != nil {
		return env.Error
	}
	if result == nil {
		return nil
	}
	if err := json.Unmarshal(env.Result, result); err != nil {
		return Errorf(ErrInternal, "malformed reply result: %v", err)
	}
	return nil
}

var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	idRE   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:/@-]{0,199}$`)
)

// CheckName validates the name of a user, host or VM: 1–64 characters of
// letters, digits, '-' and '_', starting with a letter or digit. Names become
// NATS subject tokens, so dots, wildcards and spaces are refused.
func CheckName(what, s string) error {
	if !nameRE.MatchString(s) {
		return Errorf(ErrBadRequest, "invalid %s %q: use 1-64 letters, digits, '-' or '_'", what, s)
	}
	return nil
}

// CheckID validates an idempotency id (transfer, hold, plan): 1–200
// characters of letters, digits and "_.:/@-".
func CheckID(what, s string) error {
	if !idRE.MatchString(s) {
		return Errorf(ErrBadRequest, "invalid %s %q: use 1-200 letters, digits or _.:/@-", what, s)
	}
	return nil
}

// Duration is a time.Duration that travels as a Go duration string.
type Duration time.Duration

// MarshalJSON encodes d as "1h30m0s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON accepts a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"10m\": %w", err)
	}
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MaxDuration bounds every bid and plan: a year. Longer is a mistake.
const MaxDuration = 366 * 24 * time.Hour

// CheckDuration validates a bid or plan duration: above zero, at most a year.
func CheckDuration(d Duration) error {
	if d.D() <= 0 {
		return Errorf(ErrBadRequest, "duration must be greater than zero, got %s", d.D())
	}
	if d.D() > MaxDuration {
		return Errorf(ErrBadRequest, "duration %s is above the maximum of %s", d.D(), MaxDuration)
	}
	return nil
}
