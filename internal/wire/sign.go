package wire

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
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
	ErrUnsigned     = fmt.Errorf("%w: unsigned request (sign it with your credentials: --creds or MRM_CREDS)", ErrForbidden)
	ErrBadSignature = fmt.Errorf("%w: invalid signature", ErrForbidden)
	ErrStale        = fmt.Errorf("%w: stale request (signed more than %s from the receiver's clock)", ErrForbidden, MaxSkew)
	ErrReplay       = fmt.Errorf("%w: replayed request (nonce already seen)", ErrForbidden)
	ErrUnknownKey   = fmt.Errorf("%w: unknown signing key", ErrForbidden)
	ErrRole         = fmt.Errorf("%w: role not allowed", ErrForbidden)
)

// CheckPublicKey validates an NKey user public key ("U…").
func CheckPublicKey(k string) error {
	if !nkeys.IsValidPublicUserKey(k) {
		return Errorf(ErrBadRequest, "invalid NKey public user key %q", k)
	}
	return nil
}

// Signer signs requests with one principal's NKey.
type Signer struct {
	kp  nkeys.KeyPair
	pub string
	// priv is the ed25519 key the seed stands for, derived once: nkeys
	// derives it again for every signature, which doubled the cost.
	priv ed25519.PrivateKey
	// Now is the signing clock; nil means the wall clock. Signing time is a
	// transport property: it is always compared with the receiver's wall
	// clock, whatever virtual clock the market runs on.
	Now func() time.Time
}

// NewSigner makes a signer from a key pair.
func NewSigner(kp nkeys.KeyPair) (*Signer, error) {
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	if err := CheckPublicKey(pub); err != nil {
		return nil, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, err
	}
	_, raw, err := nkeys.DecodeSeed(seed)
	if err != nil || len(raw) != ed25519.SeedSize {
		return nil, fmt.Errorf("signer: bad seed: %v", err)
	}
	return &Signer{kp: kp, pub: pub, priv: ed25519.NewKeyFromSeed(raw)}, nil
}

// NewUserSigner generates a fresh identity.
func NewUserSigner() (*Signer, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	return NewSigner(kp)
}

// Public is the signer's public key.
func (s *Signer) Public() string { return s.pub }

// Seed is the signer's private seed, for a credentials file.
func (s *Signer) Seed() ([]byte, error) { return s.kp.Seed() }

// CredsPath is the credentials file of principal name in dir.
func CredsPath(dir, name string) string { return filepath.Join(dir, name+".nk") }

// LoadSigner reads a credentials file (an NKey seed, "SU…").
func LoadSigner(path string) (*Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading credentials: %w", err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return nil, fmt.Errorf("credentials %s: %w", path, err)
	}
	return NewSigner(kp)
}

// SaveSigner writes s's seed to path, readable by its owner only.
func SaveSigner(path string, s *Signer) error {
	seed, err := s.Seed()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, append(seed, '\n'), 0o600)
}

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
	if CheckPublicKey(key) != nil || ts == "" || nonce == "" || len(nonce) > 64 || sig == "" {
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

// HeaderOrder names what a request must stay in order with: a service
// runs one principal's requests to an endpoint that carry the same order
// key one at a time in the order sent, and those with different keys side
// by side. Unsigned on purpose: it only orders the sender's own requests.
const HeaderOrder = "Mrm-Order"
