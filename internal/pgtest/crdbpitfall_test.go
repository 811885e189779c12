package pgtest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/cockroach-go/v2/crdb"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/mrmarket/mrmarket/internal/pgtest"
)

// The crdb.ExecuteTx pitfall (docs/PLATFORM.md): crdb.ExecuteTx wraps the
// work in SAVEPOINT cockroach_restart and treats RELEASE as the commit, which
// is true on CockroachDB but not on PostgreSQL, where the real COMMIT comes
// afterwards and crdb ignores its error. PostgreSQL's SERIALIZABLE (SSI)
// raises a write skew's serialization failure (SQLSTATE 40001) at COMMIT, so
// crdb.ExecuteTx returns nil for a transaction that was rolled back.
//
// The scenario: two doctors on call; each transaction reads both rows and
// takes its own doctor off call (the classic write skew). Both read and write
// before either commits; "alice" commits first, then "bob" commits, and
// PostgreSQL can only refuse bob's COMMIT. (The work updates
// unconditionally, so a correct runner ends with both updates applied.)

// runner runs work (read both rows, update the doctor's own row) as one
// SERIALIZABLE transaction with some retry policy.
type runner func(ctx context.Context, db *sql.DB, work func(ctx context.Context, tx *sql.Tx) error) error

type skewOutcome struct {
	errAlice, errBob error
	onCall           map[string]bool // final table
	attempts         int64           // work invocations, retries included
}

func setupDoctors(t *testing.T, db *sql.DB) {
	t.Helper()
	if _, err := db.Exec(`DROP TABLE IF EXISTS doctors;
		CREATE TABLE doctors (name text PRIMARY KEY, on_call bool NOT NULL);
		INSERT INTO doctors VALUES ('alice', true), ('bob', true)`); err != nil {
		t.Fatal(err)
	}
}

