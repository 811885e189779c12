package signing

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// Signed replies. A service with a key (service.Options.Signer) signs every
// reply: headers Mrm-Key and Mrm-Sig, the signature over "mrm-reply-v1",
// the reply subject, the request's nonce ("" for an unsigned request) and
// the body, so a reply cannot be moved to another request; Mrm-Cert, when
// set, is the signer's principal record (SealPrincipal), so the requester
// can check who signed without asking anyone. A requester that acts on the
// answer (rpc.Trusted) waits for a reply whose signature and signer it
// trusts and ignores any other: a reply forged by whoever can publish on
// its inbox changes nothing.

// HeaderCert carries the signer's principal record on a signed reply.
const HeaderCert = "Mrm-Cert"

// ErrReplyTrust refuses a reply: unsigned, signed for another request, or
// by a principal the requester does not trust. It is forbidden.
var ErrReplyTrust = fmt.Errorf("%w: reply not signed by a trusted principal", wire.ErrForbidden)

func replyPayload(reply, nonce string, body []byte) []byte {
	p := make([]byte, 0, len(reply)+len(nonce)+len(body)+16)
	p = append(p, "mrm-reply-v1\n"...)
	p = append(p, reply...)
	p = append(p, '\n')
	p = append(p, nonce...)
	p = append(p, '\n')
	return append(p, body...)
}

// SignReply returns the headers signing body as the reply on subject reply
// to a request with nonce; cert, when set, is the signer's record.
func (s *Signer) SignReply(reply, nonce string, body []byte, cert *wire.Sealed) nats.Header {
	sig := ed25519.Sign(s.priv, replyPayload(reply, nonce, body))
	h := nats.Header{}
	h.Set(HeaderKey, s.pub)
	h.Set(HeaderSig, base64.RawURLEncoding.EncodeToString(sig))
	if cert != nil {
		if b, err := json.Marshal(cert); err == nil {
			h.Set(HeaderCert, string(b))
		}
	}
	return h
}

// VerifyReply checks m as the signed reply on subject reply to a request
// with nonce; it returns the signer's key and the record it attached (nil
// if none).
func VerifyReply(m *nats.Msg, reply, nonce string) (string, *wire.Sealed, error) {
	if m.Header == nil || m.Header.Get(HeaderKey) == "" {
		return "", nil, fmt.Errorf("%w: unsigned reply", ErrReplyTrust)
	}
	if m.Subject != reply {
		return "", nil, fmt.Errorf("%w: reply on %s, expected %s", ErrReplyTrust, m.Subject, reply)
	}
	key := m.Header.Get(HeaderKey)
	if err := verifyEd25519(key, m.Header.Get(HeaderSig), replyPayload(reply, nonce, m.Data)); err != nil {
		return "", nil, fmt.Errorf("%w: %v", ErrReplyTrust, err)
	}
	var cert *wire.Sealed
	if c := m.Header.Get(HeaderCert); c != "" {
		cert = new(wire.Sealed)
		if err := json.Unmarshal([]byte(c), cert); err != nil {
			return "", nil, fmt.Errorf("%w: bad signer record: %v", ErrReplyTrust, err)
		}
	}
	return key, cert, nil
}

// ReplyTrust decides whether a reply signed by key (with the signer's
// record cert, maybe nil) is to be believed.
type ReplyTrust func(key string, cert *wire.Sealed) error

// TrustRole believes replies signed by a principal of role whose record,
// attached to the reply, is sealed by the anchor adminKey.
func TrustRole(adminKey, role string) ReplyTrust {
	return func(key string, cert *wire.Sealed) error {
		p, err := openedRecords.open(cert, adminKey, key)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrReplyTrust, err)
		}
		if p.Role != role {
			return fmt.Errorf("%w: signed by %s %s, not a %s", ErrReplyTrust, p.Role, p.Name, role)
		}
		return nil
	}
}

// TrustPrincipal believes replies signed by the principal name of role
// (an agent of its host, say), its record sealed by the anchor adminKey.
func TrustPrincipal(adminKey, role, name string) ReplyTrust {
	return func(key string, cert *wire.Sealed) error {
		p, err := openedRecords.open(cert, adminKey, key)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrReplyTrust, err)
		}
		if p.Role != role || p.Name != name {
			return fmt.Errorf("%w: signed by %s %s, not %s %s", ErrReplyTrust, p.Role, p.Name, role, name)
		}
		return nil
	}
}

// recordCache remembers the records that opened (a service attaches the
// same record to every reply), so a trusted call costs one signature check,
// the reply's, not two. It holds at most maxOpenedRecords and starts over
// when full.
type recordCache struct {
	mu sync.Mutex
	m  map[string]wire.Principal
}

const maxOpenedRecords = 1024

var openedRecords recordCache

// open is OpenPrincipal, remembered by (anchor, key, record signature).
func (c *recordCache) open(cert *wire.Sealed, adminKey, key string) (wire.Principal, error) {
	if cert == nil {
		return OpenPrincipal(cert, adminKey, key)
	}
	k := adminKey + "\n" + key + "\n" + cert.Sig
	c.mu.Lock()
	p, ok := c.m[k]
	c.mu.Unlock()
	if ok && p.Cert != nil && p.Cert.Key == cert.Key && p.Cert.Time == cert.Time && p.Cert.Purpose == cert.Purpose && bytes.Equal(p.Cert.Body, cert.Body) {
		return p, nil
	}
	p, err := OpenPrincipal(cert, adminKey, key)
	if err != nil {
		return p, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxOpenedRecords {
		c.m = map[string]wire.Principal{}
	}
	c.m[k] = p
	c.mu.Unlock()
	return p, nil
}
