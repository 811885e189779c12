package bank_test

import (
	"database/sql"
	"os"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/mrmarket/mrmarket/bank"
)

// The NATS nodes' role reads the principals with deploy's grants and
// nothing more: a migrated store opens without writing (no CREATE on the
// schema), and the role can create nothing in public.
func TestNATSRoleOpensTheStoreReadOnly(t *testing.T) {
	dsn := newPostgres(t)
	b, err := bank.Open(dsn, bank.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	grants, err := os.ReadFile("../deploy/postgresql/nats-grants.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{ // roles.sql's roles, then the grants
		`DO $$ BEGIN CREATE ROLE mrmarket LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$`,
		`DO $$ BEGIN CREATE ROLE mrmarket_nats LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$`,
		`GRANT CONNECT ON DATABASE ` + dsn[strings.LastIndex(dsn, "/")+1:strings.Index(dsn, "?")] + ` TO mrmarket_nats`, string(grants)} {
		if _, err := admin.Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	nats := strings.Replace(dsn, "//postgres@", "//mrmarket_nats@", 1)
	ro, err := bank.Open(nats, bank.Options{})
	if err != nil {
		t.Fatalf("the NATS role opening the store: %v", err)
	}
	ro.Close()
	db, err := sql.Open("pgx", nats)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE public.planted (x int)`); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("the NATS role created a table in public: %v", err)
	}
	if _, err := db.Exec(`UPDATE accounts SET balance = 0`); err == nil {
		t.Fatal("the NATS role changed the ledger")
	}
}
