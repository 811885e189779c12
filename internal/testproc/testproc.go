// Package testproc runs mrmarket's daemons as processes of their own for
// tests that kill and restart them (the fault test, the end-to-end
// suite): each in its own process group, so a kill reaches its children,
// and killed with the test's process if its cleanup never runs.
package testproc

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

// Binary is the mrmarket binary the processes run: $MRM_BIN (the Makefile
// passes the one it built), else one built for this test.
func Binary(t testing.TB) string {
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

// Proc is one daemon of the market: a process that can be killed and
// started again with the same command line.
type Proc struct {
	Name  string
	Bin   string
	Args  []string
	Ready string // a line of its output that says it serves
	Log   string // its output, across restarts

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs p and waits until its output since this start says Ready; it
// returns when the process was spawned.
func (p *Proc) Start(t testing.TB) time.Time {
	t.Helper()
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "=== %s start %s\n", time.Now().Format(time.StampMilli), strings.Join(p.Args, " "))
	offset, _ := f.Seek(0, 2)
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own group (kill reaches its children too), and killed if this
	// test dies without its cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	spawned := time.Now()
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("%s: %v", p.Name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); f.Close(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	testpoll.CheckFor(t, 60*time.Second, 20*time.Millisecond, func() error {
		out, _ := os.ReadFile(p.Log)
		if int64(len(out)) > offset && bytes.Contains(out[offset:], []byte(p.Ready)) {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited before it was ready:\n%s", p.Name, p.Tail())
		default:
		}
		return fmt.Errorf("%s not ready within 60s:\n%s", p.Name, p.Tail())
	})
	return spawned
}

// Kill sends SIGKILL to p's process group and waits for it to be gone.
func (p *Proc) Kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Stop ends p politely (SIGTERM), then by force.
func (p *Proc) Stop() {
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
		p.Kill()
	}
}

// Tail is the end of p's output, for a failure's message.
func (p *Proc) Tail() string {
	out, _ := os.ReadFile(p.Log)
	if len(out) > 4000 {
		out = out[len(out)-4000:]
	}
	return string(out)
}
