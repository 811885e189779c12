package bank_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

func newSigner(t testing.TB) *signing.Signer {
	t.Helper()
	s, err := signing.NewUserSigner()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPrincipalRecords: a bank that knows the admin key registers a
// principal only with the admin's record of exactly it, keeps the record and
// gives it out; the newest record wins and an older one replayed changes
// nothing.
func TestPrincipalRecords(t *testing.T) {
	eachStore(t, func(t *testing.T, target string) {
		ctx := context.Background()
		admin, alice, mallory := newSigner(t), newSigner(t), newSigner(t)
		clock := time.Now()
		admin.Now = func() time.Time { return clock }
		b, err := bank.Open(target, bank.Options{AdminKey: admin.Public()})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		add := func(cert *wire.Sealed, name, role string) error {
			_, err := b.AddPrincipal(ctx, &wire.PrincipalRequest{Key: alice.Public(), Name: name, Role: role, Cert: cert})
			return err
		}
		for name, err := range map[string]error{
			"no record":              add(nil, "alice", wire.RoleUser),
			"sealed by another key":  add(signing.SealPrincipal(mallory, alice.Public(), "alice", wire.RoleAdmin), "alice", wire.RoleAdmin),
			"a user's record, admin": add(signing.SealPrincipal(admin, alice.Public(), "alice", wire.RoleUser), "alice", wire.RoleAdmin),
			"another key's record":   add(signing.SealPrincipal(admin, mallory.Public(), "alice", wire.RoleUser), "alice", wire.RoleUser),
		} {
			if !errors.Is(err, wire.ErrForbidden) {
				t.Errorf("%s: %v, want forbidden", name, err)
			}
		}
		if _, err := b.Whois(ctx, alice.Public()); !errors.Is(err, signing.ErrUnknownKey) {
			t.Fatalf("a refused registration left a principal: %v", err)
		}

		asAdmin := signing.SealPrincipal(admin, alice.Public(), "alice", wire.RoleAdmin)
		clock = clock.Add(time.Second)
		asUser := signing.SealPrincipal(admin, alice.Public(), "alice", wire.RoleUser)
		if err := add(asAdmin, "alice", wire.RoleAdmin); err != nil {
			t.Fatal(err)
		}
		if err := add(asUser, "alice", wire.RoleUser); err != nil {
			t.Fatalf("a newer record: %v", err)
		}
		if err := add(asAdmin, "alice", wire.RoleAdmin); !errors.Is(err, bank.ErrOlderRecord) || !errors.Is(err, wire.ErrConflict) {
			t.Fatalf("an older record replayed: %v", err)
		}
		if err := add(asUser, "alice", wire.RoleUser); err != nil {
			t.Fatalf("the same record again: %v", err)
		}
		// The bank's own role, and the anchor without a record.
		bk := newSigner(t)
		if _, err := b.AddPrincipal(ctx, &wire.PrincipalRequest{Key: bk.Public(), Name: "bank", Role: wire.RoleBank,
			Cert: signing.SealPrincipal(admin, bk.Public(), "bank", wire.RoleBank)}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.AddPrincipal(ctx, &wire.PrincipalRequest{Key: admin.Public(), Name: "admin", Role: wire.RoleAdmin}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.AddPrincipal(ctx, &wire.PrincipalRequest{Key: admin.Public(), Name: "admin", Role: wire.RoleUser}); !errors.Is(err, wire.ErrForbidden) {
			t.Fatalf("the anchor as a user: %v", err)
		}

		// Whois gives the record out, from the store after a restart too.
		b.Close()
		if b, err = bank.Open(target, bank.Options{AdminKey: admin.Public()}); err != nil {
			t.Fatal(err)
		}
		p, err := b.Whois(ctx, alice.Public())
		if err != nil {
			t.Fatal(err)
		}
		got, err := signing.OpenPrincipal(p.Cert, admin.Public(), alice.Public())
		if err != nil || got.Role != wire.RoleUser || p.Role != wire.RoleUser {
			t.Fatalf("whois after a restart: %+v %+v %v", p, got, err)
		}
	})
}

// TestPrincipalsSurviveTheRecordMigration: principals registered before
// records existed (migration 0001 only) are kept by 0002, without a record.
func TestPrincipalsSurviveTheRecordMigration(t *testing.T) {
	eachStore(t, func(t *testing.T, target string) {
		driver, dsn := "sqlite", strings.TrimPrefix(target, "sqlite:")
		if strings.HasPrefix(target, "postgres") {
			driver, dsn = "pgx", target
		}
		db, err := sql.Open(driver, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		body, err := os.ReadFile("migrations/0001_ledger.sql")
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, l := range strings.Split(string(body), "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "--") {
				lines = append(lines, l)
			}
		}
		stmts := append(strings.Split(strings.Join(lines, "\n"), ";"),
			`CREATE TABLE schema_migrations (name TEXT PRIMARY KEY, at BIGINT NOT NULL)`,
			`INSERT INTO schema_migrations (name, at) VALUES ('migrations/0001_ledger.sql', 1)`,
			`INSERT INTO principals (key, name, role, created) VALUES ('`+newSigner(t).Public()+`', 'old', 'user', 1)`)
		for _, s := range stmts {
			if strings.TrimSpace(s) == "" {
				continue
			}
			if _, err := db.Exec(s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		var key string
		if err := db.QueryRow(`SELECT key FROM principals`).Scan(&key); err != nil {
			t.Fatal(err)
		}
		b, err := bank.Open(target, bank.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		p, err := b.Whois(context.Background(), key)
		if err != nil || p.Name != "old" || p.Cert != nil {
			t.Fatalf("an old principal after the migration: %+v %v", p, err)
		}
	})
}
