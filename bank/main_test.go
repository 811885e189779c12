package bank_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/mrmarket/mrmarket/internal/pgtest"
)

// The package's PostgreSQL cluster, shared by every test (each gets its own
// database); nil when PostgreSQL is not installed.
var (
	pg    *pgtest.Cluster
	pgErr error
	dbSeq atomic.Int64
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChildBank()) // a bank process of the crash test, not a test run
	}
	var stop func()
	pg, stop, pgErr = pgtest.StartMain()
	code := m.Run()
	if stop != nil {
		stop()
	}
	os.Exit(code)
}

// store is one kind of store the suite runs on.
type store struct {
	name string
	new  func(t testing.TB) string // a fresh, empty store's target
}

var stores = []store{
	{"sqlite", func(t testing.TB) string { return "sqlite:" + filepath.Join(t.TempDir(), "bank.db") }},
	{"postgres", newPostgres},
}

// newPostgres makes a fresh database in the package cluster. In CI a
// missing PostgreSQL fails the test; elsewhere it is skipped.
func newPostgres(t testing.TB) string {
	t.Helper()
	if pg == nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL is required in CI: %v", pgErr)
		}
		t.Skipf("skipping the PostgreSQL store: %v", pgErr)
	}
	dsn, err := pg.CreateDB(fmt.Sprintf("bank_%d_%d", os.Getpid(), dbSeq.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// eachStore runs f on a fresh store of every kind.
func eachStore(t *testing.T, f func(t *testing.T, target string)) {
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) { f(t, s.new(t)) })
	}
}
