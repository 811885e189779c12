package wire

import (
	"fmt"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
)

// Key lifecycle: the admin lists the registry, revokes a key, or rotates a
// principal to a new key (the bank's principals, revoke and rotate
// subjects). A revocation is the admin's sealed record of the key marked
// revoked (SealRevocation), so nobody but the admin can make one and a
// later record wins over the key's registration; the bank refuses every
// record of a revoked key after it. Accounts, holds and plans are by
// principal name, not key, so a rotation keeps them.

// PrincipalsRequest lists the registry, every key ever registered with
// its state; Role, Name and Live narrow it.
type PrincipalsRequest struct {
	Versioned
	Role string `json:"role,omitempty"`
	Name string `json:"name,omitempty"`
	// Live leaves out the revoked keys.
	Live bool `json:"live,omitempty"`
}

func (r *PrincipalsRequest) Validate() error {
	if r.Role != "" {
		if err := CheckRole(r.Role); err != nil {
			return err
		}
	}
	if r.Name != "" {
		return CheckName("principal name", r.Name)
	}
	return nil
}

// PrincipalInfo is one key of the registry.
type PrincipalInfo struct {
	Key  string `json:"key"`
	Name string `json:"name"`
	Role string `json:"role"`
	// Registered is when the key was first registered (the bank's clock).
	Registered time.Time `json:"registered"`
	// Revoked is when the key was revoked; nil while it is live.
	Revoked *time.Time `json:"revoked,omitempty"`
	// ReplacedBy is the key a rotation replaced it with.
	ReplacedBy string `json:"replaced_by,omitempty"`
}

// PrincipalsReply is the registry, by role, name and registration.
type PrincipalsReply struct {
	Principals []PrincipalInfo `json:"principals"`
}

// CheckRole refuses an unknown role.
func CheckRole(role string) error {
	switch role {
	case RoleAdmin, RoleUser, RoleAgent, RoleBroker, RoleBank:
		return nil
	}
	return Errorf(ErrBadRequest, "unknown role %q (admin, user, agent, broker, bank)", role)
}

// checkPrincipal checks a key, name and role of a lifecycle request.
func checkPrincipal(key, name, role string) error {
	return (&PrincipalRequest{Key: key, Name: name, Role: role}).Validate()
}

// RevokeRequest revokes Key, principal Name with Role. Cert is the admin's
// revocation record of exactly that (SealRevocation): a bank that knows
// its admin key refuses a revocation without one.
type RevokeRequest struct {
	Versioned
	Key  string  `json:"key"`
	Name string  `json:"name"`
	Role string  `json:"role"`
	Cert *Sealed `json:"cert,omitempty"`
}

func (r *RevokeRequest) Validate() error { return checkPrincipal(r.Key, r.Name, r.Role) }

// RevokeReply is the key revoked and, for a user, the open holds the
// revocation released to its account (ids, and what they held).
type RevokeReply struct {
	Principal      PrincipalInfo `json:"principal"`
	Released       []string      `json:"released,omitempty"`
	ReleasedAmount money.Micro   `json:"released_micro,omitempty"`
}

// RotateRequest gives principal Name (Role) the new key Key in place of
// Old, in one transaction: Key is registered (Cert: the admin's record of
// it, SealPrincipal) and Old revoked (OldCert: the admin's revocation
// record of it). The principal's accounts, holds and plans are by name and
// stay; nothing of Old's is released.
type RotateRequest struct {
	Versioned
	Name    string  `json:"name"`
	Role    string  `json:"role"`
	Old     string  `json:"old"`
	OldCert *Sealed `json:"old_cert,omitempty"`
	Key     string  `json:"key"`
	Cert    *Sealed `json:"cert,omitempty"`
}

func (r *RotateRequest) Validate() error {
	if err := checkPrincipal(r.Key, r.Name, r.Role); err != nil {
		return err
	}
	if err := CheckPublicKey(r.Old); err != nil {
		return err
	}
	if r.Old == r.Key {
		return Errorf(ErrBadRequest, "a rotation needs a new key: %s is the old one", r.Key)
	}
	return nil
}

// RotateReply is the old key, now revoked, and the new one.
type RotateReply struct {
	Old PrincipalInfo `json:"old"`
	New PrincipalInfo `json:"new"`
}

// RevokedNotice is what the bank publishes on RegistryRevoked once it
// committed a revocation: the key, who it was, the admin's revocation
// record (nil from a bank without an admin key) and, for a rotation, the
// key that replaced it with its record. A listener believes it only when
// the records open under the anchor (CheckRevokedNotice), so a forged
// notice revokes nobody; a replayed one announces what is already true.
type RevokedNotice struct {
	Versioned
	Key             string  `json:"key"`
	Name            string  `json:"name"`
	Role            string  `json:"role"`
	Record          *Sealed `json:"record,omitempty"`
	Successor       string  `json:"successor,omitempty"`
	SuccessorRecord *Sealed `json:"successor_record,omitempty"`
}

func (n *RevokedNotice) Validate() error {
	if err := checkPrincipal(n.Key, n.Name, n.Role); err != nil {
		return err
	}
	if n.Successor != "" {
		return CheckPublicKey(n.Successor)
	}
	return nil
}

// CheckRevokeRequest checks that r carries the anchor's revocation record
// of exactly what it revokes. The anchor itself is never revoked.
func CheckRevokeRequest(r *RevokeRequest, adminKey string) error {
	if r.Key == adminKey {
		return fmt.Errorf("%w: the admin key is the trust anchor: it cannot be revoked", ErrForbidden)
	}
	return checkRevocation(r.Cert, adminKey, r.Key, r.Name, r.Role)
}

// CheckRotateRequest checks that r carries the anchor's revocation record
// of Old and its record of Key, both of exactly the principal it rotates.
func CheckRotateRequest(r *RotateRequest, adminKey string) error {
	if r.Old == adminKey || r.Key == adminKey {
		return fmt.Errorf("%w: the admin key is the trust anchor: it is not rotated here (a new anchor is a new admin.pub everywhere)", ErrForbidden)
	}
	if err := checkRevocation(r.OldCert, adminKey, r.Old, r.Name, r.Role); err != nil {
		return err
	}
	return CheckPrincipalRequest(&PrincipalRequest{Key: r.Key, Name: r.Name, Role: r.Role, Cert: r.Cert}, adminKey)
}

// CheckRevokedNotice checks a notice's records under the anchor: the
// revocation of Key and, for a rotation, the record of its successor, both
// of the principal the notice names.
func CheckRevokedNotice(n *RevokedNotice, adminKey string) error {
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
func checkRevocation(cert *Sealed, adminKey, key, name, role string) error {
	p, err := OpenRevocation(cert, adminKey, key)
	if err != nil {
		return err
	}
	if p.Name != name || p.Role != role {
		return fmt.Errorf("%w: revocation record says %s %s, request %s %s", ErrCertBody, p.Role, p.Name, role, name)
	}
	return nil
}
