package signing_test

import (
	"errors"
	"testing"

	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestTamperingASealFails: a sealed record whose purpose, time, body, key
// or signature changed no longer opens; one sealed for another purpose is
// refused as such.
func TestTamperingASealFails(t *testing.T) {
	s, other := signer(t), signer(t)
	sealed := s.Seal("plan/p-1", []byte(`{"plan":"p-1"}`))
	if key, err := signing.Open(sealed, "plan/p-1"); err != nil || key != s.Public() {
		t.Fatalf("untouched: %s %v", key, err)
	}
	if _, err := signing.Open(sealed, "plan/p-2"); !errors.Is(err, signing.ErrWrongPlace) || !errors.Is(err, wire.ErrForbidden) {
		t.Errorf("opened for another plan: %v", err)
	}
	for what, tamper := range map[string]func(s *wire.Sealed){
		"purpose":    func(s *wire.Sealed) { s.Purpose = "plan/p-2" },
		"time":       func(s *wire.Sealed) { s.Time++ },
		"body":       func(s *wire.Sealed) { s.Body = []byte(`{"plan":"p-2"}`) },
		"key":        func(s *wire.Sealed) { s.Key = other.Public() },
		"signature":  func(s *wire.Sealed) { s.Sig = other.Seal(s.Purpose, s.Body).Sig },
		"not a key":  func(s *wire.Sealed) { s.Key = "Unot-a-key" },
		"not base64": func(s *wire.Sealed) { s.Sig = "!!" },
	} {
		c := sealed
		c.Body = append([]byte(nil), sealed.Body...)
		tamper(&c)
		if _, err := signing.Open(c, c.Purpose); !errors.Is(err, signing.ErrBadSeal) || !errors.Is(err, wire.ErrForbidden) {
			t.Errorf("%s changed: %v, want a bad seal", what, err)
		}
	}
}
