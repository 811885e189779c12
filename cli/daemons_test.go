package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/agent/virt"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/cli"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// daemonWorld is NATS and a served bank with the identities of a cluster.
type daemonWorld struct {
	url  string
	nc   *nats.Conn
	keys signing.CredsDir
	dir  string
}

func newDaemonWorld(t *testing.T) *daemonWorld {
	t.Helper()
	dir := t.TempDir()
	ns, nc := natstest.Start(t)
	natstest.Assets(t, nc) // the bank's (agents wait for MRM_HOSTS)
	b, err := bank.Open(filepath.Join(dir, "bank.db"), bank.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	stop, err := bank.Serve(nc, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	w := &daemonWorld{url: ns.ClientURL(), nc: nc, keys: signing.CredsDir(filepath.Join(dir, "creds")), dir: dir}
	for _, p := range []struct{ role, name string }{{wire.RoleAdmin, "admin"}, {wire.RoleBroker, "broker"}, {wire.RoleAgent, "host-9"}} {
		k, err := w.keys.Ensure(p.role, p.name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.AddPrincipal(context.Background(), &wire.PrincipalRequest{Key: k.Public(), Name: p.name, Role: p.role}); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// runDaemon runs one mrmarket daemon until the test ends. (One command line
// at a time per process: urfave/cli's help flag is global.)
func runDaemon(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var out bytes.Buffer
	go func() {
		_ = cli.App(&out, &out).RunContext(ctx, append([]string{"mrmarket"}, args...))
		close(done)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// needLibvirt skips the test where libvirt's test driver cannot be
// opened (outside CI, where it must be).
func needLibvirt(t *testing.T) {
	t.Helper()
	if e, err := virt.New(virt.Config{URI: "test:///default"}); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("libvirt is required in CI: %v", err)
		}
		t.Skipf("libvirt not available (apt-get install libvirt0): %v", err)
	} else {
		e.Close()
	}
}

// TestAgentDaemon runs `mrmarket agent` on libvirt's test driver: it
// publishes its host's state, which a broker turns into a price.
func TestAgentDaemon(t *testing.T) {
	needLibvirt(t)
	w := newDaemonWorld(t)
	b, err := broker.New(broker.Config{NC: w.nc, Bank: bank.Client{NC: w.nc}})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := broker.Serve(w.nc, b)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	runDaemon(t, "agent", "--host", "host-9", "--libvirt", "test:///default", "--nats", w.url, "--creds", string(w.keys),
		"--state", filepath.Join(w.dir, "agent.json"), "--http", "", "--tick", "50ms")
	testpoll.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		p, err := b.Price(&wire.PriceRequest{Host: "host-9"})
		if err == nil && len(p.Hosts) == 1 {
			return nil
		}
		return fmt.Errorf("the agent's state reaches the broker: not within 15s (%d hosts, %v)", len(p.Hosts), err)
	})
}

// TestBrokerDaemon runs `mrmarket broker`: it answers price requests.
func TestBrokerDaemon(t *testing.T) {
	w := newDaemonWorld(t)
	runDaemon(t, "broker", "--nats", w.url, "--creds", string(w.keys), "--http", "")
	testpoll.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		_, err := (broker.Client{NC: w.nc, Keys: w.keys}).Plans(context.Background(), &wire.PlansRequest{}) // signed: reads are authenticated
		if err == nil {
			return nil
		}
		return fmt.Errorf("the broker answers: not within 15s (%v)", err)
	})
}
