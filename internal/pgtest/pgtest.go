// Package pgtest starts private, throwaway PostgreSQL clusters for tests:
// one initdb in a temporary directory, a server on a free 127.0.0.1 port
// with its socket in that directory, fresh databases on demand, and Restart
// for tests that must survive a database restart. It needs the PostgreSQL
// server binaries (Debian: apt-get install postgresql); as root it runs them
// as the postgres user, since PostgreSQL refuses to run as root.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNotInstalled means no PostgreSQL server binaries were found.
var ErrNotInstalled = errors.New("pgtest: PostgreSQL is not installed (apt-get install postgresql)")

// Cluster is a private PostgreSQL cluster in a temporary directory.
type Cluster struct {
	bin  string // directory of initdb and pg_ctl
	dir  string // data directory (and socket directory)
	root string // what to remove at the end
	port int
	asPG bool     // run the binaries as the postgres user
	opts []string // server settings (-c name=value) beyond the defaults

	mu  sync.Mutex
	dbs map[string]bool
}

// Start starts a cluster for one test and stops it at the test's end. When
// PostgreSQL is missing the test fails in CI (CI=true) and is skipped elsewhere.
func Start(t testing.TB) *Cluster {
	t.Helper()
	c, stop, err := StartMain()
	if err != nil {
		if errors.Is(err, ErrNotInstalled) && os.Getenv("CI") != "true" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return c
}

// StartMain starts a cluster for a TestMain; stop stops and removes it.
func StartMain() (*Cluster, func(), error) {
	root, err := newRoot()
	if err != nil {
		return nil, nil, err
	}
	c, err := initCluster(root, "data")
	if err == nil {
		err = c.start()
	}
	if err != nil {
		os.RemoveAll(root)
		return nil, nil, err
	}
	stop := func() {
		_, _ = c.run("pg_ctl", "-D", c.dir, "-m", "immediate", "-w", "stop")
		os.RemoveAll(root)
	}
	return c, stop, nil
}

// newRoot makes the temporary directory of one or more clusters, owned by
// the postgres user when we are root.
func newRoot() (string, error) {
	if _, err := findBin(); err != nil {
		return "", err
	}
	root, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return "", err
	}
	if u, err := user.Current(); err == nil && u.Uid == "0" {
		uid, gid, err := postgresUser()
		if err == nil {
			err = os.Chown(root, uid, gid)
		}
		if err != nil {
			os.RemoveAll(root)
			return "", err
		}
	}
	return root, nil
}

func postgresUser() (uid, gid int, err error) {
	pg, err := user.Lookup("postgres")
	if err != nil {
		return 0, 0, fmt.Errorf("pgtest: running as root needs the postgres user: %w", err)
	}
	uid, _ = strconv.Atoi(pg.Uid)
	gid, _ = strconv.Atoi(pg.Gid)
	return uid, gid, nil
}

// newCluster describes a cluster in root/name on a free port; nothing is
// created yet.
func newCluster(root, name string) (*Cluster, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	c := &Cluster{bin: bin, root: root, dir: filepath.Join(root, name), dbs: map[string]bool{}}
	if u, err := user.Current(); err == nil && u.Uid == "0" {
		c.asPG = true
	}
	if c.port, err = freePort(); err != nil {
		return nil, err
	}
	return c, nil
}

// initCluster runs initdb for a new cluster in root/name.
func initCluster(root, name string) (*Cluster, error) {
	c, err := newCluster(root, name)
	if err != nil {
		return nil, err
	}
	if out, err := c.run("initdb", "-D", c.dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		return nil, fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}
	return c, nil
}

// findBin finds the newest PostgreSQL server binaries.
func findBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", ErrNotInstalled
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// run runs a PostgreSQL binary, as the postgres user when we are root.
func (c *Cluster) run(name string, args ...string) ([]byte, error) {
	path := filepath.Join(c.bin, name)
	var cmd *exec.Cmd
	if c.asPG {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	return cmd.CombinedOutput()
}

func (c *Cluster) start() error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200", c.port, c.dir)
	for _, o := range c.opts {
		opts += " -c " + o // later settings win
	}
	if out, err := c.run("pg_ctl", "-D", c.dir, "-o", opts, "-l", filepath.Join(c.dir, "log"), "-w", "-t", "60", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "log"))
		return fmt.Errorf("pgtest: starting PostgreSQL: %v\n%s\n%s", err, out, log)
	}
	return c.wait()
}

// wait polls until the server accepts connections.
func (c *Cluster) wait() error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, c.url("postgres"))
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: PostgreSQL on port %d not ready: %w", c.port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *Cluster) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

// Port is the server's port.
func (c *Cluster) Port() int { return c.port }

// CreateDB creates database name (once) and returns its connection URL.
func (c *Cluster) CreateDB(name string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.dbs[name] {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, c.url("postgres"))
		if err != nil {
			return "", err
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return "", fmt.Errorf("pgtest: creating database %s: %w", name, err)
		}
		c.dbs[name] = true
	}
	return c.url(name), nil
}

// DSN is CreateDB for a test.
func (c *Cluster) DSN(t testing.TB, name string) string {
	t.Helper()
	dsn, err := c.CreateDB(name)
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// Restart stops the server (fast shutdown: open connections are cut) and
// starts it again on the same port.
func (c *Cluster) Restart() error {
	if out, err := c.run("pg_ctl", "-D", c.dir, "-m", "fast", "-w", "stop"); err != nil {
		return fmt.Errorf("pgtest: stopping PostgreSQL: %v\n%s", err, out)
	}
	return c.start()
}

// Stop stops the server.
func (c *Cluster) Stop() error {
	if out, err := c.run("pg_ctl", "-D", c.dir, "-m", "immediate", "-w", "stop"); err != nil {
		return fmt.Errorf("pgtest: stopping PostgreSQL: %v\n%s", err, out)
	}
	return nil
}
