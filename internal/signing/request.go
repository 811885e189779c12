package signing

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// Signing. A signed request carries four NATS headers: the signer's NKey
// public key, the time of signing (Unix nanoseconds), a random nonce, and
// an ed25519 signature over "mrm-sig-v1", the subject, the time, the nonce
// and the body. The body itself is untouched, so strict decoding is the
// same for signed and unsigned requests. A receiver rejects a bad
// signature, a time further than MaxSkew from its own clock (stale), and a
// nonce it has seen (replay); who may do what is the receiver's business.
const (
	HeaderKey   = "Mrm-Key"
	HeaderTime  = "Mrm-Time"
	HeaderNonce = "Mrm-Nonce"
	HeaderSig   = "Mrm-Sig"

	// MaxSkew is how far a request's signing time may be from the
	// receiver's clock. Receivers remember nonces at least this long.
	MaxSkew = 2 * time.Minute
)

// Errors of signed requests; all are forbidden.
var (
	ErrUnsigned     = fmt.Errorf("%w: unsigned request (sign it with your credentials: --creds or MRM_CREDS)", wire.ErrForbidden)
	ErrBadSignature = fmt.Errorf("%w: invalid signature", wire.ErrForbidden)
	ErrStale        = fmt.Errorf("%w: stale request (signed more than %s from the receiver's clock)", wire.ErrForbidden, MaxSkew)
	ErrReplay       = fmt.Errorf("%w: replayed request (nonce already seen)", wire.ErrForbidden)
	ErrUnknownKey   = fmt.Errorf("%w: unknown signing key", wire.ErrForbidden)
	ErrRole         = fmt.Errorf("%w: role not allowed", wire.ErrForbidden)
)

func signingPayload(subject, ts, nonce string, body []byte) []byte {
	p := make([]byte, 0, len(subject)+len(ts)+len(nonce)+len(body)+16)
	p = append(p, "mrm-sig-v1\n"...)
	p = append(p, subject...)
	p = append(p, '\n')
	p = append(p, ts...)
	p = append(p, '\n')
	p = append(p, nonce...)
	p = append(p, '\n')
	return append(p, body...)
}

// Sign returns a message for subject with body, signed now.
func (s *Signer) Sign(subject string, body []byte) (*nats.Msg, error) {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	var n [16]byte
	if _, err := rand.Read(n[:]); err != nil {
		return nil, err
	}
	ts := strconv.FormatInt(now().UnixNano(), 10)
	nonce := base64.RawURLEncoding.EncodeToString(n[:])
	sig := ed25519.Sign(s.priv, signingPayload(subject, ts, nonce, body)) // = nkeys' signature

	m := nats.NewMsg(subject)
	m.Data = body
	m.Header.Set(HeaderKey, s.pub)
	m.Header.Set(HeaderTime, ts)
	m.Header.Set(HeaderNonce, nonce)
	m.Header.Set(HeaderSig, base64.RawURLEncoding.EncodeToString(sig))
	return m, nil
}

// Caller is who signed a request. A zero Caller (Key "") is unsigned.
type Caller struct {
	Key   string
	Time  time.Time
	Nonce string
}

// Signed reports whether the request was signed.
func (c Caller) Signed() bool { return c.Key != "" }

// VerifyMsg checks m's signature and freshness against now (see Verify).
func VerifyMsg(m *nats.Msg, now time.Time) (Caller, error) {
	return Verify(m.Subject, m.Header, m.Data, now)
}

// Verify checks the signature of a request on subject with headers h and
// body, and its freshness against now. An unsigned request gives a zero
// Caller and no error; a request with any signing header must carry all of
// them, correctly.
func Verify(subject string, h nats.Header, body []byte, now time.Time) (Caller, error) {
	if h == nil || h.Get(HeaderKey) == "" && h.Get(HeaderSig) == "" {
		return Caller{}, nil
	}
	key, ts, nonce, sig := h.Get(HeaderKey), h.Get(HeaderTime), h.Get(HeaderNonce), h.Get(HeaderSig)
	if wire.CheckPublicKey(key) != nil || ts == "" || nonce == "" || len(nonce) > 64 || sig == "" {
		return Caller{}, fmt.Errorf("%w: incomplete signing headers", ErrBadSignature)
	}
	nanos, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return Caller{}, fmt.Errorf("%w: bad signing time %q", ErrBadSignature, ts)
	}
	rawSig, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return Caller{}, fmt.Errorf("%w: signature is not base64url", ErrBadSignature)
	}
	pk, err := nkeys.FromPublicKey(key)
	if err != nil {
		return Caller{}, fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	if err := pk.Verify(signingPayload(subject, ts, nonce, body), rawSig); err != nil {
		return Caller{}, ErrBadSignature
	}
	at := time.Unix(0, nanos)
	if d := now.Sub(at); d > MaxSkew || d < -MaxSkew {
		return Caller{}, fmt.Errorf("%w: signed at %s", ErrStale, at.UTC().Format(time.RFC3339))
	}
	return Caller{Key: key, Time: at, Nonce: nonce}, nil
}

// NonceCache remembers nonces for MaxSkew and more, to refuse replays in a
// component without a durable store.
type NonceCache struct {
	mu   sync.Mutex
	seen map[string]time.Time
	last time.Time
}

// Use records caller's nonce; ErrReplay if it was seen.
func (c *NonceCache) Use(caller Caller, now time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string]time.Time{}
	}
	if now.Sub(c.last) > MaxSkew {
		for k, t := range c.seen {
			if now.Sub(t) > 2*MaxSkew+time.Minute {
				delete(c.seen, k)
			}
		}
		c.last = now
	}
	k := caller.Key + "/" + caller.Nonce
	if _, ok := c.seen[k]; ok {
		return ErrReplay
	}
	c.seen[k] = caller.Time
	return nil
}

// SignedRequestOf captures a received signed request (subject, headers,
// body); ok is false for an unsigned one.
func SignedRequestOf(subject string, h nats.Header, body []byte) (wire.SignedRequest, bool) {
	if h == nil || h.Get(HeaderKey) == "" {
		return wire.SignedRequest{}, false
	}
	return wire.SignedRequest{Subject: subject, Key: h.Get(HeaderKey), Time: h.Get(HeaderTime), Nonce: h.Get(HeaderNonce), Sig: h.Get(HeaderSig), Body: body}, true
}

// RequestHeader is r's signing headers.
func RequestHeader(r wire.SignedRequest) nats.Header {
	h := nats.Header{}
	h.Set(HeaderKey, r.Key)
	h.Set(HeaderTime, r.Time)
	h.Set(HeaderNonce, r.Nonce)
	h.Set(HeaderSig, r.Sig)
	return h
}

// CheckRequest verifies r's signature (not its freshness: a mandate is checked
// long after it was sent) and returns its signer.
func CheckRequest(r wire.SignedRequest) (Caller, error) {
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
