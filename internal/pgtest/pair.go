package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// StandbyName is the standby's application name, the one the primary's
// synchronous_standby_names lists.
const StandbyName = "standby"

// Pair is a PostgreSQL primary with a synchronous streaming standby, as a
// production bank runs it (DESIGN.md, Replication): the standby is a
// pg_basebackup -R copy of the primary, streams its WAL, and the primary
// runs with synchronous_commit=on and synchronous_standby_names naming it,
// so a COMMIT is acknowledged only once the standby has flushed its WAL.
// KillPrimary loses the primary "machine" (SIGKILL to every process of the
// server), Promote makes the standby the primary, and DSN lists both hosts
// with target_session_attrs=read-write, so a client finds whichever is the
// primary.
//
// Test shortcuts: fsync and full_page_writes are off (as for Cluster), which
// is safe here because only processes die, never the kernel that holds the
// written pages; production keeps both on.
type Pair struct {
	// Primary is the first primary; Standby the standby (the primary once
	// promoted).
	Primary, Standby *Cluster
	root             string
	promoted         bool
}

// StartPair starts a primary+synchronous-standby pair for one test and
// removes it at the test's end. When PostgreSQL is missing the test fails in
// CI (CI=true) and is skipped elsewhere.
func StartPair(t testing.TB) *Pair {
	t.Helper()
	p, stop, err := StartPairMain()
	if err != nil {
		if errors.Is(err, ErrNotInstalled) && os.Getenv("CI") != "true" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return p
}

// StartPairMain starts a pair for a TestMain; stop stops and removes it.
func StartPairMain() (*Pair, func(), error) {
	root, err := newRoot()
	if err != nil {
		return nil, nil, err
	}
	p := &Pair{root: root}
	stop := func() {
		for _, c := range []*Cluster{p.Primary, p.Standby} {
			if c != nil {
				_, _ = c.run("pg_ctl", "-D", c.dir, "-m", "immediate", "-w", "stop")
			}
		}
		os.RemoveAll(root)
	}
	if err := p.start(); err != nil {
		stop()
		return nil, nil, err
	}
	return p, stop, nil
}

func (p *Pair) start() error {
	primary, err := initCluster(p.root, "primary")
	if err != nil {
		return err
	}
	p.Primary = primary
	// On the command line, not in postgresql.conf: pg_basebackup copies the
	// configuration files, and a promoted standby that still named a
	// synchronous standby would wait for it on every COMMIT, for ever.
	primary.opts = []string{"synchronous_commit=on", "synchronous_standby_names=" + StandbyName,
		"wal_level=replica", "max_wal_senders=4"}
	if err := primary.start(); err != nil {
		return err
	}
	standby, err := newCluster(p.root, "standby")
	if err != nil {
		return err
	}
	p.Standby = standby
	if out, err := standby.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(primary.port), "-U", "postgres",
		"-D", standby.dir, "-R", "-X", "stream", "-c", "fast", "--no-sync"); err != nil {
		return fmt.Errorf("pgtest: pg_basebackup: %v\n%s", err, out)
	}
	// The walreceiver names itself after cluster_name when primary_conninfo
	// (written by -R) has no application_name.
	standby.opts = []string{"cluster_name=" + StandbyName, "hot_standby=on"}
	if err := standby.start(); err != nil {
		return err
	}
	return p.WaitSync(30 * time.Second)
}

// WaitSync waits until the primary reports the standby streaming as its
// synchronous standby: from then on every acknowledged COMMIT is on both.
func (p *Pair) WaitSync(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		state, err := p.syncState()
		if err == nil && state == "sync" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: standby not synchronous after %v (state %q, %v)", timeout, state, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *Pair) syncState() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.Primary.url("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var state string
	err = conn.QueryRow(ctx, `SELECT sync_state FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'`, StandbyName).Scan(&state)
	return state, err
}

// Current is the cluster that is the primary now: the standby once promoted.
func (p *Pair) Current() *Cluster {
	if p.promoted {
		return p.Standby
	}
	return p.Primary
}

// CreateDB creates database name on the current primary (the standby
// replays it) and returns the URL listing both hosts (see URL).
func (p *Pair) CreateDB(name string) (string, error) {
	if _, err := p.Current().CreateDB(name); err != nil {
		return "", err
	}
	return p.URL(name), nil
}

// DSN is CreateDB for a test.
func (p *Pair) DSN(t testing.TB, name string) string {
	t.Helper()
	dsn, err := p.CreateDB(name)
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// URL is the connection URL of database db listing both servers, primary
// first, with target_session_attrs=read-write: pgx tries the hosts in turn
// and keeps the first that accepts writes, so the same URL reaches the
// primary before a failover and the promoted standby after it. A host that
// refuses connections is passed over at once; connect_timeout bounds the
// wait on one that does not answer.
func (p *Pair) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		p.Primary.port, p.Standby.port, db)
}

// KillPrimary loses the primary's machine: SIGKILL to the postmaster and
// every server process (pg_ctl starts the postmaster in its own session, so
// they are one process group), then waits until they are gone. Connections
// to it break at once, as they would when its host resets them; a host that
// vanishes without resetting connections is not simulated.
func (p *Pair) KillPrimary() error {
	return p.Primary.Kill()
}

// Kill sends SIGKILL to the server's postmaster and all its processes and
// waits until they are dead.
func (c *Cluster) Kill() error {
	b, err := os.ReadFile(c.dir + "/postmaster.pid")
	if err != nil {
		return fmt.Errorf("pgtest: no running server in %s: %w", c.dir, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || pid <= 1 {
		return fmt.Errorf("pgtest: bad postmaster.pid in %s", c.dir)
	}
	pgid, err := syscall.Getpgid(pid)
	if err != nil {
		return fmt.Errorf("pgtest: postmaster %d: %w", pid, err)
	}
	if pgid != pid {
		return fmt.Errorf("pgtest: postmaster %d is not a process group leader (group %d); refusing to kill the group", pid, pgid)
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("pgtest: killing process group %d: %w", pgid, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for groupAlive(pgid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: process group %d still alive after SIGKILL", pgid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// groupAlive reports whether any process of group pgid is alive (not a
// zombie: PID 1 here need not reap the postmaster).
func groupAlive(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return syscall.Kill(-pgid, 0) == nil
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp …; comm may hold spaces and parentheses.
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid && pid > 0 {
			return true
		}
	}
	return false
}

// Promote promotes the standby (pg_ctl promote) and waits until it accepts
// writes.
func (p *Pair) Promote() error {
	s := p.Standby
	if out, err := s.run("pg_ctl", "-D", s.dir, "-w", "-t", "60", "promote"); err != nil {
		return fmt.Errorf("pgtest: promoting the standby: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		inRecovery, err := s.inRecovery()
		if err == nil && !inRecovery {
			p.promoted = true
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: standby still not writable after promotion (in recovery %v, %v)", inRecovery, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *Cluster) inRecovery() (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.url("postgres"))
	if err != nil {
		return false, err
	}
	defer conn.Close(ctx)
	var r bool
	err = conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&r)
	return r, err
}

// DirectURL is the URL of database db on this server alone.
func (c *Cluster) DirectURL(db string) string { return c.url(db) }
