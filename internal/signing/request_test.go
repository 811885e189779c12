package signing_test

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestSignaturesAreNKeys: what Signer signs verifies with plain nkeys, and
// a tampered message does not.
func TestSignaturesAreNKeys(t *testing.T) {
	s, err := signing.NewUserSigner()
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Sign("mrm.v1.bank.grant", []byte(`{"v":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := signing.VerifyMsg(m, time.Now()); err != nil || c.Key != s.Public() {
		t.Fatalf("verify: %+v %v", c, err)
	}
	m.Data = []byte(`{"v":2}`)
	if _, err := signing.VerifyMsg(m, time.Now()); !errors.Is(err, signing.ErrBadSignature) {
		t.Fatalf("tampered: %v", err)
	}
}

// TestPayloadsAreTheWireFormat pins what each kind of signature covers, as
// an old build computes it: a request, a sealed record and a reply each
// verify with plain nkeys over the payload written out here, so a change of
// payload (which would stop old and new builds from verifying each other)
// fails this test.
func TestPayloadsAreTheWireFormat(t *testing.T) {
	s := signer(t)
	pub, err := nkeys.FromPublicKey(s.Public())
	if err != nil {
		t.Fatal(err)
	}
	verify := func(what, sig string, payload string) {
		t.Helper()
		raw, err := base64.RawURLEncoding.DecodeString(sig)
		if err != nil {
			t.Fatalf("%s: signature not base64url: %v", what, err)
		}
		if err := pub.Verify([]byte(payload), raw); err != nil {
			t.Errorf("%s: does not verify over %q: %v", what, payload, err)
		}
	}
	m, err := s.Sign("mrm.v1.bank.grant", []byte(`{"v":1}`))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Header
	if h.Get("Mrm-Key") != s.Public() || len(h) != 4 {
		t.Fatalf("request headers %v", h)
	}
	verify("request", h.Get("Mrm-Sig"), "mrm-sig-v1\nmrm.v1.bank.grant\n"+h.Get("Mrm-Time")+"\n"+h.Get("Mrm-Nonce")+"\n"+`{"v":1}`)

	sealed := s.Seal("host-state/host-1", []byte(`{"v":1}`))
	verify("seal", sealed.Sig, "mrm-seal-v1\nhost-state/host-1\n"+strconv.FormatInt(sealed.Time, 10)+"\n"+`{"v":1}`)

	rh := s.SignReply("_INBOX.x.1", "nonce", []byte(`{"v":1}`), nil)
	if rh.Get("Mrm-Key") != s.Public() || rh.Get("Mrm-Cert") != "" {
		t.Fatalf("reply headers %v", rh)
	}
	verify("reply", rh.Get("Mrm-Sig"), "mrm-reply-v1\n_INBOX.x.1\nnonce\n"+`{"v":1}`)

	nonce := []byte("server nonce")
	sig, err := s.SignNonce(nonce)
	if err != nil || pub.Verify(nonce, sig) != nil {
		t.Errorf("connection nonce: %v", err)
	}
}

// TestTamperingAnySignedPartFails: a request whose subject, body, time,
// nonce, key or signature changed after signing is refused as a bad
// signature, and one missing any signing header is refused as incomplete.
func TestTamperingAnySignedPartFails(t *testing.T) {
	s, other := signer(t), signer(t)
	now := time.Now()
	sign := func() *nats.Msg {
		m, err := s.Sign("mrm.v1.bank.grant", []byte(`{"v":1,"id":"g"}`))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if c, err := signing.VerifyMsg(sign(), now); err != nil || !c.Signed() || c.Key != s.Public() || c.Nonce == "" {
		t.Fatalf("untouched: %+v %v", c, err)
	}
	for what, tamper := range map[string]func(m *nats.Msg){
		"subject": func(m *nats.Msg) { m.Subject = "mrm.v1.bank.hold" },
		"body":    func(m *nats.Msg) { m.Data = []byte(`{"v":1,"id":"h"}`) },
		"time":    func(m *nats.Msg) { m.Header.Set(signing.HeaderTime, m.Header.Get(signing.HeaderTime)+"1") },
		"nonce":   func(m *nats.Msg) { m.Header.Set(signing.HeaderNonce, "another") },
		"key":     func(m *nats.Msg) { m.Header.Set(signing.HeaderKey, other.Public()) },
		"signature": func(m *nats.Msg) {
			m.Header.Set(signing.HeaderSig, other.SignReply("x", "", nil, nil).Get(signing.HeaderSig))
		},
		"not a key":   func(m *nats.Msg) { m.Header.Set(signing.HeaderKey, "Unot-a-key") },
		"not a time":  func(m *nats.Msg) { m.Header.Set(signing.HeaderTime, "yesterday") },
		"not base64":  func(m *nats.Msg) { m.Header.Set(signing.HeaderSig, "!!") },
		"no time":     func(m *nats.Msg) { m.Header.Del(signing.HeaderTime) },
		"no nonce":    func(m *nats.Msg) { m.Header.Del(signing.HeaderNonce) },
		"no key":      func(m *nats.Msg) { m.Header.Del(signing.HeaderKey) },
		"no sig":      func(m *nats.Msg) { m.Header.Del(signing.HeaderSig) },
		"long nonce":  func(m *nats.Msg) { m.Header.Set(signing.HeaderNonce, strings.Repeat("n", 65)) },
		"other's sig": func(m *nats.Msg) { m.Header = otherSigned(t, other, m) },
	} {
		m := sign()
		tamper(m)
		if _, err := signing.VerifyMsg(m, now); !errors.Is(err, signing.ErrBadSignature) || !errors.Is(err, wire.ErrForbidden) {
			t.Errorf("%s tampered: %v, want a bad signature", what, err)
		}
	}
	// No signing header at all is an unsigned request: the receiver decides.
	if c, err := signing.Verify("mrm.v1.bank.grant", nats.Header{}, []byte(`{}`), now); err != nil || c.Signed() {
		t.Errorf("unsigned: %+v %v", c, err)
	}
}

// nextNano is the signing time ts one nanosecond later: still a time, no
// longer the one signed.
func nextNano(ts string) string {
	n, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		panic(err)
	}
	return strconv.FormatInt(n+1, 10)
}

// otherSigned is m's headers signed by other for m's subject and body but
// sent with the original key: a signature that is valid, of someone else.
func otherSigned(t *testing.T, other *signing.Signer, m *nats.Msg) nats.Header {
	o, err := other.Sign(m.Subject, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	o.Header.Set(signing.HeaderKey, m.Header.Get(signing.HeaderKey))
	return o.Header
}

// TestStaleRequestsAreRefused: a request signed further than MaxSkew from
// the receiver's clock, in either direction, is stale.
func TestStaleRequestsAreRefused(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		skew  time.Duration
		stale bool
	}{{0, false}, {-signing.MaxSkew + time.Second, false}, {signing.MaxSkew - time.Second, false},
		{-signing.MaxSkew - time.Second, true}, {signing.MaxSkew + time.Second, true}, {-time.Hour, true}} {
		s := signer(t)
		s.Now = func() time.Time { return now.Add(c.skew) }
		m, err := s.Sign("mrm.v1.bank.grant", []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		_, err = signing.VerifyMsg(m, now)
		if stale := errors.Is(err, signing.ErrStale); stale != c.stale || !c.stale && err != nil {
			t.Errorf("signed %s from the receiver's clock: %v", c.skew, err)
		}
	}
}

// TestNonceCacheRefusesReplays: a signer's nonce is taken once; another
// nonce, or the same nonce of another signer, is not a replay.
func TestNonceCacheRefusesReplays(t *testing.T) {
	var cache signing.NonceCache
	now := time.Now()
	alice, bob := signer(t).Public(), signer(t).Public()
	first := signing.Caller{Key: alice, Time: now, Nonce: "n1"}
	if err := cache.Use(first, now); err != nil {
		t.Fatal(err)
	}
	if err := cache.Use(first, now.Add(time.Second)); !errors.Is(err, signing.ErrReplay) || !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("the same request again: %v", err)
	}
	for _, c := range []signing.Caller{{Key: alice, Time: now, Nonce: "n2"}, {Key: bob, Time: now, Nonce: "n1"}} {
		if err := cache.Use(c, now); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	// Pruning keeps what is fresh: a replay within MaxSkew is still seen.
	later := now.Add(signing.MaxSkew + time.Second)
	recent := signing.Caller{Key: alice, Time: later, Nonce: "n3"}
	if err := cache.Use(recent, later); err != nil {
		t.Fatal(err)
	}
	if err := cache.Use(recent, later.Add(signing.MaxSkew+time.Second)); !errors.Is(err, signing.ErrReplay) {
		t.Fatalf("a replay after a prune: %v", err)
	}
}

// TestSignedRequestTravels: a request captured as received verifies later,
// anywhere, from its recorded headers; changing any recorded part breaks
// it, and an unsigned request is not captured.
func TestSignedRequestTravels(t *testing.T) {
	s, other := signer(t), signer(t)
	m, err := s.Sign(wire.BrokerSpend, []byte(`{"v":1,"user":"alice"}`))
	if err != nil {
		t.Fatal(err)
	}
	r, ok := signing.SignedRequestOf(m.Subject, m.Header, m.Data)
	if !ok {
		t.Fatal("a signed request not captured")
	}
	if c, err := signing.CheckRequest(r); err != nil || c.Key != s.Public() || c.Nonce != m.Header.Get(signing.HeaderNonce) {
		t.Fatalf("check: %+v %v", c, err)
	}
	// Long after: CheckRequest does not look at freshness; Verify does.
	if _, err := signing.Verify(r.Subject, signing.RequestHeader(r), r.Body, time.Now().Add(time.Hour)); !errors.Is(err, signing.ErrStale) {
		t.Fatalf("its headers verified an hour later: %v", err)
	}
	if _, err := signing.Verify(r.Subject, signing.RequestHeader(r), r.Body, time.Now()); err != nil {
		t.Fatalf("its headers verified now: %v", err)
	}
	for what, tamper := range map[string]func(r *wire.SignedRequest){
		"subject":    func(r *wire.SignedRequest) { r.Subject = wire.BrokerCancel },
		"body":       func(r *wire.SignedRequest) { r.Body = []byte(`{"v":1,"user":"bob"}`) },
		"time":       func(r *wire.SignedRequest) { r.Time = nextNano(r.Time) },
		"nonce":      func(r *wire.SignedRequest) { r.Nonce = "other" },
		"key":        func(r *wire.SignedRequest) { r.Key = other.Public() },
		"sig":        func(r *wire.SignedRequest) { r.Sig = r.Sig[1:] },
		"no nonce":   func(r *wire.SignedRequest) { r.Nonce = "" },
		"not a time": func(r *wire.SignedRequest) { r.Time = "now" },
	} {
		c := r
		tamper(&c)
		if _, err := signing.CheckRequest(c); !errors.Is(err, signing.ErrBadSignature) {
			t.Errorf("%s changed: %v, want a bad signature", what, err)
		}
	}
	if _, err := signing.CheckRequest(wire.SignedRequest{Subject: wire.BrokerSpend, Body: m.Data}); !errors.Is(err, signing.ErrUnsigned) {
		t.Errorf("unsigned: %v", err)
	}
	if _, ok := signing.SignedRequestOf(m.Subject, nats.Header{}, m.Data); ok {
		t.Error("an unsigned request captured as signed")
	}
}
