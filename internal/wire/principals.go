package wire

// Subjects of the bank's registry of principals.
const (
	BankPrincipal = "mrm.v1.bank.principal"
	BankWhois     = "mrm.v1.bank.whois"
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
	switch r.Role {
	case RoleAdmin, RoleUser, RoleAgent, RoleBroker, RoleBank:
		return nil
	}
	return Errorf(ErrBadRequest, "unknown role %q (admin, user, agent, broker, bank)", r.Role)
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
