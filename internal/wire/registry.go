package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
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

// AdminPubFile is the name of the anchor's public key file in a
// credentials directory.
const AdminPubFile = "admin.pub"

// Errors of the registry; all are forbidden.
var (
	ErrNoCert     = fmt.Errorf("%w: principal record not sealed by the admin key", ErrForbidden)
	ErrCertKey    = fmt.Errorf("%w: principal record names another key", ErrForbidden)
	ErrNotAnchor  = fmt.Errorf("%w: principal record sealed by a key other than the admin's", ErrForbidden)
	ErrCertBody   = fmt.Errorf("%w: principal record does not match", ErrForbidden)
	ErrReplyTrust = fmt.Errorf("%w: reply not signed by a trusted principal", ErrForbidden)
	ErrRevoked    = fmt.Errorf("%w: principal key revoked", ErrForbidden)
	ErrNotRevoked = fmt.Errorf("%w: principal record is not a revocation", ErrForbidden)
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
func SealPrincipal(admin *Signer, key, name, role string) *Sealed {
	return sealPrincipalBody(admin, principalBody{Key: key, Name: name, Role: role})
}

// SealRevocation is the admin's record that key, principal name with role,
// is revoked.
func SealRevocation(admin *Signer, key, name, role string) *Sealed {
	return sealPrincipalBody(admin, principalBody{Key: key, Name: name, Role: role, Revoked: true})
}

func sealPrincipalBody(admin *Signer, b principalBody) *Sealed {
	body, _ := json.Marshal(b) // strings and a bool: cannot fail
	s := admin.Seal(PrincipalPurpose(b.Key), body)
	return &s
}

// OpenPrincipal checks cert as key's principal record sealed by the anchor
// admin key and returns the principal it names (Cert set to cert); a
// revocation record is refused (ErrRevoked). The anchor key itself needs no
// record: it is the admin.
func OpenPrincipal(cert *Sealed, adminKey, key string) (Principal, error) {
	p, revoked, err := openRecord(cert, adminKey, key)
	if err == nil && revoked {
		err = fmt.Errorf("%w (key %s, %s %s, revoked by a record sealed %s)", ErrRevoked, key, p.Role, p.Name, cert.At().UTC().Format(time.RFC3339))
	}
	if err != nil {
		return Principal{}, err
	}
	return p, nil
}

// OpenRevocation checks cert as the anchor's revocation record of key and
// returns the principal it revokes (Cert set to cert).
func OpenRevocation(cert *Sealed, adminKey, key string) (Principal, error) {
	if key == adminKey {
		return Principal{}, fmt.Errorf("%w: the admin key is the trust anchor", ErrNotRevoked)
	}
	p, revoked, err := openRecord(cert, adminKey, key)
	if err == nil && !revoked {
		err = fmt.Errorf("%w (key %s)", ErrNotRevoked, key)
	}
	if err != nil {
		return Principal{}, err
	}
	return p, nil
}

// openRecord opens cert as key's record sealed by the anchor, revoked or
// not.
func openRecord(cert *Sealed, adminKey, key string) (p Principal, revoked bool, err error) {
	if key == adminKey && adminKey != "" && (cert == nil || cert.Key == adminKey) {
		// The anchor is the admin whatever a record says: nothing revokes it.
		p := Principal{Key: key, Name: "admin", Role: RoleAdmin, Cert: cert}
		if cert != nil {
			if b, err := openPrincipalBody(cert, key); err == nil && b.Role == RoleAdmin && !b.Revoked {
				p.Name = b.Name
			}
		}
		return p, false, nil
	}
	if cert == nil {
		return Principal{}, false, fmt.Errorf("%w (key %s)", ErrNoCert, key)
	}
	if cert.Key != adminKey || adminKey == "" {
		return Principal{}, false, fmt.Errorf("%w (key %s)", ErrNotAnchor, key)
	}
	b, err := openPrincipalBody(cert, key)
	if err != nil {
		return Principal{}, false, err
	}
	return Principal{Key: b.Key, Name: b.Name, Role: b.Role, Cert: cert}, b.Revoked, nil
}

func openPrincipalBody(cert *Sealed, key string) (principalBody, error) {
	if _, err := cert.Open(PrincipalPurpose(key)); err != nil {
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
func CheckPrincipalRequest(r *PrincipalRequest, adminKey string) error {
	if r.Key == adminKey && r.Role != RoleAdmin {
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

// AdminKeyFile reads an anchor public key file (creds/admin.pub).
func AdminKeyFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the admin key: %w", err)
	}
	k := strings.TrimSpace(string(b))
	if err := CheckPublicKey(k); err != nil {
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
	s, err := d.Signer(RoleAdmin, "admin")
	if err != nil {
		if errors.Is(err, ErrForbidden) {
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

// ---- host states ----

// HostStatePurpose is the seal purpose of host's state.
func HostStatePurpose(host string) string { return "host-state/" + host }

// SealHostState seals st (its JSON) for its host with the agent's signer.
func SealHostState(agent *Signer, st HostState) (Sealed, error) {
	body, err := json.Marshal(st)
	if err != nil {
		return Sealed{}, err
	}
	return agent.Seal(HostStatePurpose(st.Host), body), nil
}

// Errors of host states; all are forbidden.
var (
	ErrStateSigner = fmt.Errorf("%w: host state not signed by its host's agent", ErrForbidden)
	ErrStateTime   = fmt.Errorf("%w: host state sealed outside the allowed time", ErrForbidden)
)

// HostStateMsg is a host state as published: sealed (Sealed set) or, from
// an agent without identity, plain (State only).
type HostStateMsg struct {
	Sealed *Sealed
	State  HostState
}

// DecodeHostState decodes a published host state, sealed or plain. A
// sealed one's body is decoded (strictly) but not yet verified: see
// OpenHostState.
func DecodeHostState(data []byte) (HostStateMsg, error) {
	var probe struct {
		Purpose string `json:"purpose"`
		Sig     string `json:"sig"`
	}
	if json.Unmarshal(data, &probe) == nil && probe.Sig != "" && strings.HasPrefix(probe.Purpose, "host-state/") {
		var s Sealed
		if err := json.Unmarshal(data, &s); err != nil {
			return HostStateMsg{}, Errorf(ErrBadRequest, "malformed sealed state: %v", err)
		}
		var st HostState
		if err := Decode(s.Body, &st); err != nil {
			return HostStateMsg{}, err
		}
		return HostStateMsg{Sealed: &s, State: st}, nil
	}
	var st HostState
	if err := Decode(data, &st); err != nil {
		return HostStateMsg{}, err
	}
	return HostStateMsg{State: st}, nil
}

// OpenHostState checks m as a state of its host: sealed for that host,
// sealed no later than now+MaxSkew and, when maxAge > 0, no earlier than
// now-maxAge. It returns the signer's key; the caller checks that the key
// is the host's agent.
func OpenHostState(m HostStateMsg, now time.Time, maxAge time.Duration) (string, error) {
	if m.Sealed == nil {
		return "", fmt.Errorf("%w: unsealed state of %s", ErrStateSigner, m.State.Host)
	}
	key, err := m.Sealed.Open(HostStatePurpose(m.State.Host))
	if err != nil {
		return "", err
	}
	at := m.Sealed.At()
	if at.After(now.Add(MaxSkew)) {
		return "", fmt.Errorf("%w: sealed at %s, in the future", ErrStateTime, at.UTC().Format(time.RFC3339))
	}
	if maxAge > 0 && now.Sub(at) > maxAge {
		return "", fmt.Errorf("%w: sealed at %s, older than %s", ErrStateTime, at.UTC().Format(time.RFC3339), maxAge)
	}
	return key, nil
}
