package signing_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// reply is body signed by s as the reply on inbox to a request with nonce,
// with s's record cert.
func reply(s *signing.Signer, inbox, nonce string, body []byte, cert *wire.Sealed) *nats.Msg {
	m := nats.NewMsg(inbox)
	m.Data, m.Header = body, s.SignReply(inbox, nonce, body, cert)
	return m
}

// TestTamperingAReplyFails: a signed reply verifies only on its inbox, for
// its request's nonce, with its body and its signer's key.
func TestTamperingAReplyFails(t *testing.T) {
	admin, bank, other := signer(t), signer(t), signer(t)
	cert := signing.SealPrincipal(admin, bank.Public(), "bank", wire.RoleBank)
	body := wire.EncodeReply(map[string]int{"n": 1}, nil)
	key, got, err := signing.VerifyReply(reply(bank, "_INBOX.a.1", "n1", body, cert), "_INBOX.a.1", "n1")
	if err != nil || key != bank.Public() || got == nil || got.Sig != cert.Sig {
		t.Fatalf("untouched: %s %+v %v", key, got, err)
	}
	for what, c := range map[string]struct {
		m            *nats.Msg
		inbox, nonce string
	}{
		"another inbox":    {reply(bank, "_INBOX.a.2", "n1", body, cert), "_INBOX.a.1", "n1"},
		"signed for other": {reply(bank, "_INBOX.a.2", "n1", body, cert), "_INBOX.a.2", "n2"},
		"another nonce":    {reply(bank, "_INBOX.a.1", "n2", body, cert), "_INBOX.a.1", "n1"},
		"unsigned":         {&nats.Msg{Subject: "_INBOX.a.1", Data: body}, "_INBOX.a.1", "n1"},
		"another body":     {withData(reply(bank, "_INBOX.a.1", "n1", body, cert), wire.EncodeReply(nil, wire.ErrNotFound)), "_INBOX.a.1", "n1"},
		"another key":      {withHeader(reply(bank, "_INBOX.a.1", "n1", body, cert), signing.HeaderKey, other.Public()), "_INBOX.a.1", "n1"},
		"a bad record":     {withHeader(reply(bank, "_INBOX.a.1", "n1", body, cert), signing.HeaderCert, "{"), "_INBOX.a.1", "n1"},
		"another's sig": {withHeader(reply(bank, "_INBOX.a.1", "n1", body, cert), signing.HeaderSig,
			other.SignReply("_INBOX.a.1", "n1", body, nil).Get(signing.HeaderSig)), "_INBOX.a.1", "n1"},
	} {
		if _, _, err := signing.VerifyReply(c.m, c.inbox, c.nonce); !errors.Is(err, signing.ErrReplyTrust) || !errors.Is(err, wire.ErrForbidden) {
			t.Errorf("%s: %v, want refused", what, err)
		}
	}
}

func withData(m *nats.Msg, data []byte) *nats.Msg { m.Data = data; return m }

func withHeader(m *nats.Msg, k, v string) *nats.Msg { m.Header.Set(k, v); return m }

// TestReplyTrust: TrustRole believes a principal of its role whose record
// the anchor sealed, TrustPrincipal only the one principal it names.
func TestReplyTrust(t *testing.T) {
	admin, bank, agent, mallory := signer(t), signer(t), signer(t), signer(t)
	bankCert := signing.SealPrincipal(admin, bank.Public(), "bank", wire.RoleBank)
	agentCert := signing.SealPrincipal(admin, agent.Public(), "host-1", wire.RoleAgent)
	selfMade := signing.SealPrincipal(mallory, mallory.Public(), "bank", wire.RoleBank)
	trustBank := signing.TrustRole(admin.Public(), wire.RoleBank)
	trustHost1 := signing.TrustPrincipal(admin.Public(), wire.RoleAgent, "host-1")
	trustHost2 := signing.TrustPrincipal(admin.Public(), wire.RoleAgent, "host-2")
	for _, c := range []struct {
		what  string
		trust signing.ReplyTrust
		key   string
		cert  *wire.Sealed
		ok    bool
	}{
		{"the bank", trustBank, bank.Public(), bankCert, true},
		{"the bank twice (cached)", trustBank, bank.Public(), bankCert, true},
		{"an agent for the bank", trustBank, agent.Public(), agentCert, false},
		{"no record", trustBank, bank.Public(), nil, false},
		{"a record of another key", trustBank, mallory.Public(), bankCert, false},
		{"a record sealed by itself", trustBank, mallory.Public(), selfMade, false},
		{"host-1's agent", trustHost1, agent.Public(), agentCert, true},
		{"host-1's agent for host-2", trustHost2, agent.Public(), agentCert, false},
		{"the bank for host-1", trustHost1, bank.Public(), bankCert, false},
	} {
		err := c.trust(c.key, c.cert)
		if c.ok != (err == nil) || err != nil && !errors.Is(err, signing.ErrReplyTrust) {
			t.Errorf("%s: %v", c.what, err)
		}
	}
}
