package rpc_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

func signer(t *testing.T) *signing.Signer {
	t.Helper()
	s, err := signing.NewUserSigner()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCallTrustedIgnoresForgedReplies: a forged answer (unsigned, or
// signed by a principal of another role) is ignored and the real one,
// signed by the bank, is taken; a reply signed for another request is
// refused.
func TestCallTrustedIgnoresForgedReplies(t *testing.T) {
	_, nc := natstest.Start(t)
	admin, bank, mallory := signer(t), signer(t), signer(t)
	bankCert := signing.SealPrincipal(admin, bank.Public(), "bank", wire.RoleBank)
	malloryCert := signing.SealPrincipal(admin, mallory.Public(), "mallory", wire.RoleUser)
	forged := wire.EncodeReply(nil, wire.Errorf(wire.ErrNotFound, "no such hold"))
	real := wire.EncodeReply(map[string]int{"n": 1}, nil)
	// The forgers answer first; the bank a moment later.
	sub, err := nc.Subscribe("svc", func(m *nats.Msg) {
		_ = m.Respond(forged)
		r := nats.NewMsg(m.Reply)
		r.Data, r.Header = forged, mallory.SignReply(m.Reply, m.Header.Get(signing.HeaderNonce), forged, malloryCert)
		_ = nc.PublishMsg(r)
		r = nats.NewMsg(m.Reply)
		r.Data, r.Header = forged, bank.SignReply("_INBOX.other", m.Header.Get(signing.HeaderNonce), forged, bankCert)
		_ = nc.PublishMsg(r)
		r = nats.NewMsg(m.Reply)
		r.Data, r.Header = real, bank.SignReply(m.Reply, m.Header.Get(signing.HeaderNonce), real, bankCert)
		_ = nc.PublishMsg(r)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	caller := signer(t)
	req, err := caller.Sign("svc", []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	var refused []error
	res, err := rpc.Request[map[string]int](context.Background(), nc, "svc", nil, rpc.Verbatim(req),
		rpc.Trusted(signing.TrustRole(admin.Public(), wire.RoleBank), func(err error) { refused = append(refused, err) }))
	if err != nil || res["n"] != 1 {
		t.Fatalf("the bank's answer: %v %v", res, err)
	}
	if len(refused) != 3 {
		t.Fatalf("ignored %d forged replies, want 3: %v", len(refused), refused)
	}
	for _, e := range refused {
		if !errors.Is(e, signing.ErrReplyTrust) {
			t.Errorf("refusal %v", e)
		}
	}
}

// TestCallTrustedWithNobodyAnswering fails fast as unavailable: on NATS's
// no-responders status, not at the end of the attempt's time-out (which
// says "no answer … in time"), whatever the machine's load.
func TestCallTrustedWithNobodyAnswering(t *testing.T) {
	_, nc := natstest.Start(t)
	admin := signer(t)
	_, err := rpc.Request[struct{}](context.Background(), nc, "nobody", nil, rpc.Verbatim(nats.NewMsg("nobody")),
		rpc.Trusted(signing.TrustRole(admin.Public(), wire.RoleBank), nil))
	if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "nothing answers") {
		t.Fatalf("nobody answering: %v", err)
	}
}
