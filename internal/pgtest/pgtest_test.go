package pgtest_test

import (
	"context"
	"testing"

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
