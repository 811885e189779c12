package virt

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The vCPUs' wait is read from the host's own accounts of the domain's
// QEMU process, not through libvirt's vCPU statistics: libvirt gathers
// those under a domain job and asks the guest's QEMU (its monitor) for the
// vCPUs' halted state, and a QEMU the market starves (a VM with no bid
// beside busy ones) does not answer. The call then never returns, it holds
// the domain's job, and the agent's next bid for that VM waits on the job:
// the VM that most needs its share could never get it.

// pidFile is where libvirt's QEMU driver writes a running domain's QEMU
// process id: under /run/libvirt/qemu for the system instance, the user's
// runtime directory for a session one.
func pidFile(uri, name string) string {
	dir := "/run/libvirt/qemu"
	if strings.Contains(uri, "/session") {
		run := os.Getenv("XDG_RUNTIME_DIR")
		if run == "" {
			run = filepath.Join(os.TempDir(), fmt.Sprintf("libvirt-%d", os.Getuid()))
		}
		dir = filepath.Join(run, "libvirt", "qemu", "run")
	}
	return filepath.Join(dir, name+".pid")
}

// processWait is the time the vCPU threads of process pid spent runnable
// and waiting for a host CPU (the second field of each thread's
// /proc/<pid>/task/<tid>/schedstat, the scheduling delay the guest sees as
// steal time), summed. QEMU names its vCPU threads "CPU <n>/<accel>" (the
// debug-threads option, which libvirt sets); a process with none so named
// counts all its threads. ok is false when the process or its accounts
// cannot be read.
func processWait(procfs string, pid int) (wait time.Duration, ok bool) {
	taskDir := filepath.Join(procfs, strconv.Itoa(pid), "task")
	tasks, err := os.ReadDir(taskDir)
	if err != nil {
		return 0, false
	}
	var vcpus, all time.Duration
	nvcpus, nall := 0, 0
	for _, t := range tasks {
		d, err := threadDelay(filepath.Join(taskDir, t.Name(), "schedstat"))
		if err != nil {
			continue // a thread that ended between the listing and the read
		}
		all += d
		nall++
		if comm, err := os.ReadFile(filepath.Join(taskDir, t.Name(), "comm")); err == nil && strings.HasPrefix(string(comm), "CPU ") {
			vcpus += d
			nvcpus++
		}
	}
	switch {
	case nvcpus > 0:
		return vcpus, true
	case nall > 0:
		return all, true
	}
	return 0, false
}

// threadDelay reads the run-queue wait (ns) from a schedstat file: "<time
// on CPU> <time waiting on a run queue> <timeslices run>".
func threadDelay(path string) (time.Duration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, fmt.Errorf("virt: %s: %q is not a schedstat line", path, b)
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || ns < 0 {
		return 0, fmt.Errorf("virt: %s: %q is not a schedstat line", path, b)
	}
	return time.Duration(ns), nil
}

// readPid reads a pid file.
func readPid(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, err == nil && pid > 0
}
