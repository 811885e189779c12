package pgtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mrmarket/mrmarket/internal/pgtest"
)

func TestClusterSurvivesRestart(t *testing.T) {
	c := pgtest.Start(t)
	ctx := context.Background()
	dsn := c.DSN(t, "one")
	c.DSN(t, "two")
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE t (x int); INSERT INTO t VALUES (42)`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if err := c.Restart(); err != nil {
		t.Fatal(err)
	}
	conn, err = pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var x int
	if err := conn.QueryRow(ctx, `SELECT x FROM t`).Scan(&x); err != nil || x != 42 {
		t.Fatalf("after restart: %d %v", x, err)
	}
}

// TestPairFailover: what the primary acknowledged is on the standby after
// the primary is killed and the standby promoted, and the two-host URL
// reaches whichever server is the primary.
func TestPairFailover(t *testing.T) {
	p := pgtest.StartPair(t)
	ctx := context.Background()
	dsn := p.DSN(t, "ha")
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE t (x int); INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	var syncCommit, names string
	if err := conn.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names')`).Scan(&syncCommit, &names); err != nil {
		t.Fatal(err)
	}
	if syncCommit != "on" || names != pgtest.StandbyName {
		t.Fatalf("primary: synchronous_commit=%q synchronous_standby_names=%q", syncCommit, names)
	}
	for i := 2; i <= 100; i++ {
		if _, err := conn.Exec(ctx, `INSERT INTO t VALUES ($1)`, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.KillPrimary(); err != nil {
		t.Fatal(err)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Fatal("a connection to the killed primary still answers")
	}
	conn.Close(ctx)
	// Before promotion nothing accepts writes: the standby is read-only.
	if c, err := pgx.Connect(ctx, dsn); err == nil {
		c.Close(ctx)
		t.Fatal("connected read-write before the promotion")
	}
	start := time.Now()
	if err := p.Promote(); err != nil {
		t.Fatal(err)
	}
	t.Logf("promotion took %v", time.Since(start))
	conn, err = pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n, port int
	if err := conn.QueryRow(ctx, `SELECT count(*), current_setting('port')::int FROM t`).Scan(&n, &port); err != nil {
		t.Fatal(err)
	}
	if n != 100 || port != p.Standby.Port() {
		t.Fatalf("after failover: %d rows on port %d, want 100 on the standby's %d", n, port, p.Standby.Port())
	}
	if _, err := conn.Exec(ctx, `INSERT INTO t VALUES (101)`); err != nil {
		t.Fatalf("the promoted standby refuses writes: %v", err)
	}
}
