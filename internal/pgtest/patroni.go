package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mrmarket/mrmarket/deploy/patroni"
	"github.com/mrmarket/mrmarket/internal/testpoll"
)

// pollEvery is how often the Patroni helpers look again for a state they
// wait for.
const pollEvery = 100 * time.Millisecond

// ErrNoPatroni means Patroni or etcd is missing.
var ErrNoPatroni = errors.New("pgtest: Patroni and etcd are not installed (apt-get install patroni etcd-server)")

// Patroni is a PostgreSQL primary and synchronous standby run by Patroni
// with the production configuration (deploy/patroni/patroni.yml) and a
// one-node etcd: the failover a production bank relies on, with no
// promotion by the test. KillLeader loses the primary's machine (Patroni
// and PostgreSQL killed at once); Patroni promotes the synchronous standby
// once the leader key expires. DSN lists both servers with
// target_session_attrs=read-write, as Pair's does.
//
// What differs from production, for a test on one machine: addresses and
// directories; trust authentication on 127.0.0.1 instead of TLS and
// passwords; fsync off (only processes die here, never the kernel holding
// the written pages).
type Patroni struct {
	Nodes    [2]*PatroniNode
	root     string
	etcd     *exec.Cmd
	etcdPort int
	// TTL and LoopWait are the configuration's leader-key lifetime and
	// loop period: a lost leader is replaced within TTL + LoopWait.
	TTL, LoopWait time.Duration
}

// PatroniNode is one member: its PostgreSQL server and its Patroni.
type PatroniNode struct {
	*Cluster
	Name    string
	api     int // Patroni's REST port
	config  string
	patroni *exec.Cmd
	exited  chan struct{}
}

