package signing_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// The costs of the signatures on the hot paths: every request is signed
// and verified, every plan record and host state sealed and opened, every
// trusted answer verified with its signer's record. Run with -bench .
// -benchmem; docs/SECURITY.md keeps the figures.

var benchBody = []byte(`{"v":1,"host":"host-1","tick":42,"legs":[{"id":"h-1/host-1/vm1/42","hold":"h-1","vm":"vm1","cumulative_micro":700}]}`)

func BenchmarkSign(b *testing.B) {
	s := signer(b)
	for b.Loop() {
		if _, err := s.Sign(wire.BankCapture, benchBody); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	s := signer(b)
	m, err := s.Sign(wire.BankCapture, benchBody)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	for b.Loop() {
		if _, err := signing.VerifyMsg(m, now); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSeal(b *testing.B) {
	s := signer(b)
	for b.Loop() {
		s.Seal("plan/p-1", benchBody)
	}
}

func BenchmarkOpenPrincipal(b *testing.B) {
	admin, bank := signer(b), signer(b)
	cert := signing.SealPrincipal(admin, bank.Public(), "bank", wire.RoleBank)
	for b.Loop() {
		if _, err := signing.OpenPrincipal(cert, admin.Public(), bank.Public()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyReply is a trusted call's check of an answer: its
// signature, then its signer's record (remembered after the first).
func BenchmarkVerifyReply(b *testing.B) {
	admin, bank := signer(b), signer(b)
	cert := signing.SealPrincipal(admin, bank.Public(), "bank", wire.RoleBank)
	m := nats.NewMsg("_INBOX.a.1")
	m.Data, m.Header = benchBody, bank.SignReply("_INBOX.a.1", "n1", benchBody, cert)
	trust := signing.TrustRole(admin.Public(), wire.RoleBank)
	for b.Loop() {
		key, c, err := signing.VerifyReply(m, "_INBOX.a.1", "n1")
		if err == nil {
			err = trust(key, c)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}
