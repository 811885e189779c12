package signing_test

import (
	"errors"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/signing"
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
