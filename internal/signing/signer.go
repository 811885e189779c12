package signing

import (
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/mrmarket/mrmarket/internal/wire"
)

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
	if err := wire.CheckPublicKey(pub); err != nil {
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

// SignNonce signs the nonce a NATS server sends when a connection
// authenticates with s's NKey (nats.Nkey's signature callback): the
// connection proves it holds the principal's key, as every request it
// signs does.
func (s *Signer) SignNonce(nonce []byte) ([]byte, error) {
	return ed25519.Sign(s.priv, nonce), nil
}
