package signing_test

import (
	"errors"
	"testing"

	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestRevocationRecords: a revocation is the admin's record of the key
// marked revoked; whoever opens it as a registration refuses the key, and
// only the admin's revocation of exactly that principal counts.
func TestRevocationRecords(t *testing.T) {
	admin, alice, alice2, mallory := signer(t), signer(t), signer(t), signer(t)
	revoked := signing.SealRevocation(admin, alice.Public(), "alice", wire.RoleUser)
	if _, err := signing.OpenPrincipal(revoked, admin.Public(), alice.Public()); !errors.Is(err, signing.ErrRevoked) || !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("a revocation opened as a registration: %v", err)
	}
	if p, err := signing.OpenRevocation(revoked, admin.Public(), alice.Public()); err != nil || p.Name != "alice" || p.Role != wire.RoleUser {
		t.Fatalf("the revocation: %+v %v", p, err)
	}
	live := signing.SealPrincipal(admin, alice.Public(), "alice", wire.RoleUser)
	if _, err := signing.OpenRevocation(live, admin.Public(), alice.Public()); !errors.Is(err, signing.ErrNotRevoked) {
		t.Fatalf("a registration taken for a revocation: %v", err)
	}
	if _, err := signing.OpenRevocation(signing.SealRevocation(mallory, alice.Public(), "alice", wire.RoleUser), admin.Public(), alice.Public()); !errors.Is(err, signing.ErrNotAnchor) {
		t.Fatalf("a revocation sealed by another key: %v", err)
	}
	// A registration request cannot carry a revocation.
	if err := signing.CheckPrincipalRequest(&wire.PrincipalRequest{Key: alice.Public(), Name: "alice", Role: wire.RoleUser, Cert: revoked}, admin.Public()); !errors.Is(err, signing.ErrRevoked) {
		t.Fatalf("registering with a revocation record: %v", err)
	}
	// A revocation request must carry the revocation of exactly what it names.
	req := &wire.RevokeRequest{Key: alice.Public(), Name: "alice", Role: wire.RoleAdmin, Cert: revoked}
	if err := signing.CheckRevokeRequest(req, admin.Public()); !errors.Is(err, signing.ErrCertBody) {
		t.Fatalf("a user's revocation used to revoke an admin: %v", err)
	}
	req.Role = wire.RoleUser
	if err := signing.CheckRevokeRequest(req, admin.Public()); err != nil {
		t.Fatal(err)
	}
	anchor := &wire.RevokeRequest{Key: admin.Public(), Name: "admin", Role: wire.RoleAdmin, Cert: signing.SealRevocation(admin, admin.Public(), "admin", wire.RoleAdmin)}
	if err := signing.CheckRevokeRequest(anchor, admin.Public()); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("the anchor revoked: %v", err)
	}
	// Nothing revokes the anchor, whatever it seals about itself.
	if p, err := signing.OpenPrincipal(anchor.Cert, admin.Public(), admin.Public()); err != nil || p.Role != wire.RoleAdmin {
		t.Fatalf("the anchor after sealing its own revocation: %+v %v", p, err)
	}

	rot := &wire.RotateRequest{Name: "alice", Role: wire.RoleUser, Old: alice.Public(), OldCert: revoked,
		Key: alice2.Public(), Cert: signing.SealPrincipal(admin, alice2.Public(), "alice", wire.RoleUser)}
	if err := rot.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := signing.CheckRotateRequest(rot, admin.Public()); err != nil {
		t.Fatal(err)
	}
	bad := *rot
	bad.Cert = signing.SealPrincipal(admin, alice2.Public(), "bob", wire.RoleUser)
	if err := signing.CheckRotateRequest(&bad, admin.Public()); !errors.Is(err, signing.ErrCertBody) {
		t.Fatalf("a rotation to another principal's record: %v", err)
	}
	bad = *rot
	bad.OldCert = live
	if err := signing.CheckRotateRequest(&bad, admin.Public()); !errors.Is(err, signing.ErrNotRevoked) {
		t.Fatalf("a rotation without the old key's revocation: %v", err)
	}
	bad = *rot
	bad.Key = bad.Old
	if err := bad.Validate(); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("a rotation to the same key: %v", err)
	}

	n := &wire.RevokedNotice{Key: alice.Public(), Name: "alice", Role: wire.RoleUser, Record: revoked,
		Successor: alice2.Public(), SuccessorRecord: rot.Cert}
	if err := signing.CheckRevokedNotice(n, admin.Public()); err != nil {
		t.Fatal(err)
	}
	forged := *n
	forged.Record = signing.SealRevocation(mallory, alice.Public(), "alice", wire.RoleUser)
	if err := signing.CheckRevokedNotice(&forged, admin.Public()); !errors.Is(err, signing.ErrNotAnchor) {
		t.Fatalf("a notice sealed by another key: %v", err)
	}
	forged = *n
	forged.SuccessorRecord = signing.SealPrincipal(admin, alice2.Public(), "bob", wire.RoleUser)
	if err := signing.CheckRevokedNotice(&forged, admin.Public()); !errors.Is(err, signing.ErrCertBody) {
		t.Fatalf("a notice naming another principal's key as successor: %v", err)
	}
}
