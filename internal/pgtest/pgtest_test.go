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

// TestPatroniPromotes: with the production Patroni configuration, losing the
// primary's machine makes Patroni promote the synchronous standby by itself
// within the leader key's lifetime and one loop, with every acknowledged
// COMMIT on it; the lost member, restarted, rejoins as the new primary's
// synchronous standby.
func TestPatroniPromotes(t *testing.T) {
	p := pgtest.StartPatroni(t)
	ctx := context.Background()
	dsn := p.DSN(t, "x")
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE t (v int); INSERT INTO t SELECT generate_series(1, 1000)`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	killed, err := p.KillLeader()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := p.WaitPromoted(killed, 3*(p.TTL+p.LoopWait)); err != nil {
		t.Fatalf("no promotion: %v", err)
	}
	t.Logf("%s lost; Patroni promoted the standby after %v (ttl %v, loop_wait %v)", killed.Name, time.Since(start).Round(time.Millisecond), p.TTL, p.LoopWait)
	conn, err = pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 1000 {
		t.Fatalf("after the failover: %d rows, %v", n, err)
	}
	conn.Close(ctx)
	if err := p.Rejoin(killed); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitWhole(2 * time.Minute); err != nil {
		t.Fatalf("%s did not rejoin as the synchronous standby: %v\n%s", killed.Name, err, killed.LogTail())
	}
}
