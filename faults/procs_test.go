package faults

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/testpoll"
)

// binary is the mrmarket binary the processes run: $MRM_BIN (make faults
// passes the one it built), else one built for this test.
func binary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("MRM_BIN"); bin != "" {
		abs, err := filepath.Abs(bin)
		if err != nil {
			t.Fatal(err)
		}
		return abs
	}
	bin := filepath.Join(t.TempDir(), "mrmarket")
	cmd := exec.Command("go", "build", "-tags", "libvirt_dlopen", "-o", bin, "github.com/mrmarket/mrmarket/cli/mrmarket")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building mrmarket: %v\n%s", err, out)
	}
	return bin
}

// proc is one daemon of the market: a process that can be killed and
// started again with the same command line.
type proc struct {
	name  string
	bin   string
	args  []string
	ready string // a line of its output that says it serves
	log   string // its output, across restarts

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// start runs p and waits until its output since this start says ready.
func (p *proc) start(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "=== %s start %s\n", time.Now().Format(time.StampMilli), strings.Join(p.args, " "))
	offset, _ := f.Seek(0, 2)
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own group (kill reaches its children too), and killed if this
	// test dies without its cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("%s: %v", p.name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); f.Close(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	testpoll.CheckFor(t, 60*time.Second, 20*time.Millisecond, func() error {
		out, _ := os.ReadFile(p.log)
		if int64(len(out)) > offset && bytes.Contains(out[offset:], []byte(p.ready)) {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited before it was ready:\n%s", p.name, p.tail())
		default:
		}
		return fmt.Errorf("%s not ready within 60s:\n%s", p.name, p.tail())
	})
}

// kill sends SIGKILL to p's process group and waits for it to be gone.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// stop ends p politely (SIGTERM), then by force.
func (p *proc) stop() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		p.kill()
	}
}

// tail is the end of p's output, for a failure's message.
func (p *proc) tail() string {
	out, _ := os.ReadFile(p.log)
	if len(out) > 4000 {
		out = out[len(out)-4000:]
	}
	return string(out)
}
