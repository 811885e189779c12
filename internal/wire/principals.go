package wire

import (
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
)

// Subjects of the bank's registry of principals.
const (
	BankPrincipal = "mrm.v1.bank.principal"
	BankWhois     = "mrm.v1.bank.whois"
	// The registry's key lifecycle (admin): list, revoke, rotate.
	BankPrincipals = "mrm.v1.bank.principals"
	BankRevoke     = "mrm.v1.bank.revoke"
	BankRotate     = "mrm.v1.bank.rotate"
	// RegistryRevoked is where the bank announces each key it revoked
	// (RevokedNotice), once committed: every service that caches identities
	// listens and forgets the key at once.
	RegistryRevoked = "mrm.v1.registry.revoked"
)

// Roles of principals.
const (
	RoleAdmin  = "admin"
	RoleUser   = "user"
	RoleAgent  = "agent"
	RoleBroker = "broker"
	// RoleBank signs the bank's answers that others act on (capture
	// results); it is never a payer or a payee.
	RoleBank = "bank"
)

// PrincipalRequest registers (or re-registers) the NKey public key Key as
// principal Name with Role. For an agent, Name is its host id. Cert is the
// principal record sealed by the admin key (signing.SealPrincipal): a bank
// that knows its admin key refuses a registration without one that matches.
type PrincipalRequest struct {
	Versioned
	Key  string  `json:"key"`
	Name string  `json:"name"`
	Role string  `json:"role"`
	Cert *Sealed `json:"cert,omitempty"`
}

func (r *PrincipalRequest) Validate() error {
	if err := CheckPublicKey(r.Key); err != nil {
		return err
	}
	if err := CheckName("principal name", r.Name); err != nil {
		return err
	}
	return CheckRole(r.Role)
}

// Principal is a registered identity. Cert is its admin-sealed record
// (signing.SealPrincipal): whoever learns a principal over the network
// trusts it only when Cert opens with the admin key (signing.OpenPrincipal).
type Principal struct {
	Key  string  `json:"key"`
	Name string  `json:"name"`
	Role string  `json:"role"`
	Cert *Sealed `json:"cert,omitempty"`
}

// WhoisRequest asks who the NKey public key Key is.
type WhoisRequest struct {
	Versioned
	Key string `json:"key"`
}

func (r *WhoisRequest) Validate() error { return CheckPublicKey(r.Key) }

// InboxPrefix is the inbox prefix of the connection of the principal whose
// NKey public key is pub: its replies arrive under InboxPrefix(pub)+".…",
// and the NATS server lets only that principal subscribe there, so nobody
// reads another principal's replies.
func InboxPrefix(pub string) string { return "_INBOX." + pub }

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
