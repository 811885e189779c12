package market_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/market"
)

func lockedConfig(dir string) market.Config {
	return market.Config{Dir: dir, NATSPort: -1, Hosts: []market.HostSpec{{ID: "host-1", CPUs: 1, VMs: []agent.VM{{ID: "a1", Owner: "alice"}}}}}
}

// TestStaleLockFileDoesNotBlock: the lock file a dead market left behind
// (with its pid in it) does not stop the next one, which writes its own.
func TestStaleLockFileDoesNotBlock(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "lock"), []byte("999999999\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := market.Start(context.Background(), lockedConfig(dir))
	if err != nil {
		t.Fatalf("a stale lock file blocked the start: %v", err)
	}
	defer m.Close()
	if b, err := os.ReadFile(filepath.Join(dir, "lock")); err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Fatalf("the lock file says %q (%v), want this process's pid", b, err)
	}
}

// TestDataDirectoryLockAcrossProcesses is two mrmarket up on one data
// directory: while another process runs a market there, Start fails at
// once naming that process; once it is killed (no chance to clean up),
// Start succeeds.
func TestDataDirectoryLockAcrossProcesses(t *testing.T) {
	if dir := os.Getenv("MRM_TEST_LOCK_HOLDER"); dir != "" {
		holdLock(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDataDirectoryLockAcrossProcesses$")
	cmd.Env = append(os.Environ(), "MRM_TEST_LOCK_HOLDER="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "locked" {
				ready <- nil
				return
			}
		}
		ready <- fmt.Errorf("the holder ended without locking: %v", sc.Err())
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the holder did not start its market within 30s")
	}
	ctx := context.Background()
	// Refused at once, not after waiting for the holder to let go: the
	// holder lets go only when killed below, so a start that waited for
	// the lock would still be waiting at the deadline.
	refused := make(chan error, 1)
	go func() {
		_, err := market.Start(ctx, lockedConfig(dir))
		refused <- err
	}()
	select {
	case err = <-refused:
	case <-time.After(30 * time.Second):
		t.Fatal("a start beside another process's market waited for it instead of being refused")
	}
	want := "pid " + strconv.Itoa(cmd.Process.Pid) + ")"
	if !errors.Is(err, market.ErrDirInUse) || !strings.Contains(err.Error(), want) {
		t.Fatalf("start beside another process's market: %v; want ErrDirInUse naming %s", err, want)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	m, err := market.Start(ctx, lockedConfig(dir))
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	m.Close()
}

// holdLock runs a market on dir until killed (the helper process).
func holdLock(dir string) {
	m, err := market.Start(context.Background(), lockedConfig(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("locked")
	time.Sleep(time.Minute) // killed long before; the kernel drops its lock
	m.Close()
	os.Exit(0)
}
