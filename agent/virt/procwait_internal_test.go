package virt

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestProcessWait: a QEMU process's wait is its vCPU threads' run-queue
// delay (schedstat's second field), not their run time nor the other
// threads' delay; a process without named vCPU threads counts them all
// for its wait, and has no guest run time (Usage then reads the domain's).
// Mutations: reading the first field, or summing every thread while vCPU
// threads are named, changes the sums below.
func TestProcessWait(t *testing.T) {
	procfs := t.TempDir()
	thread := func(pid, tid, comm, schedstat string) {
		dir := filepath.Join(procfs, pid, "task", tid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range map[string]string{"comm": comm + "\n", "schedstat": schedstat + "\n"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	thread("10", "10", "qemu-system-x86", "9000 1000 9")
	thread("10", "11", "CPU 0/TCG", "5000 200 3")
	thread("10", "12", "CPU 1/KVM", "7000 300 4")
	thread("10", "13", "IO mon_iothread", "1 4000 1")
	thread("20", "20", "qemu-kvm", "1 50 1")
	thread("20", "21", "worker", "1 70 1")
	thread("30", "30", "broken", "nonsense")

	for _, c := range []struct {
		pid  int
		want time.Duration
		ok   bool
	}{{10, 500, true}, {20, 120, true}, {30, 0, false}, {40, 0, false}} {
		got, ok := processWait(procfs, c.pid)
		if got != c.want || ok != c.ok {
			t.Errorf("pid %d: wait %v ok %v, want %v %v", c.pid, got, ok, c.want, c.ok)
		}
	}
	// The guest's run time is its named vCPU threads' first field, and
	// unknown without them. Mutations: counting every thread (12000 →
	// 21001), or falling back to all threads for 20.
	for _, c := range []struct {
		pid  int
		want time.Duration
		ok   bool
	}{{10, 12000, true}, {20, 0, false}, {30, 0, false}, {40, 0, false}} {
		got, ok := guestRan(procfs, c.pid)
		if ok != c.ok || ok && got != c.want {
			t.Errorf("pid %d: guest ran %v ok %v, want %v %v", c.pid, got, ok, c.want, c.ok)
		}
	}
	if _, ok := processWait("/proc", os.Getpid()); !ok {
		t.Error("this process's own schedstats are unreadable")
	}
}

func TestPidFile(t *testing.T) {
	if got := pidFile("qemu:///system", "vm1"); got != "/run/libvirt/qemu/vm1.pid" {
		t.Errorf("system: %s", got)
	}
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	if got := pidFile("qemu:///session", "vm1"); got != "/run/user/1000/libvirt/qemu/run/vm1.pid" {
		t.Errorf("session: %s", got)
	}
}
