// Package wire is the contract between mrmarket's components on NATS: the
// versioned subjects, streams and buckets, the JSON messages, strict
// decoding, and the error shape every reply uses. It is data and checks
// only: it knows what a signed request or a sealed record looks like
// (SignedRequest, Sealed, Principal), not how to make or verify one, so
// every component and tool can speak the contract and nothing in it
// depends on the cryptography or the transport.
//
// Every request is a JSON object with "v": 1 and is decoded strictly: unknown
// fields, trailing data, a wrong version or a failed Validate are rejected with
// a bad_request error before any state is touched. Every reply is an envelope,
// {"v":1,"result":{…}} or {"v":1,"error":{"code":…,"message":…}}, so a client
// can always tell a refusal from a crash. Money is always integer
// micro-credits; rates are floats in micro-credits per second; durations are
// Go duration strings ("10m", "1h30m").
//
// The messages are one file per service, each request beside its Validate:
// bank.go (accounts), holds.go (escrow), principals.go (the registry),
// broker.go (plans, prices, predictions), jobs.go (the deadline service),
// agent.go (bids, host states) and events.go (the audit stream).
// docs/SUBJECTS.md lists every subject and who may send it.
//
// Around the contract: package signing signs and verifies requests (NKeys
// over subject, time, nonce and body, in headers; the body untouched),
// sealed records and replies; package mandate reads what a user's signed
// request, carried with everything done for it, allows; package rpc is the
// clients' one call; package service serves a subject: it verifies,
// decodes, authorizes and replies with this package's envelope.
package wire

import (
	"bytes"
	"encoding/json"
	"io"
)

// Version is the message version this build speaks.
const Version = 1

// Versioned is embedded in every message.
type Versioned struct {
	V int `json:"v"`
}

// version reports the message's version.
func (v Versioned) version() int { return v.V }

type versioner interface{ version() int }

// Message is a request of this contract: every one embeds Versioned, whose
// stamp sets the version a request is sent with.
type Message interface{ stamp() }

// Stamp sets req's version to the one this build speaks, as rpc.Request
// does, for a caller that encodes a request itself.
func Stamp(req Message) { req.stamp() }

// stamp sets the message's version to the one this build speaks.
func (v *Versioned) stamp() { v.V = Version }

// Validator is implemented by every request: it checks the fields' values
// after strict decoding has checked their shape.
type Validator interface{ Validate() error }

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

// HeaderOrder names what a request must stay in order with: a service
// runs one principal's requests to an endpoint that carry the same order
// key one at a time in the order sent, and those with different keys side
// by side. Unsigned on purpose: it only orders the sender's own requests.
const HeaderOrder = "Mrm-Order"

// HeaderPatience is how long the sender waits for the answer, in
// milliseconds from when it sent the request: a service drops a request
// that waited in its queues longer (nobody is left to answer, and serving
// it would only delay the requests still awaited). Time from arrival,
// not a deadline on the sender's clock, so the hosts' clocks need not
// agree; unsigned, as it only saves the sender's own request work.
const HeaderPatience = "Mrm-Patience"
