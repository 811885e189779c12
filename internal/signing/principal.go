package signing

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

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
//
// Revocation is a record too: the admin seals the key's {key, name, role}
// marked revoked (SealRevocation), and it wins like any newer record. It is
// final: a bank refuses every later record of a revoked key, so no replayed
// or newly sealed record makes the key a principal again (a principal that
// needs one gets a new key: a rotation). OpenPrincipal refuses a revoked
// record (ErrRevoked): whoever checks records refuses the key without
// asking anyone.

// Errors of the registry; all are forbidden.
var (
	ErrNoCert     = fmt.Errorf("%w: principal record not sealed by the admin key", wire.ErrForbidden)
	ErrCertKey    = fmt.Errorf("%w: principal record names another key", wire.ErrForbidden)
	ErrNotAnchor  = fmt.Errorf("%w: principal record sealed by a key other than the admin's", wire.ErrForbidden)
	ErrCertBody   = fmt.Errorf("%w: principal record does not match", wire.ErrForbidden)
	ErrRevoked    = fmt.Errorf("%w: principal key revoked", wire.ErrForbidden)
	ErrNotRevoked = fmt.Errorf("%w: principal record is not a revocation", wire.ErrForbidden)
)

// PrincipalPurpose is the seal purpose of key's principal record.
func PrincipalPurpose(key string) string { return "principal/" + key }

// principalBody is the sealed body of a principal record.
type principalBody struct {
	Key     string `json:"key"`
	Name    string `json:"name"`
	Role    string `json:"role"`
	Revoked bool   `json:"revoked,omitempty"`
}

// SealPrincipal is the admin's record that key is principal name with role.
func SealPrincipal(admin *Signer, key, name, role string) *wire.Sealed {
	return sealPrincipalBody(admin, principalBody{Key: key, Name: name, Role: role})
}

// SealRevocation is the admin's record that key, principal name with role,
// is revoked.
func SealRevocation(admin *Signer, key, name, role string) *wire.Sealed {
	return sealPrincipalBody(admin, principalBody{Key: key, Name: name, Role: role, Revoked: true})
}

func sealPrincipalBody(admin *Signer, b principalBody) *wire.Sealed {
	body, _ := json.Marshal(b) // strings and a bool: cannot fail
	s := admin.Seal(PrincipalPurpose(b.Key), body)
	return &s
}

// OpenPrincipal checks cert as key's principal record sealed by the anchor
// admin key and returns the principal it names (Cert set to cert); a
// revocation record is refused (ErrRevoked). The anchor key itself needs no
// record: it is the admin.
func OpenPrincipal(cert *wire.Sealed, adminKey, key string) (wire.Principal, error) {
	p, revoked, err := openRecord(cert, adminKey, key)
	if err == nil && revoked {
		err = fmt.Errorf("%w (key %s, %s %s, revoked by a record sealed %s)", ErrRevoked, key, p.Role, p.Name, cert.At().UTC().Format(time.RFC3339))
	}
	if err != nil {
		return wire.Principal{}, err
	}
	return p, nil
}

// OpenRevocation checks cert as the anchor's revocation record of key and
// returns the principal it revokes (Cert set to cert).
func OpenRevocation(cert *wire.Sealed, adminKey, key string) (wire.Principal, error) {
	if key == adminKey {
		return wire.Principal{}, fmt.Errorf("%w: the admin key is the trust anchor", ErrNotRevoked)
	}
	p, revoked, err := openRecord(cert, adminKey, key)
	if err == nil && !revoked {
		err = fmt.Errorf("%w (key %s)", ErrNotRevoked, key)
	}
	if err != nil {
		return wire.Principal{}, err
	}
	return p, nil
}

// openRecord opens cert as key's record sealed by the anchor, revoked or
// not.
func openRecord(cert *wire.Sealed, adminKey, key string) (p wire.Principal, revoked bool, err error) {
	if key == adminKey && adminKey != "" && (cert == nil || cert.Key == adminKey) {
		// The anchor is the admin whatever a record says: nothing revokes it.
		p := wire.Principal{Key: key, Name: "admin", Role: wire.RoleAdmin, Cert: cert}
		if cert != nil {
			if b, err := openPrincipalBody(cert, key); err == nil && b.Role == wire.RoleAdmin && !b.Revoked {
				p.Name = b.Name
			}
		}
		return p, false, nil
	}
	if cert == nil {
		return wire.Principal{}, false, fmt.Errorf("%w (key %s)", ErrNoCert, key)
	}
	if cert.Key != adminKey || adminKey == "" {
		return wire.Principal{}, false, fmt.Errorf("%w (key %s)", ErrNotAnchor, key)
	}
	b, err := openPrincipalBody(cert, key)
	if err != nil {
		return wire.Principal{}, false, err
	}
	return wire.Principal{Key: b.Key, Name: b.Name, Role: b.Role, Cert: cert}, b.Revoked, nil
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

// CheckRevokeRequest checks that r carries the anchor's revocation record
// of exactly what it revokes. The anchor itself is never revoked.
func CheckRevokeRequest(r *wire.RevokeRequest, adminKey string) error {
	if r.Key == adminKey {
		return fmt.Errorf("%w: the admin key is the trust anchor: it cannot be revoked", wire.ErrForbidden)
	}
	return checkRevocation(r.Cert, adminKey, r.Key, r.Name, r.Role)
}

// CheckRotateRequest checks that r carries the anchor's revocation record
// of Old and its record of Key, both of exactly the principal it rotates.
func CheckRotateRequest(r *wire.RotateRequest, adminKey string) error {
	if r.Old == adminKey || r.Key == adminKey {
		return fmt.Errorf("%w: the admin key is the trust anchor: it is not rotated here (a new anchor is a new admin.pub everywhere)", wire.ErrForbidden)
	}
	if err := checkRevocation(r.OldCert, adminKey, r.Old, r.Name, r.Role); err != nil {
		return err
	}
	return CheckPrincipalRequest(&wire.PrincipalRequest{Key: r.Key, Name: r.Name, Role: r.Role, Cert: r.Cert}, adminKey)
}

// CheckRevokedNotice checks a notice's records under the anchor: the
// revocation of Key and, for a rotation, the record of its successor, both
// of the principal the notice names.
func CheckRevokedNotice(n *wire.RevokedNotice, adminKey string) error {
	if err := checkRevocation(n.Record, adminKey, n.Key, n.Name, n.Role); err != nil {
		return err
	}
	if n.Successor == "" {
		return nil
	}
	p, err := OpenPrincipal(n.SuccessorRecord, adminKey, n.Successor)
	if err != nil {
		return err
	}
	if p.Name != n.Name || p.Role != n.Role {
		return fmt.Errorf("%w: successor's record says %s %s, notice %s %s", ErrCertBody, p.Role, p.Name, n.Role, n.Name)
	}
	return nil
}

// checkRevocation checks cert as the anchor's revocation of key, principal
// name with role.
func checkRevocation(cert *wire.Sealed, adminKey, key, name, role string) error {
	p, err := OpenRevocation(cert, adminKey, key)
	if err != nil {
		return err
	}
	if p.Name != name || p.Role != role {
		return fmt.Errorf("%w: revocation record says %s %s, request %s %s", ErrCertBody, p.Role, p.Name, role, name)
	}
	return nil
}
