package cli_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/testpoll"
)

// freeAddr is a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// readyz polls addr's /readyz until it answers 200 with want.
func readyz(t *testing.T, addr, want string) {
	t.Helper()
	testpoll.CheckFor(t, 15*time.Second, 20*time.Millisecond, func() error {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return fmt.Errorf("/readyz: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(b) != want {
			return fmt.Errorf("/readyz: %d %q, want 200 %q", resp.StatusCode, b, want)
		}
		return nil
	})
}

// TestDaemonsReadyz: `mrmarket agent` on libvirt (its test driver) and
// `mrmarket broker` list what they depend on at /readyz: NATS and libvirt,
// NATS and the plans bucket.
func TestDaemonsReadyz(t *testing.T) {
	t.Run("agent", func(t *testing.T) {
		needLibvirt(t)
		w := newDaemonWorld(t)
		addr := freeAddr(t)
		runDaemon(t, "agent", "--host", "host-9", "--libvirt", "test:///default", "--nats", w.url, "--creds", string(w.keys),
			"--state", filepath.Join(w.dir, "agent.json"), "--http", addr, "--tick", "50ms")
		readyz(t, addr, "nats ok\nlibvirt ok\n")
	})
	t.Run("broker", func(t *testing.T) {
		w := newDaemonWorld(t)
		addr := freeAddr(t)
		runDaemon(t, "broker", "--nats", w.url, "--creds", string(w.keys), "--http", addr)
		readyz(t, addr, "nats ok\nstore ok\n")
	})
}
