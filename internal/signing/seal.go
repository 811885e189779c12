package signing

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// Sealed records and portable signed requests.
//
// A request's signature (request.go) proves who sent it at the moment it
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
	ErrBadSeal    = fmt.Errorf("%w: invalid seal", wire.ErrForbidden)
	ErrWrongPlace = fmt.Errorf("%w: record sealed for another purpose", wire.ErrForbidden)
)

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
func (s *Signer) Seal(purpose string, body []byte) wire.Sealed {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	nanos := now().UnixNano()
	sig := ed25519.Sign(s.priv, sealPayload(purpose, nanos, body))
	return wire.Sealed{Purpose: purpose, Key: s.pub, Time: nanos, Body: body, Sig: base64.RawURLEncoding.EncodeToString(sig)}
}

// Open checks that s is a valid seal for purpose and returns its signer's
// key. Who that key belongs to, and whether the time is acceptable, is the
// caller's business.
func Open(s wire.Sealed, purpose string) (string, error) {
	if s.Purpose != purpose {
		return "", fmt.Errorf("%w: sealed for %q, used for %q", ErrWrongPlace, s.Purpose, purpose)
	}
	if err := verifyEd25519(s.Key, s.Sig, sealPayload(s.Purpose, s.Time, s.Body)); err != nil {
		return "", err
	}
	return s.Key, nil
}

func verifyEd25519(key, sig string, payload []byte) error {
	if wire.CheckPublicKey(key) != nil {
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
