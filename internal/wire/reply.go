package wire

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// Signed replies. A service with a key (service.Options.Signer) signs every
// reply: headers Mrm-Key and Mrm-Sig, the signature over "mrm-reply-v1",
// the reply subject, the request's nonce ("" for an unsigned request) and
// the body, so a reply cannot be moved to another request; Mrm-Cert, when
// set, is the signer's principal record (SealPrincipal), so the requester
// can check who signed without asking anyone. A requester that acts on the
// answer (CallTrusted) waits for a reply whose signature and signer it
// trusts and ignores any other: a reply forged by whoever can publish on
// its inbox changes nothing.

// HeaderCert carries the signer's principal record on a signed reply.
const HeaderCert = "Mrm-Cert"

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
func (s *Signer) SignReply(reply, nonce string, body []byte, cert *Sealed) nats.Header {
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
func VerifyReply(m *nats.Msg, reply, nonce string) (string, *Sealed, error) {
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
	var cert *Sealed
	if c := m.Header.Get(HeaderCert); c != "" {
		cert = new(Sealed)
		if err := json.Unmarshal([]byte(c), cert); err != nil {
			return "", nil, fmt.Errorf("%w: bad signer record: %v", ErrReplyTrust, err)
		}
	}
	return key, cert, nil
}

// ReplyTrust decides whether a reply signed by key (with the signer's
// record cert, maybe nil) is to be believed.
type ReplyTrust func(key string, cert *Sealed) error

// TrustRole believes replies signed by a principal of role whose record,
// attached to the reply, is sealed by the anchor adminKey.
func TrustRole(adminKey, role string) ReplyTrust {
	return func(key string, cert *Sealed) error {
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
	return func(key string, cert *Sealed) error {
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

// CallAsTrusted is CallAs whose answer must satisfy trust (CallTrusted).
func CallAsTrusted(ctx context.Context, nc *nats.Conn, signer *Signer, subject string, req any, trust ReplyTrust, onRefused func(error), res any) error {
	msg, err := requestMsg(signer, subject, req)
	if err != nil {
		return err
	}
	return CallTrusted(ctx, nc, msg, trust, onRefused, res)
}

// CallTrusted sends req (signed or not) and waits for a reply that trust
// believes (see VerifyReply), ignoring any other reply until ctx's deadline
// (DefaultTimeout if none); then it decodes the reply like Call. A time-out
// after refused replies says why they were refused (ErrUnavailable). onRefused,
// when set, hears each reply ignored.
func CallTrusted(ctx context.Context, nc *nats.Conn, req *nats.Msg, trust ReplyTrust, onRefused func(error), res any) error {
	subject := req.Subject
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	inbox, replies, done, err := trustedMux(nc)
	if err != nil {
		return Errorf(ErrUnavailable, "request on %s: %v", subject, err)
	}
	defer done()
	req.Reply = inbox
	nonce := ""
	if req.Header != nil {
		nonce = req.Header.Get(HeaderNonce)
	}
	if err := nc.PublishMsg(req); err != nil {
		return Errorf(ErrUnavailable, "request on %s: %v", subject, err)
	}
	var refused error
	for {
		var m *nats.Msg
		select {
		case m = <-replies:
		case <-ctx.Done():
			if refused != nil {
				return Errorf(ErrUnavailable, "no trusted answer on %s in time (ignored: %v)", subject, refused)
			}
			return Errorf(ErrUnavailable, "no answer on %s in time", subject)
		}
		if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
			return Errorf(ErrUnavailable, "nothing answers on %s (is the market running? try `mrmarket up`)", subject)
		}
		key, cert, err := VerifyReply(m, inbox, nonce)
		if err == nil {
			err = trust(key, cert)
		}
		if err != nil {
			refused = err
			if onRefused != nil {
				onRefused(err)
			}
			continue
		}
		return DecodeReply(m.Data, res)
	}
}

// DoAsTrusted is DoAs whose answer must satisfy trust (CallTrusted); a nil
// trust is DoAs.
func DoAsTrusted[Rep any](ctx context.Context, nc *nats.Conn, fixed *Signer, keys Keyring, who As, subject string, req Message, trust ReplyTrust, onRefused func(error)) (Rep, error) {
	if trust == nil {
		return DoAs[Rep](ctx, nc, fixed, keys, who, subject, req)
	}
	var rep Rep
	var s *Signer
	if who != (As{}) {
		var err error
		if s, err = SignerFor(fixed, keys, who.Role, who.Name); err != nil {
			return rep, err
		}
	}
	req.stamp()
	body, err := json.Marshal(req)
	if err != nil {
		return rep, Errorf(ErrBadRequest, "encoding request for %s: %v", subject, err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = body
	if s != nil {
		if msg, err = s.Sign(subject, body); err != nil {
			return rep, Errorf(ErrInternal, "signing request for %s: %v", subject, err)
		}
	}
	err = CallTrusted(ctx, nc, msg, trust, onRefused, &rep)
	return rep, err
}

// recordCache remembers the records that opened (a service attaches the
// same record to every reply), so a trusted call costs one signature check,
// the reply's, not two. It holds at most maxOpenedRecords and starts over
// when full.
type recordCache struct {
	mu sync.Mutex
	m  map[string]Principal
}

const maxOpenedRecords = 1024

var openedRecords recordCache

// open is OpenPrincipal, remembered by (anchor, key, record signature).
func (c *recordCache) open(cert *Sealed, adminKey, key string) (Principal, error) {
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
		c.m = map[string]Principal{}
	}
	c.m[k] = p
	c.mu.Unlock()
	return p, nil
}

// The trusted calls of a connection share one subscription on a wildcard
// inbox (as nats.go's own requests do), each call its own token and
// channel: no subscription per call on the hot paths (captures, bids).
type replyMux struct {
	mu     sync.Mutex
	prefix string // "<inbox>." — a call's inbox is prefix + token
	calls  map[string]chan *nats.Msg
	next   uint64
	sub    *nats.Subscription
}

// replyMuxes is each connection's mux.
var replyMuxes sync.Map // *nats.Conn → *replyMux

// maxRepliesPerCall bounds what one call buffers: forged replies beyond it
// are dropped (the call still takes a trusted one arriving later, as long
// as it waits).
const maxRepliesPerCall = 16

// trustedMux registers a call on nc's mux: its inbox, the channel of the
// replies to it, and done to unregister.
func trustedMux(nc *nats.Conn) (string, <-chan *nats.Msg, func(), error) {
	v, _ := replyMuxes.LoadOrStore(nc, &replyMux{})
	mux := v.(*replyMux)
	mux.mu.Lock()
	defer mux.mu.Unlock()
	if mux.sub == nil || !mux.sub.IsValid() {
		mux.prefix = nc.NewInbox() + "."
		mux.calls = map[string]chan *nats.Msg{}
		sub, err := nc.Subscribe(mux.prefix+"*", mux.deliver)
		if err != nil {
			return "", nil, nil, err
		}
		mux.sub = sub
	}
	mux.next++
	token := strconv.FormatUint(mux.next, 36)
	ch := make(chan *nats.Msg, maxRepliesPerCall)
	mux.calls[token] = ch
	return mux.prefix + token, ch, func() {
		mux.mu.Lock()
		delete(mux.calls, token)
		mux.mu.Unlock()
	}, nil
}

// deliver hands a reply to its call, if it still waits and has room.
func (mux *replyMux) deliver(m *nats.Msg) {
	mux.mu.Lock()
	ch, ok := mux.calls[strings.TrimPrefix(m.Subject, mux.prefix)]
	mux.mu.Unlock()
	if !ok {
		return
	}
	select {
	case ch <- m:
	default:
	}
}