// writeSkew runs the two transactions through run, interleaving their first
// attempts: both read and write, then alice's transaction commits, then bob's.
// Retried attempts run without synchronisation.
func writeSkew(t *testing.T, db *sql.DB, run runner) skewOutcome {
	t.Helper()
	setupDoctors(t, db)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var (
		bothWrote  = make(chan struct{}) // closed when both first attempts have written
		wrote      atomic.Int32
		aliceDone  = make(chan struct{}) // closed when alice's call has returned (committed or not)
		attempts   atomic.Int64
		firstSeen  [2]atomic.Bool
		names      = [2]string{"alice", "bob"}
		out        skewOutcome
		wg         sync.WaitGroup
		waitOrDone = func(ch <-chan struct{}) error {
			select {
			case <-ch:
				return nil
			case <-ctx.Done():
				return fmt.Errorf("barrier: %w", ctx.Err())
			}
		}
	)
	call := func(i int) error {
		me := names[i]
		return run(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
			attempts.Add(1)
			first := firstSeen[i].CompareAndSwap(false, true)
			// Read both rows: this read is what makes the two transactions
			// a write skew (each reads the row the other writes).
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM doctors WHERE on_call`).Scan(&n); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE doctors SET on_call = false WHERE name = $1`, me); err != nil {
				return err
			}
			if first {
				if wrote.Add(1) == 2 {
					close(bothWrote)
				}
				if err := waitOrDone(bothWrote); err != nil {
					return err
				}
				if i == 1 {
					// bob commits only after alice's transaction finished.
					if err := waitOrDone(aliceDone); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	wg.Go(func() { out.errAlice = call(0); close(aliceDone) })
	wg.Go(func() { out.errBob = call(1) })
	wg.Wait()

	out.attempts = attempts.Load()
	out.onCall = map[string]bool{}
	rows, err := db.Query(`SELECT name, on_call FROM doctors`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var on bool
		if err := rows.Scan(&name, &on); err != nil {
			t.Fatal(err)
		}
		out.onCall[name] = on
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// TestCrdbExecuteTxLosesWriteSkewCommitFailure keeps docs/PLATFORM.md's
// claim honest: on PostgreSQL crdb.ExecuteTx reports success for a write that
// COMMIT rolled back, and retrying the whole transaction is correct.
func TestCrdbExecuteTxLosesWriteSkewCommitFailure(t *testing.T) {
	c := pgtest.Start(t)
	db, err := sql.Open("pgx", c.DSN(t, "crdbpitfall"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	serializable := &sql.TxOptions{Isolation: sql.LevelSerializable}

	t.Run("crdb.ExecuteTx returns nil for a rolled-back write", func(t *testing.T) {
		out := writeSkew(t, db, func(ctx context.Context, db *sql.DB, work func(context.Context, *sql.Tx) error) error {
			return crdb.ExecuteTx(ctx, db, serializable, func(tx *sql.Tx) error { return work(ctx, tx) })
		})
		t.Logf("crdb.ExecuteTx: alice err=%v, bob err=%v, on call=%v, %d attempts", out.errAlice, out.errBob, out.onCall, out.attempts)
		switch {
		case out.errAlice == nil && out.errBob == nil && out.onCall["alice"] != out.onCall["bob"]:
			// Reproduced: both calls returned nil, yet only one doctor left;
			// the other UPDATE was rolled back by the failed COMMIT.
			t.Logf("reproduced: both crdb.ExecuteTx calls returned nil but only one of the two UPDATEs is in the table (lost write)")
		case out.errAlice == nil && out.errBob == nil && !out.onCall["alice"] && !out.onCall["bob"]:
			t.Fatalf("pitfall NOT reproduced: both transactions committed — PostgreSQL did not refuse the write skew at all (is the isolation really SERIALIZABLE?)")
		case out.errAlice == nil && out.errBob == nil:
			t.Fatalf("pitfall NOT reproduced in the expected form: both calls returned nil and neither UPDATE is in the table (%v)", out.onCall)
		default:
			t.Fatalf("pitfall NOT reproduced: crdb.ExecuteTx reported an error (alice: %v [SQLSTATE %q], bob: %v [SQLSTATE %q]); table %v — "+
				"docs/PLATFORM.md's claim needs re-checking on this PostgreSQL/crdb version",
				out.errAlice, sqlState(out.errAlice), out.errBob, sqlState(out.errBob), out.onCall)
		}
	})

	t.Run("retrying the whole transaction loses nothing", func(t *testing.T) {
		var mu sync.Mutex
		var commitErrs []error
		out := writeSkew(t, db, func(ctx context.Context, db *sql.DB, work func(context.Context, *sql.Tx) error) error {
			return crdb.Execute(func() error {
				tx, err := db.BeginTx(ctx, serializable)
				if err != nil {
					return err
				}
				if err := work(ctx, tx); err != nil {
					_ = tx.Rollback()
					return err
				}
				err = tx.Commit()
				if err != nil {
					mu.Lock()
					commitErrs = append(commitErrs, err)
					mu.Unlock()
				}
				return err
			})
		})
		t.Logf("whole-transaction retry: alice err=%v, bob err=%v, on call=%v, %d attempts, COMMIT errors %v", out.errAlice, out.errBob, out.onCall, out.attempts, commitErrs)
		if out.errAlice != nil || out.errBob != nil {
			t.Fatalf("a transaction failed: alice %v, bob %v", out.errAlice, out.errBob)
		}
		// Bob's first attempt was refused at COMMIT and retried from BEGIN,
		// so both updates are in the table.
		if out.onCall["alice"] || out.onCall["bob"] {
			t.Fatalf("table %v: want both doctors off call (both calls returned nil)", out.onCall)
		}
		if len(commitErrs) != 1 || sqlState(commitErrs[0]) != "40001" {
			t.Fatalf("want exactly one COMMIT refused with SQLSTATE 40001, got %v: the scenario did not exercise a failure at COMMIT", commitErrs)
		}
		if out.attempts != 3 {
			t.Fatalf("%d attempts, want 3 (alice once, bob twice)", out.attempts)
		}
	})
}