// StartPatroni starts the pair under Patroni for one test and removes it at
// the test's end. When Patroni, etcd or PostgreSQL is missing the test fails
// in CI (CI=true) and is skipped elsewhere.
func StartPatroni(t testing.TB) *Patroni {
	t.Helper()
	p, err := startPatroni()
	if err != nil {
		if (errors.Is(err, ErrNotInstalled) || errors.Is(err, ErrNoPatroni)) && os.Getenv("CI") != "true" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	return p
}

func startPatroni() (*Patroni, error) {
	for _, bin := range []string{"patroni", "etcd"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, ErrNoPatroni
		}
	}
	root, err := newRoot()
	if err != nil {
		return nil, err
	}
	p := &Patroni{root: root}
	if err := p.start(); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

func (p *Patroni) start() error {
	var err error
	if p.etcdPort, err = freePort(); err != nil {
		return err
	}
	peer, err := freePort()
	if err != nil {
		return err
	}
	client, peerURL := fmt.Sprintf("http://127.0.0.1:%d", p.etcdPort), fmt.Sprintf("http://127.0.0.1:%d", peer)
	p.etcd = exec.Command("etcd", "--name", "e1", "--data-dir", filepath.Join(p.root, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL, "--initial-cluster", "e1="+peerURL)
	if p.etcd.Stdout, err = os.Create(filepath.Join(p.root, "etcd.log")); err != nil {
		return err
	}
	p.etcd.Stderr = p.etcd.Stdout
	if err := p.etcd.Start(); err != nil {
		return fmt.Errorf("pgtest: starting etcd: %w", err)
	}
	if err := testpoll.Wait(30*time.Second, pollEvery, func() error { return httpOK(client + "/version") }); err != nil {
		return fmt.Errorf("pgtest: etcd not ready: %w", err)
	}
	for i := range p.Nodes {
		n, err := p.node(i)
		if err != nil {
			return err
		}
		p.Nodes[i] = n
		if err := n.startPatroni(); err != nil {
			return err
		}
		if i == 0 { // the first bootstraps the cluster; the second copies it
			if err := testpoll.Wait(60*time.Second, pollEvery, func() error { return n.role("/primary") }); err != nil {
				return fmt.Errorf("pgtest: %s did not become the primary: %w\n%s", n.Name, err, n.LogTail())
			}
		}
	}
	return p.WaitWhole(90 * time.Second)
}

// node writes member i's configuration: the production file with this
// machine's addresses and directories.
func (p *Patroni) node(i int) (*PatroniNode, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(patroni.Config, &cfg); err != nil {
		return nil, fmt.Errorf("pgtest: deploy/patroni/patroni.yml: %w", err)
	}
	name := fmt.Sprintf("db%d", i+1)
	c, err := newCluster(p.root, name)
	if err != nil {
		return nil, err
	}
	api, err := freePort()
	if err != nil {
		return nil, err
	}
	dcs := dig(cfg, "bootstrap", "dcs")
	p.TTL = time.Duration(dcs["ttl"].(int)) * time.Second
	p.LoopWait = time.Duration(dcs["loop_wait"].(int)) * time.Second
	cfg["name"] = name
	cfg["restapi"] = map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", api), "connect_address": fmt.Sprintf("127.0.0.1:%d", api)}
	cfg["etcd3"] = map[string]any{"hosts": fmt.Sprintf("127.0.0.1:%d", p.etcdPort)}
	pg := dig(cfg, "postgresql")
	addr := fmt.Sprintf("127.0.0.1:%d", c.port)
	pg["listen"], pg["connect_address"] = addr, addr
	pg["data_dir"], pg["bin_dir"] = c.dir, c.bin
	pg["pgpass"] = filepath.Join(p.root, name+".pgpass")
	params := dig(pg, "parameters")
	params["ssl"] = "off"
	params["unix_socket_directories"] = p.root
	params["fsync"] = "off" // full_page_writes stays on: pg_rewind needs it
	params["max_connections"] = 200
	pg["pg_hba"] = []string{"local all all trust", "host all all 127.0.0.1/32 trust", "host replication all 127.0.0.1/32 trust"}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(p.root, name+".yml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return nil, err
	}
	return &PatroniNode{Cluster: c, Name: name, api: api, config: path}, nil
}

func dig(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	return m
}

// startPatroni runs this member's Patroni, as the postgres user when we
// are root (PostgreSQL refuses to run as root).
func (n *PatroniNode) startPatroni() error {
	cmd := exec.Command("patroni", n.config)
	cmd.Env = append(os.Environ(), "PATRONI_SUPERUSER_PASSWORD=test", "PATRONI_REPLICATION_PASSWORD=test", "PATRONI_REWIND_PASSWORD=test")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if n.asPG {
		uid, gid, err := postgresUser()
		if err != nil {
			return err
		}
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		cmd.Env = append(cmd.Env, "HOME="+filepath.Dir(n.dir))
	}
	log, err := os.OpenFile(filepath.Join(filepath.Dir(n.dir), n.Name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("pgtest: starting Patroni %s: %w", n.Name, err)
	}
	n.patroni, n.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(n.exited) }()
	return nil
}

// role asks this member's Patroni whether it has a role (GET /primary,
// /sync: 200 when it does).
func (n *PatroniNode) role(path string) error {
	return httpOK(fmt.Sprintf("http://127.0.0.1:%d%s", n.api, path))
}

// LogTail is the end of this member's Patroni log, for a failure message.
func (n *PatroniNode) LogTail() string {
	b, _ := os.ReadFile(filepath.Join(filepath.Dir(n.dir), n.Name+".log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// WaitWhole waits until one member is the primary and the other its
// synchronous standby: from then on every acknowledged COMMIT is on both.
func (p *Patroni) WaitWhole(timeout time.Duration) error {
	return testpoll.Wait(timeout, pollEvery, func() error {
		for i, n := range p.Nodes {
			if n.role("/primary") == nil {
				if err := p.Nodes[1-i].role("/sync"); err != nil {
					return fmt.Errorf("%s is the primary, %s not its synchronous standby: %w", n.Name, p.Nodes[1-i].Name, err)
				}
				return nil
			}
		}
		return errors.New("no primary")
	})
}

// Leader is the member that is the primary now, or nil.
func (p *Patroni) Leader() *PatroniNode {
	for _, n := range p.Nodes {
		if n.role("/primary") == nil {
			return n
		}
	}
	return nil
}

// KillLeader loses the primary's machine: SIGKILL to its Patroni and to
// every process of its PostgreSQL at once. It returns the member killed.
func (p *Patroni) KillLeader() (*PatroniNode, error) {
	n := p.Leader()
	if n == nil {
		return nil, errors.New("pgtest: no primary to kill")
	}
	if err := n.lose(); err != nil {
		return nil, err
	}
	return n, nil
}

// lose kills the member's Patroni and PostgreSQL at once, as when its
// machine is lost: Patroni stopped first, so that it cannot restart the
// server it sees die.
func (n *PatroniNode) lose() error {
	_ = syscall.Kill(-n.patroni.Process.Pid, syscall.SIGSTOP)
	err := n.Kill()
	_ = syscall.Kill(-n.patroni.Process.Pid, syscall.SIGKILL)
	select {
	case <-n.exited:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("pgtest: Patroni %s still running after SIGKILL", n.Name)
	}
	return err
}

// WaitPromoted waits until a member other than was is the primary and
// accepts writes: Patroni's promotion, not the test's.
func (p *Patroni) WaitPromoted(was *PatroniNode, timeout time.Duration) error {
	return testpoll.Wait(timeout, pollEvery, func() error {
		for _, n := range p.Nodes {
			if n == was {
				continue
			}
			if err := n.role("/primary"); err != nil {
				return err
			}
			if r, err := n.inRecovery(); err != nil || r {
				return fmt.Errorf("%s still in recovery (%v)", n.Name, err)
			}
		}
		return nil
	})
}

// Rejoin restarts a killed member's Patroni: it rewinds its old timeline
// and follows the new primary.
func (p *Patroni) Rejoin(n *PatroniNode) error {
	return n.startPatroni()
}

// CreateDB creates database name on the primary and returns the URL listing
// both servers (see Pair.URL).
func (p *Patroni) CreateDB(name string) (string, error) {
	n := p.Leader()
	if n == nil {
		return "", errors.New("pgtest: no primary")
	}
	if _, err := n.Cluster.CreateDB(name); err != nil {
		return "", err
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		p.Nodes[0].port, p.Nodes[1].port, name), nil
}

// DSN is CreateDB for a test.
func (p *Patroni) DSN(t testing.TB, name string) string {
	t.Helper()
	dsn, err := p.CreateDB(name)
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

func (p *Patroni) stop() {
	for _, n := range p.Nodes {
		if n == nil || n.patroni == nil {
			continue
		}
		_ = n.lose() // its server may be down already
	}
	if p.etcd != nil && p.etcd.Process != nil {
		_ = p.etcd.Process.Kill()
		_ = p.etcd.Wait()
	}
	os.RemoveAll(p.root)
}

func httpOK(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, res.Status)
	}
	return nil
}
