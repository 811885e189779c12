package wire_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
)

func signer(t *testing.T) *wire.Signer {
	t.Helper()
	s, err := wire.NewUserSigner()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPrincipalRecords(t *testing.T) {
	admin, alice, mallory := signer(t), signer(t), signer(t)
	cert := wire.SealPrincipal(admin, alice.Public(), "alice", wire.RoleUser)
	p, err := wire.OpenPrincipal(cert, admin.Public(), alice.Public())
	if err != nil || p.Name != "alice" || p.Role != wire.RoleUser || p.Key != alice.Public() {
		t.Fatalf("a record sealed by the admin: %+v %v", p, err)
	}
	for name, c := range map[string]struct {
		cert *wire.Sealed
		key  string
		want error
	}{
		"no record":               {nil, alice.Public(), wire.ErrNoCert},
		"sealed by another key":   {wire.SealPrincipal(mallory, alice.Public(), "alice", wire.RoleAdmin), alice.Public(), wire.ErrNotAnchor},
		"record of another key":   {cert, mallory.Public(), wire.ErrWrongPlace},
		"record of a key renamed": {relabel(cert, mallory.Public()), mallory.Public(), wire.ErrBadSeal},
	} {
		if _, err := wire.OpenPrincipal(c.cert, admin.Public(), c.key); !errors.Is(err, c.want) || !errors.Is(err, wire.ErrForbidden) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	// The anchor is the admin without a record.
	if p, err := wire.OpenPrincipal(nil, admin.Public(), admin.Public()); err != nil || p.Role != wire.RoleAdmin {
		t.Fatalf("the anchor: %+v %v", p, err)
	}
	// A request must carry exactly what the record says.
	req := &wire.PrincipalRequest{Key: alice.Public(), Name: "alice", Role: wire.RoleAdmin, Cert: cert}
	if err := wire.CheckPrincipalRequest(req, admin.Public()); !errors.Is(err, wire.ErrCertBody) {
		t.Fatalf("a user's record used to register an admin: %v", err)
	}
	req.Role = wire.RoleUser
	if err := wire.CheckPrincipalRequest(req, admin.Public()); err != nil {
		t.Fatal(err)
	}
	if err := wire.CheckPrincipalRequest(&wire.PrincipalRequest{Key: admin.Public(), Name: "x", Role: wire.RoleUser}, admin.Public()); err == nil {
		t.Fatal("the anchor registered as a user")
	}
}

// relabel is cert claiming another purpose (its signature no longer holds).
func relabel(cert *wire.Sealed, key string) *wire.Sealed {
	c := *cert
	c.Purpose = wire.PrincipalPurpose(key)
	return &c
}

// TestSealedForOnePurposeRefusedForAnother: a host state of host-1 is no
// principal record, and no state of host-2.
func TestSealedForOnePurposeRefusedForAnother(t *testing.T) {
	agent := signer(t)
	s, err := wire.SealHostState(agent, wire.HostState{Host: "host-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(wire.HostStatePurpose("host-1")); err != nil {
		t.Fatal(err)
	}
	for _, purpose := range []string{wire.HostStatePurpose("host-2"), wire.PrincipalPurpose(agent.Public())} {
		if _, err := s.Open(purpose); !errors.Is(err, wire.ErrWrongPlace) {
			t.Errorf("opened for %s: %v", purpose, err)
		}
	}
	// Even sealed by the admin key, a state is no principal record.
	if _, err := wire.OpenPrincipal(&s, agent.Public(), signer(t).Public()); !errors.Is(err, wire.ErrWrongPlace) {
		t.Errorf("a host state taken as a principal record: %v", err)
	}
}

func TestOpenHostState(t *testing.T) {
	agent := signer(t)
	now := time.Now()
	encode := func(s *wire.Signer, st wire.HostState) wire.HostStateMsg {
		t.Helper()
		st.V = wire.Version
		sealed, err := wire.SealHostState(s, st)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(sealed)
		m, err := wire.DecodeHostState(data)
		if err != nil || m.Sealed == nil {
			t.Fatalf("decoding a sealed state: %+v %v", m, err)
		}
		return m
	}
	if key, err := wire.OpenHostState(encode(agent, wire.HostState{Host: "host-1"}), now, time.Minute); err != nil || key != agent.Public() {
		t.Fatalf("a fresh state: %s %v", key, err)
	}
	future := *agent
	future.Now = func() time.Time { return now.Add(time.Hour) }
	if _, err := wire.OpenHostState(encode(&future, wire.HostState{Host: "host-1"}), now, 0); !errors.Is(err, wire.ErrStateTime) {
		t.Fatalf("a state from the future: %v", err)
	}
	past := *agent
	past.Now = func() time.Time { return now.Add(-time.Hour) }
	m := encode(&past, wire.HostState{Host: "host-1"})
	if _, err := wire.OpenHostState(m, now, time.Minute); !errors.Is(err, wire.ErrStateTime) {
		t.Fatalf("a stale live state: %v", err)
	}
	if _, err := wire.OpenHostState(m, now, 0); err != nil {
		t.Fatalf("an old state from the bucket: %v", err)
	}
	// The body names another host than the seal's purpose.
	m = encode(agent, wire.HostState{Host: "host-1"})
	m.State.Host = "host-2"
	if _, err := wire.OpenHostState(m, now, 0); !errors.Is(err, wire.ErrWrongPlace) {
		t.Fatalf("a state moved to another host: %v", err)
	}
	plain, _ := json.Marshal(wire.HostState{Versioned: wire.Versioned{V: wire.Version}, Host: "host-1"})
	pm, err := wire.DecodeHostState(plain)
	if err != nil || pm.Sealed != nil {
		t.Fatalf("a plain state: %+v %v", pm, err)
	}
	if _, err := wire.OpenHostState(pm, now, 0); !errors.Is(err, wire.ErrStateSigner) {
		t.Fatalf("a plain state opened: %v", err)
	}
}
