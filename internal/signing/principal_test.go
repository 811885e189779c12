package signing_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

func signer(t testing.TB) *signing.Signer {
	t.Helper()
	s, err := signing.NewUserSigner()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPrincipalRecords(t *testing.T) {
	admin, alice, mallory := signer(t), signer(t), signer(t)
	cert := signing.SealPrincipal(admin, alice.Public(), "alice", wire.RoleUser)
	p, err := signing.OpenPrincipal(cert, admin.Public(), alice.Public())
	if err != nil || p.Name != "alice" || p.Role != wire.RoleUser || p.Key != alice.Public() {
		t.Fatalf("a record sealed by the admin: %+v %v", p, err)
	}
	for name, c := range map[string]struct {
		cert *wire.Sealed
		key  string
		want error
	}{
		"no record":               {nil, alice.Public(), signing.ErrNoCert},
		"sealed by another key":   {signing.SealPrincipal(mallory, alice.Public(), "alice", wire.RoleAdmin), alice.Public(), signing.ErrNotAnchor},
		"record of another key":   {cert, mallory.Public(), signing.ErrWrongPlace},
		"record of a key renamed": {relabel(cert, mallory.Public()), mallory.Public(), signing.ErrBadSeal},
	} {
		if _, err := signing.OpenPrincipal(c.cert, admin.Public(), c.key); !errors.Is(err, c.want) || !errors.Is(err, wire.ErrForbidden) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	// The anchor is the admin without a record.
	if p, err := signing.OpenPrincipal(nil, admin.Public(), admin.Public()); err != nil || p.Role != wire.RoleAdmin {
		t.Fatalf("the anchor: %+v %v", p, err)
	}
	// A request must carry exactly what the record says.
	req := &wire.PrincipalRequest{Key: alice.Public(), Name: "alice", Role: wire.RoleAdmin, Cert: cert}
	if err := signing.CheckPrincipalRequest(req, admin.Public()); !errors.Is(err, signing.ErrCertBody) {
		t.Fatalf("a user's record used to register an admin: %v", err)
	}
	req.Role = wire.RoleUser
	if err := signing.CheckPrincipalRequest(req, admin.Public()); err != nil {
		t.Fatal(err)
	}
	if err := signing.CheckPrincipalRequest(&wire.PrincipalRequest{Key: admin.Public(), Name: "x", Role: wire.RoleUser}, admin.Public()); err == nil {
		t.Fatal("the anchor registered as a user")
	}
}

// relabel is cert claiming another purpose (its signature no longer holds).
func relabel(cert *wire.Sealed, key string) *wire.Sealed {
	c := *cert
	c.Purpose = signing.PrincipalPurpose(key)
	return &c
}

// TestSealedForOnePurposeRefusedForAnother: a host state of host-1 is no
// principal record, and no state of host-2.
func TestSealedForOnePurposeRefusedForAnother(t *testing.T) {
	agent := signer(t)
	s, err := signing.SealHostState(agent, wire.HostState{Host: "host-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := signing.Open(s, signing.HostStatePurpose("host-1")); err != nil {
		t.Fatal(err)
	}
	for _, purpose := range []string{signing.HostStatePurpose("host-2"), signing.PrincipalPurpose(agent.Public())} {
		if _, err := signing.Open(s, purpose); !errors.Is(err, signing.ErrWrongPlace) {
			t.Errorf("opened for %s: %v", purpose, err)
		}
	}
	// Even sealed by the admin key, a state is no principal record.
	if _, err := signing.OpenPrincipal(&s, agent.Public(), signer(t).Public()); !errors.Is(err, signing.ErrWrongPlace) {
		t.Errorf("a host state taken as a principal record: %v", err)
	}
}

func TestOpenHostState(t *testing.T) {
	agent := signer(t)
	now := time.Now()
	encode := func(s *signing.Signer, st wire.HostState) signing.HostStateMsg {
		t.Helper()
		st.V = wire.Version
		sealed, err := signing.SealHostState(s, st)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(sealed)
		m, err := signing.DecodeHostState(data)
		if err != nil || m.Sealed == nil {
			t.Fatalf("decoding a sealed state: %+v %v", m, err)
		}
		return m
	}
	if key, err := signing.OpenHostState(encode(agent, wire.HostState{Host: "host-1"}), now, time.Minute); err != nil || key != agent.Public() {
		t.Fatalf("a fresh state: %s %v", key, err)
	}
	future := *agent
	future.Now = func() time.Time { return now.Add(time.Hour) }
	if _, err := signing.OpenHostState(encode(&future, wire.HostState{Host: "host-1"}), now, 0); !errors.Is(err, signing.ErrStateTime) {
		t.Fatalf("a state from the future: %v", err)
	}
	past := *agent
	past.Now = func() time.Time { return now.Add(-time.Hour) }
	m := encode(&past, wire.HostState{Host: "host-1"})
	if _, err := signing.OpenHostState(m, now, time.Minute); !errors.Is(err, signing.ErrStateTime) {
		t.Fatalf("a stale live state: %v", err)
	}
	if _, err := signing.OpenHostState(m, now, 0); err != nil {
		t.Fatalf("an old state from the bucket: %v", err)
	}
	// The body names another host than the seal's purpose.
	m = encode(agent, wire.HostState{Host: "host-1"})
	m.State.Host = "host-2"
	if _, err := signing.OpenHostState(m, now, 0); !errors.Is(err, signing.ErrWrongPlace) {
		t.Fatalf("a state moved to another host: %v", err)
	}
	plain, _ := json.Marshal(wire.HostState{Versioned: wire.Versioned{V: wire.Version}, Host: "host-1"})
	pm, err := signing.DecodeHostState(plain)
	if err != nil || pm.Sealed != nil {
		t.Fatalf("a plain state: %+v %v", pm, err)
	}
	if _, err := signing.OpenHostState(pm, now, 0); !errors.Is(err, signing.ErrStateSigner) {
		t.Fatalf("a plain state opened: %v", err)
	}
}
