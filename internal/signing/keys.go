package signing

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// Keyring finds the signer of a principal by role and name.
type Keyring interface {
	Signer(role, name string) (*Signer, error)
}

// CredsDir is a Keyring over a credentials directory, as `mrmarket up`
// writes it: admin.nk (and admin.pub, the trust anchor), bank.nk, broker.nk, agents/<host>.nk and users/<name>.nk, each
// an NKey seed readable by its owner only.
type CredsDir string

// Path is where the credentials of (role, name) live.
func (d CredsDir) Path(role, name string) string {
	switch role {
	case wire.RoleAdmin, wire.RoleBroker, wire.RoleBank:
		return filepath.Join(string(d), role+".nk")
	case wire.RoleAgent:
		return filepath.Join(string(d), "agents", name+".nk")
	default:
		return filepath.Join(string(d), "users", name+".nk")
	}
}

// Signer loads the credentials of (role, name).
func (d CredsDir) Signer(role, name string) (*Signer, error) {
	p := d.Path(role, name)
	s, err := LoadSigner(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no credentials for %s %s (%s); `mrmarket up` writes them, `mrmarket bank principal add` adds one", wire.ErrForbidden, role, name, p)
	}
	return s, err
}

// Ensure loads the credentials of (role, name), creating them if missing.
func (d CredsDir) Ensure(role, name string) (*Signer, error) {
	s, err := d.Signer(role, name)
	if err == nil {
		return s, nil
	}
	if !errors.Is(err, wire.ErrForbidden) {
		return nil, err
	}
	if s, err = NewUserSigner(); err != nil {
		return nil, err
	}
	if err := SaveSigner(d.Path(role, name), s); err != nil {
		return nil, fmt.Errorf("writing credentials: %w", err)
	}
	return s, nil
}

// SignerFor picks the signer for a request: fixed when set, else the one
// keys hold for (role, name), else none (an unsigned request).
func SignerFor(fixed *Signer, keys Keyring, role, name string) (*Signer, error) {
	if fixed != nil {
		return fixed, nil
	}
	if keys == nil {
		return nil, nil
	}
	return keys.Signer(role, name)
}

// AdminPubFile is the name of the anchor's public key file in a
// credentials directory.
const AdminPubFile = "admin.pub"

// AdminKeyFile reads an anchor public key file (creds/admin.pub).
func AdminKeyFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the admin key: %w", err)
	}
	k := strings.TrimSpace(string(b))
	if err := wire.CheckPublicKey(k); err != nil {
		return "", fmt.Errorf("admin key %s: %w", path, err)
	}
	return k, nil
}

// AdminKey is the anchor of a credentials directory: its admin.pub, else
// the public key of its admin.nk; "" if it has neither.
func (d CredsDir) AdminKey() (string, error) {
	k, err := AdminKeyFile(filepath.Join(string(d), AdminPubFile))
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return k, err
	}
	s, err := d.Signer(wire.RoleAdmin, "admin")
	if err != nil {
		if errors.Is(err, wire.ErrForbidden) {
			return "", nil
		}
		return "", err
	}
	return s.Public(), nil
}

// WriteAdminKey writes admin's public key to the directory's admin.pub.
func (d CredsDir) WriteAdminKey(admin *Signer) error {
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(string(d), AdminPubFile), []byte(admin.Public()+"\n"), 0o644)
}
