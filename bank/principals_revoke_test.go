package bank_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// registry is a bank with an anchor and a clock the admin seals on.
type registry struct {
	b     *bank.Bank
	admin *signing.Signer
	clock *time.Time // the admin's sealing clock
	heard []wire.Principal
}

func openRegistry(t *testing.T, target string) *registry {
	t.Helper()
	r := &registry{admin: newSigner(t)}
	clock := time.Now()
	r.clock = &clock
	r.admin.Now = func() time.Time { return *r.clock }
	b, err := bank.Open(target, bank.Options{AdminKey: r.admin.Public(), Now: func() time.Time { return t0 },
		OnPrincipal: func(p wire.Principal) { r.heard = append(r.heard, p) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	r.b = b
	return r
}

// add registers a new key as (role, name) with the admin's record.
func (r *registry) add(t *testing.T, role, name string) *signing.Signer {
	t.Helper()
	s := newSigner(t)
	if err := r.register(s, role, name); err != nil {
		t.Fatal(err)
	}
	return s
}

func (r *registry) register(s *signing.Signer, role, name string) error {
	*r.clock = r.clock.Add(time.Millisecond)
	_, err := r.b.AddPrincipal(context.Background(), &wire.PrincipalRequest{Key: s.Public(), Name: name, Role: role,
		Cert: signing.SealPrincipal(r.admin, s.Public(), name, role)})
	return err
}

func (r *registry) revoke(s *signing.Signer, role, name string) (wire.RevokeReply, error) {
	*r.clock = r.clock.Add(time.Millisecond)
	return r.b.RevokePrincipal(context.Background(), &wire.RevokeRequest{Key: s.Public(), Name: name, Role: role,
		Cert: signing.SealRevocation(r.admin, s.Public(), name, role)})
}

func (r *registry) rotate(old, key *signing.Signer, role, name string) (wire.RotateReply, error) {
	*r.clock = r.clock.Add(time.Millisecond)
	return r.b.RotatePrincipal(context.Background(), &wire.RotateRequest{Name: name, Role: role,
		Old: old.Public(), OldCert: signing.SealRevocation(r.admin, old.Public(), name, role),
		Key: key.Public(), Cert: signing.SealPrincipal(r.admin, key.Public(), name, role)})
}

// TestRotateKeepsTheAccount: a user's key rotated keeps her account, her
// open holds and her history; the old key is nobody, to this bank and to
// another one on the same store, and a retried rotation answers the same.
// A second key for a name with a live one is refused.
func TestRotateKeepsTheAccount(t *testing.T) {
	eachStore(t, func(t *testing.T, target string) {
		ctx := context.Background()
		r := openRegistry(t, target)
		alice := r.add(t, wire.RoleUser, "alice")
		grant(t, r.b, "g1", "alice", 100)
		hold(t, r.b, "h1", "alice", 30, t0.Add(time.Hour))
		before, err := r.b.Statement(ctx, &wire.StatementRequest{User: "alice", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}

		second := newSigner(t)
		if err := r.register(second, wire.RoleUser, "alice"); !errors.Is(err, bank.ErrNameTaken) || !errors.Is(err, wire.ErrConflict) {
			t.Fatalf("a second live key for alice: %v", err)
		}
		alice2 := newSigner(t)
		rep, err := r.rotate(alice, alice2, wire.RoleUser, "alice")
		if err != nil {
			t.Fatal(err)
		}
		if rep.Old.Revoked == nil || rep.Old.ReplacedBy != alice2.Public() || rep.New.Revoked != nil || rep.New.Key != alice2.Public() {
			t.Fatalf("rotation: %+v", rep)
		}
		if again, err := r.rotate(alice, alice2, wire.RoleUser, "alice"); err != nil || again.New.Key != alice2.Public() || again.Old.Revoked == nil {
			t.Fatalf("the rotation retried: %+v %v", again, err)
		}
		if _, err := r.b.Whois(ctx, alice.Public()); !errors.Is(err, signing.ErrRevoked) {
			t.Fatalf("the old key after the rotation: %v", err)
		}
		if p, err := r.b.Whois(ctx, alice2.Public()); err != nil || p.Name != "alice" || p.Cert == nil {
			t.Fatalf("the new key: %+v %v", p, err)
		}
		after, err := r.b.Statement(ctx, &wire.StatementRequest{User: "alice", Limit: 10})
		if err != nil || !sameJSON(t, before, after) {
			t.Fatalf("the account after the rotation:\n%+v\nbefore:\n%+v (%v)", after, before, err)
		}
		bal, err := r.b.Balance(ctx, &wire.BalanceRequest{User: "alice"})
		if err != nil || bal.Held != 30 || bal.Balance != 70 {
			t.Fatalf("her hold after the rotation: %+v %v", bal, err)
		}
		// Another bank on the same store (a replica) reads the revocation.
		other, err := bank.Open(target, bank.Options{AdminKey: r.admin.Public()})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		if _, err := other.Whois(ctx, alice.Public()); !errors.Is(err, signing.ErrRevoked) {
			t.Fatalf("the old key at a replica: %v", err)
		}
		// Neither a replayed registration nor a newer one brings it back.
		if err := r.register(alice, wire.RoleUser, "alice"); !errors.Is(err, signing.ErrRevoked) {
			t.Fatalf("the revoked key registered again: %v", err)
		}
		if _, err := r.rotate(alice, newSigner(t), wire.RoleUser, "alice"); !errors.Is(err, signing.ErrRevoked) {
			t.Fatalf("the revoked key rotated again: %v", err)
		}
		if ps, err := r.b.Principals(ctx); err != nil || len(ps) != 1 || ps[0].Key != alice2.Public() {
			t.Fatalf("live principals: %+v %v", ps, err)
		}
		list, err := r.b.ListPrincipals(ctx, &wire.PrincipalsRequest{Name: "alice"})
		keys := map[string]wire.PrincipalInfo{}
		for _, p := range list.Principals {
			keys[p.Key] = p
		}
		if err != nil || len(keys) != 2 || keys[alice.Public()].Revoked == nil || keys[alice2.Public()].Revoked != nil {
			t.Fatalf("alice's keys: %+v %v", list, err)
		}
		mustLedger(t, r.b)
	})
}

// TestRevokeReleasesAUsersHolds: a revoked user's open holds are back in
// her account and she is no user anymore (no grant reaches her); the
// anchor is never revoked, nor by a record older than the registration,
// another key's or another principal's; a retry changes nothing.
func TestRevokeReleasesAUsersHolds(t *testing.T) {
	eachStore(t, func(t *testing.T, target string) {
		ctx := context.Background()
		r := openRegistry(t, target)
		alice := r.add(t, wire.RoleUser, "alice")
		grant(t, r.b, "g1", "alice", 100)
		hold(t, r.b, "h1", "alice", 30, t0.Add(time.Hour))
		hold(t, r.b, "h2", "alice", 20, t0.Add(time.Hour))
		if _, err := r.b.Release(ctx, &wire.ReleaseRequest{Hold: "h2", User: "alice"}); err != nil {
			t.Fatal(err)
		}
		hold(t, r.b, "h3", "alice", 5, t0.Add(time.Hour))

		mallory := newSigner(t)
		old := signing.SealRevocation(r.admin, alice.Public(), "alice", wire.RoleUser)
		*r.clock = r.clock.Add(time.Second)
		if err := r.register(alice, wire.RoleUser, "alice"); err != nil { // a newer record than old
			t.Fatal(err)
		}
		for name, req := range map[string]*wire.RevokeRequest{
			"no record":             {Key: alice.Public(), Name: "alice", Role: wire.RoleUser},
			"sealed by mallory":     {Key: alice.Public(), Name: "alice", Role: wire.RoleUser, Cert: signing.SealRevocation(mallory, alice.Public(), "alice", wire.RoleUser)},
			"a registration":        {Key: alice.Public(), Name: "alice", Role: wire.RoleUser, Cert: signing.SealPrincipal(r.admin, alice.Public(), "alice", wire.RoleUser)},
			"older than its record": {Key: alice.Public(), Name: "alice", Role: wire.RoleUser, Cert: old},
			"the anchor":            {Key: r.admin.Public(), Name: "admin", Role: wire.RoleAdmin, Cert: signing.SealRevocation(r.admin, r.admin.Public(), "admin", wire.RoleAdmin)},
			"another principal":     {Key: alice.Public(), Name: "bob", Role: wire.RoleUser, Cert: signing.SealRevocation(r.admin, alice.Public(), "bob", wire.RoleUser)},
		} {
			if _, err := r.b.RevokePrincipal(ctx, req); err == nil {
				t.Errorf("%s: revoked", name)
			}
		}
		if _, err := r.b.Whois(ctx, alice.Public()); err != nil {
			t.Fatalf("refused revocations revoked alice: %v", err)
		}

		heard := len(r.heard)
		rep, err := r.revoke(alice, wire.RoleUser, "alice")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(rep.Released, []string{"h1", "h3"}) || rep.ReleasedAmount != 35 || rep.Principal.Revoked == nil {
			t.Fatalf("revocation: %+v", rep)
		}
		if len(r.heard) != heard+1 || r.heard[heard].Key != alice.Public() {
			t.Fatalf("OnPrincipal did not hear the revocation: %+v", r.heard[heard:])
		}
		bal, err := r.b.Balance(ctx, &wire.BalanceRequest{User: "alice"})
		if err != nil || bal.Balance != 100 || bal.Held != 0 {
			t.Fatalf("her account after the revocation: %+v %v", bal, err)
		}
		if again, err := r.revoke(alice, wire.RoleUser, "alice"); err != nil || len(again.Released) != 0 || again.Principal.Revoked == nil {
			t.Fatalf("the revocation retried: %+v %v", again, err)
		}
		if _, err := r.b.Grant(ctx, &wire.GrantRequest{ID: "g2", User: "alice", Amount: money.Micro(1)}); !errors.Is(err, bank.ErrUnknownUser) {
			t.Fatalf("a grant to a user with no live key: %v", err)
		}
		if _, err := r.b.Whois(ctx, alice.Public()); !errors.Is(err, signing.ErrRevoked) {
			t.Fatalf("whois of a revoked key: %v", err)
		}
		// Her name is free again: a new key is hers, with her account.
		alice2 := r.add(t, wire.RoleUser, "alice")
		if bal, err := r.b.Balance(ctx, &wire.BalanceRequest{User: "alice"}); err != nil || bal.Balance != 100 {
			t.Fatalf("her account under a new key: %+v %v (key %s)", bal, err, alice2.Public())
		}
		mustLedger(t, r.b)
	})
}

// TestLastAdminKeyStays: without an anchor, the last live admin key is not
// revoked; with one, the anchor stays the admin whatever else is revoked.
func TestLastAdminKeyStays(t *testing.T) {
	ctx := context.Background()
	b, _ := openBank(t, stores[0].new(t))
	admin1, admin2 := newSigner(t), newSigner(t)
	for _, p := range []struct {
		s    *signing.Signer
		name string
	}{{admin1, "admin"}, {admin2, "ops"}} {
		if _, err := b.AddPrincipal(ctx, &wire.PrincipalRequest{Key: p.s.Public(), Name: p.name, Role: wire.RoleAdmin}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.RevokePrincipal(ctx, &wire.RevokeRequest{Key: admin1.Public(), Name: "admin", Role: wire.RoleAdmin}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.RevokePrincipal(ctx, &wire.RevokeRequest{Key: admin2.Public(), Name: "ops", Role: wire.RoleAdmin}); !errors.Is(err, bank.ErrLastAdmin) {
		t.Fatalf("the last admin key revoked: %v", err)
	}
	if _, err := b.Whois(ctx, admin2.Public()); err != nil {
		t.Fatalf("the last admin after the refusal: %v", err)
	}

	r := openRegistry(t, stores[0].new(t))
	ops := r.add(t, wire.RoleAdmin, "ops")
	if _, err := r.revoke(ops, wire.RoleAdmin, "ops"); err != nil {
		t.Fatalf("an admin key beside the anchor: %v", err)
	}
	if p, err := r.b.Whois(ctx, r.admin.Public()); err != nil || p.Role != wire.RoleAdmin {
		t.Fatalf("the anchor: %+v %v", p, err)
	}
}

// TestRevocationReachesEveryReplica: two bank replicas in one queue group,
// both having believed alice; once one of them revoked her key, every
// request she signs is refused by either, at once (the notice), not after
// the cache's TTL.
func TestRevocationReachesEveryReplica(t *testing.T) {
	eachStore(t, func(t *testing.T, target string) {
		ctx := context.Background()
		r := openRegistry(t, target)
		alice := r.add(t, wire.RoleUser, "alice")
		grant(t, r.b, "g1", "alice", 100)
		ns, nc := natstest.Start(t)
		other, err := bank.Open(target, bank.Options{AdminKey: r.admin.Public()})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		for _, b := range []*bank.Bank{r.b, other} {
			stop, err := bank.Serve(natstest.Connect(t, ns), b)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(stop)
		}
		client := bank.Client{NC: nc, Signer: alice}
		balance := func() error {
			_, err := client.Balance(ctx, &wire.BalanceRequest{User: "alice"})
			return err
		}
		for range 40 { // both replicas believe her (each has 2^-40 odds of none)
			if err := balance(); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		if _, err := r.revoke(alice, wire.RoleUser, "alice"); err != nil {
			t.Fatal(err)
		}
		// Refused by both: 40 requests in a row, each to either replica.
		testpoll.CheckFor(t, revocationBound, time.Millisecond, func() error {
			for range 40 {
				if err := balance(); !refusedRevoked(err) {
					return fmt.Errorf("alice's request %s after her revocation: %v", time.Since(start), err)
				}
			}
			return nil
		})
	})
}

// revocationBound is how soon every replica refuses a revoked key here: a
// notice's trip through NATS, far below the replicas' cache TTL.
const revocationBound = time.Second

// refusedRevoked: err is the refusal of a revoked key, as it comes over
// the wire.
func refusedRevoked(err error) bool {
	return err != nil && wire.ToError(err).Code == wire.CodeForbidden && strings.Contains(err.Error(), signing.ErrRevoked.Error())
}
