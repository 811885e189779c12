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
// production bank runs it (the bank's package doc): the standby is a
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
				_ = c.Resume() // a paused server would not stop
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

// SyncRepWaiters counts the primary's backends whose transaction began
// after since and that now wait for the synchronous standby (wait event
// SyncRep): COMMITs in flight, whose outcome a client loses if the primary
// dies now.
func (p *Pair) SyncRepWaiters(since time.Time) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.Primary.url("postgres"))
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND xact_start > $1`, since).Scan(&n)
	return n, err
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
// every server process at once, then waits until they are gone. Connections
// to it break at once, as they would when its host resets them; a host that
// vanishes without resetting connections is not simulated.
func (p *Pair) KillPrimary() error {
	return p.Primary.Kill()
}

// Kill sends SIGKILL to the server's postmaster and all its processes and
// waits until they are dead. (Not to a process group: every PostgreSQL
// child calls setsid, so the postmaster's group is the postmaster alone.)
func (c *Cluster) Kill() error {
	pids, err := c.processes(true)
	if err != nil {
		return err
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for anyAlive(pids) {
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: server processes %v still alive after SIGKILL", pids)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// Pause stops every process of the server (SIGSTOP), as a machine that
// hangs; Resume lets them go on (SIGCONT). A paused synchronous standby
// holds every COMMIT on the primary in its wait for the standby, with the
// commit record already sent: what the standby then has, the client was
// never told.
func (c *Cluster) Pause() error {
	pids, err := c.processes(true)
	if err != nil {
		return err
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("pgtest: stopping %d: %w", pid, err)
		}
	}
	return nil
}

// Resume undoes Pause.
func (c *Cluster) Resume() error {
	pids, err := c.processes(false)
	if err != nil {
		return err
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("pgtest: continuing %d: %w", pid, err)
		}
	}
	return nil
}

// processes is the postmaster's pid and its children's. With freeze, the
// postmaster is stopped (SIGSTOP) first so that it forks no child after the
// list is made; the caller then signals them all.
func (c *Cluster) processes(freeze bool) ([]int, error) {
	b, err := os.ReadFile(c.dir + "/postmaster.pid")
	if err != nil {
		return nil, fmt.Errorf("pgtest: no running server in %s: %w", c.dir, err)
	}
	pm, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || pm <= 1 {
		return nil, fmt.Errorf("pgtest: bad postmaster.pid in %s", c.dir)
	}
	if !alive(pm) {
		return nil, fmt.Errorf("pgtest: postmaster %d of %s is not running", pm, c.dir)
	}
	if freeze {
		if err := syscall.Kill(pm, syscall.SIGSTOP); err != nil {
			return nil, fmt.Errorf("pgtest: stopping postmaster %d: %w", pm, err)
		}
	}
	pids := []int{pm}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := procStat(pid); ok && st.ppid == pm {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

type procState struct {
	state byte
	ppid  int
}

// procStat reads a process's state and parent from /proc.
func procStat(pid int) (procState, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procState{}, false
	}
	// pid (comm) state ppid …; comm may hold spaces and parentheses.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return procState{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	return procState{state: f[0][0], ppid: ppid}, true
}

// alive reports whether pid runs (a zombie does not: PID 1 here need not
// reap the postmaster).
func alive(pid int) bool {
	st, ok := procStat(pid)
	return ok && st.state != 'Z' && st.state != 'X'
}

func anyAlive(pids []int) bool {
	for _, pid := range pids {
		if alive(pid) {
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
