package signing

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// The signed registry. The trust anchor of a market is the admin's public
// key (creds/admin.pub, config AdminKey). A principal record is a Sealed
// signed by that key for PrincipalPurpose(key), its body the principal's
// key, name and role (SealPrincipal). Whoever learns a principal over the
// network — from a whois answer, from a reply's Mrm-Cert header — trusts it
// only if the record opens for the key asked about and was sealed by the
// anchor (OpenPrincipal): a forged whois answer, or a record of another key,
// makes nobody a principal. The anchor key itself is the admin without any
// record.
//
// Re-registration: the record sealed last wins. A bank stores a record only
// if it was sealed no earlier than the one it holds (an older record
// replayed is refused as a conflict), so a demoted principal cannot be
// promoted again by replaying its old record to the bank.

// Errors of the registry; all are forbidden.
var (
	ErrNoCert    = fmt.Errorf("%w: principal record not sealed by the admin key", wire.ErrForbidden)
	ErrCertKey   = fmt.Errorf("%w: principal record names another key", wire.ErrForbidden)
	ErrNotAnchor = fmt.Errorf("%w: principal record sealed by a key other than the admin's", wire.ErrForbidden)
	ErrCertBody  = fmt.Errorf("%w: principal record does not match", wire.ErrForbidden)
)

// PrincipalPurpose is the seal purpose of key's principal record.
func PrincipalPurpose(key string) string { return "principal/" + key }

// principalBody is the sealed body of a principal record.
type principalBody struct {
	Key  string `json:"key"`
	Name string `json:"name"`
	Role string `json:"role"`
}

// SealPrincipal is the admin's record that key is principal name with role.
func SealPrincipal(admin *Signer, key, name, role string) *wire.Sealed {
	body, _ := json.Marshal(principalBody{Key: key, Name: name, Role: role}) // strings: cannot fail
	s := admin.Seal(PrincipalPurpose(key), body)
	return &s
}

// OpenPrincipal checks cert as key's principal record sealed by the anchor
// admin key and returns the principal it names (Cert set to cert). The
// anchor key itself needs no record: it is the admin.
func OpenPrincipal(cert *wire.Sealed, adminKey, key string) (wire.Principal, error) {
	if key == adminKey && adminKey != "" && (cert == nil || cert.Key == adminKey) {
		p := wire.Principal{Key: key, Name: "admin", Role: wire.RoleAdmin, Cert: cert}
		if cert != nil {
			if b, err := openPrincipalBody(cert, key); err == nil && b.Role == wire.RoleAdmin {
				p.Name = b.Name
			}
		}
		return p, nil
	}
	if cert == nil {
		return wire.Principal{}, fmt.Errorf("%w (key %s)", ErrNoCert, key)
	}
	if cert.Key != adminKey || adminKey == "" {
		return wire.Principal{}, fmt.Errorf("%w (key %s)", ErrNotAnchor, key)
	}
	b, err := openPrincipalBody(cert, key)
	if err != nil {
		return wire.Principal{}, err
	}
	return wire.Principal{Key: b.Key, Name: b.Name, Role: b.Role, Cert: cert}, nil
}

func openPrincipalBody(cert *wire.Sealed, key string) (principalBody, error) {
	if _, err := Open(*cert, PrincipalPurpose(key)); err != nil {
		return principalBody{}, err
	}
	var b principalBody
	dec := json.NewDecoder(bytes.NewReader(cert.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return principalBody{}, fmt.Errorf("%w: %v", ErrCertBody, err)
	}
	if b.Key != key {
		return principalBody{}, fmt.Errorf("%w: record of %s, asked about %s", ErrCertKey, b.Key, key)
	}
	return b, nil
}

// CheckPrincipalRequest checks that r carries the anchor's record of
// exactly what it registers (key, name, role). The anchor registering
// itself as admin needs no record.
func CheckPrincipalRequest(r *wire.PrincipalRequest, adminKey string) error {
	if r.Key == adminKey && r.Role != wire.RoleAdmin {
		return fmt.Errorf("%w: the admin key is the admin", ErrCertBody)
	}
	p, err := OpenPrincipal(r.Cert, adminKey, r.Key)
	if err != nil {
		return err
	}
	if r.Cert == nil { // the anchor
		return nil
	}
	if p.Name != r.Name || p.Role != r.Role {
		return fmt.Errorf("%w: record says %s %s, request %s %s", ErrCertBody, p.Role, p.Name, r.Role, r.Name)
	}
	return nil
}
