package wire

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Sealed records and portable signed requests.
//
// A request's signature (sign.go) proves who sent it at the moment it
// arrives. Two more things need signatures that outlive the request:
//
//   - Sealed: a record one principal writes and others act on later — a
//     principal's registration (sealed by the admin), a host's state (by its
//     agent), a plan record (by the broker that wrote it), a reply that
//     changes the receiver's behaviour (by the bank). The signature covers a
//     purpose string that binds the record to where it may be used
//     ("host-state/host-1", "plan/p-42", "reply/<inbox>/<nonce>"), the time
//     of sealing and the body, so a record sealed for one place is refused
//     in any other.
//   - SignedRequest: a user's own signed request (a spend, a submit) carried
//     along with what is done for it, so an agent or the bank can check that
//     the user really asked for it (end-to-end authorization). It is the
//     request exactly as signed: subject, signing headers and body bytes.

// Errors of sealed records; all are forbidden.
var (
	ErrBadSeal    = fmt.Errorf("%w: invalid seal", ErrForbidden)
	ErrWrongPlace = fmt.Errorf("%w: record sealed for another purpose", ErrForbidden)
)

// Sealed is a body signed by Key for Purpose at Time (Unix nanoseconds).
// Body is kept as the exact bytes signed (base64 in JSON).
type Sealed struct {
	Purpose string `json:"purpose"`
	Key     string `json:"key"`
	Time    int64  `json:"time"`
	Body    []byte `json:"body"`
	Sig     string `json:"sig"`
}

func sealPayload(purpose string, nanos int64, body []byte) []byte {
	ts := strconv.FormatInt(nanos, 10)
	p := make([]byte, 0, len(purpose)+len(ts)+len(body)+16)
	p = append(p, "mrm-seal-v1\n"...)
	p = append(p, purpose...)
	p = append(p, '\n')
	p = append(p, ts...)
	p = append(p, '\n')
	return append(p, body...)
}

// Seal signs body for purpose, now.
func (s *Signer) Seal(purpose string, body []byte) Sealed {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	nanos := now().UnixNano()
	sig := ed25519.Sign(s.priv, sealPayload(purpose, nanos, body))
	return Sealed{Purpose: purpose, Key: s.pub, Time: nanos, Body: body, Sig: base64.RawURLEncoding.EncodeToString(sig)}
}

// At is when the record was sealed.
func (s Sealed) At() time.Time { return time.Unix(0, s.Time) }

// Open checks that s is a valid seal for purpose and returns its signer's
// key. Who that key belongs to, and whether the time is acceptable, is the
// caller's business.
func (s Sealed) Open(purpose string) (string, error) {
	if s.Purpose != purpose {
		return "", fmt.Errorf("%w: sealed for %q, used for %q", ErrWrongPlace, s.Purpose, purpose)
	}
	if err := verifyEd25519(s.Key, s.Sig, sealPayload(s.Purpose, s.Time, s.Body)); err != nil {
		return "", err
	}
	return s.Key, nil
}

func verifyEd25519(key, sig string, payload []byte) error {
	if CheckPublicKey(key) != nil {
		return fmt.Errorf("%w: bad signing key", ErrBadSeal)
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return fmt.Errorf("%w: signature is not base64url", ErrBadSeal)
	}
	pk, err := nkeys.FromPublicKey(key)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadSeal, err)
	}
	if err := pk.Verify(payload, raw); err != nil {
		return ErrBadSeal
	}
	return nil
}

// SignedRequest is a signed request as it was sent: its subject, signing
// headers and exact body. It can travel inside other messages and be
// verified by anyone, any time later (Check): a mandate.
type SignedRequest struct {
	Subject string `json:"subject"`
	Key     string `json:"key"`
	Time    string `json:"time"`
	Nonce   string `json:"nonce"`
	Sig     string `json:"sig"`
	Body    []byte `json:"body"`
}

// SignedRequestOf captures a received signed request (subject, headers,
// body); ok is false for an unsigned one.
func SignedRequestOf(subject string, h nats.Header, body []byte) (SignedRequest, bool) {
	if h == nil || h.Get(HeaderKey) == "" {
		return SignedRequest{}, false
	}
	return SignedRequest{Subject: subject, Key: h.Get(HeaderKey), Time: h.Get(HeaderTime), Nonce: h.Get(HeaderNonce), Sig: h.Get(HeaderSig), Body: body}, true
}

// Header is r's signing headers.
func (r SignedRequest) Header() nats.Header {
	h := nats.Header{}
	h.Set(HeaderKey, r.Key)
	h.Set(HeaderTime, r.Time)
	h.Set(HeaderNonce, r.Nonce)
	h.Set(HeaderSig, r.Sig)
	return h
}

// Check verifies r's signature (not its freshness: a mandate is checked
// long after it was sent) and returns its signer.
func (r SignedRequest) Check() (Caller, error) {
	if r.Key == "" {
		return Caller{}, ErrUnsigned
	}
	nanos, err := strconv.ParseInt(r.Time, 10, 64)
	if err != nil {
		return Caller{}, fmt.Errorf("%w: bad signing time %q", ErrBadSignature, r.Time)
	}
	if r.Nonce == "" || len(r.Nonce) > 64 {
		return Caller{}, fmt.Errorf("%w: bad nonce", ErrBadSignature)
	}
	if err := verifyEd25519(r.Key, r.Sig, signingPayload(r.Subject, r.Time, r.Nonce, r.Body)); err != nil {
		return Caller{}, ErrBadSignature
	}
	return Caller{Key: r.Key, Time: time.Unix(0, nanos), Nonce: r.Nonce}, nil
}
