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

// schedTimes is what the host's scheduler accounted to threads: the time
// they ran on a CPU and the time they were runnable but waited for one.
type schedTimes struct{ ran, waited time.Duration }

// processTimes sums the schedstat accounts (/proc/<pid>/task/<tid>/schedstat)
// of the vCPU threads of QEMU process pid. QEMU names its vCPU threads
// "CPU <n>/<accel>" (the debug-threads option, which libvirt sets); vcpus
// is false when none is so named, and the sums are then all its threads'.
// ok is false when the process or its accounts cannot be read.
func processTimes(procfs string, pid int) (t schedTimes, vcpus, ok bool) {
	taskDir := filepath.Join(procfs, strconv.Itoa(pid), "task")
	tasks, err := os.ReadDir(taskDir)
	if err != nil {
		return schedTimes{}, false, false
	}
	var named, all schedTimes
	nnamed, nall := 0, 0
	for _, task := range tasks {
		d, err := threadTimes(filepath.Join(taskDir, task.Name(), "schedstat"))
		if err != nil {
			continue // a thread that ended between the listing and the read
		}
		all.ran, all.waited = all.ran+d.ran, all.waited+d.waited
		nall++
		if comm, err := os.ReadFile(filepath.Join(taskDir, task.Name(), "comm")); err == nil && strings.HasPrefix(string(comm), "CPU ") {
			named.ran, named.waited = named.ran+d.ran, named.waited+d.waited
			nnamed++
		}
	}
	switch {
	case nnamed > 0:
		return named, true, true
	case nall > 0:
		return all, false, true
	}
	return schedTimes{}, false, false
}

// processWait is the time the vCPU threads of process pid spent runnable
// and waiting for a host CPU (the scheduling delay the guest sees as steal
// time), summed; a process with no named vCPU threads counts all its
// threads (processTimes).
func processWait(procfs string, pid int) (wait time.Duration, ok bool) {
	t, _, ok := processTimes(procfs, pid)
	return t.waited, ok
}

// VCPUWait is the time the vCPU threads of the running domain name (on
// the libvirt at uri) spent runnable and waiting for a host CPU, from the
// host's accounts of its QEMU process (processWait): what the agent reads
// as a VM's CPU wait (Enforcer.CPUWait). ok is false when the process or
// its accounts cannot be read.
func VCPUWait(uri, name string) (wait time.Duration, ok bool) {
	pid, ok := readPid(pidFile(uri, name))
	if !ok {
		return 0, false
	}
	return processWait("/proc", pid)
}

// guestRan is the CPU time the vCPU threads of process pid ran: what the
// guest itself computed, without its QEMU's main loop and I/O threads. ok
// is false when the vCPU threads are not named or not readable.
func guestRan(procfs string, pid int) (ran time.Duration, ok bool) {
	t, vcpus, ok := processTimes(procfs, pid)
	return t.ran, ok && vcpus
}

// threadTimes reads a schedstat file: "<time on CPU> <time waiting on a
// run queue> <timeslices run>", in ns.
func threadTimes(path string) (schedTimes, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return schedTimes{}, err
	}
	f := strings.Fields(string(b))
	var ns [2]int64
	for i := range ns {
		if len(f) > i {
			ns[i], err = strconv.ParseInt(f[i], 10, 64)
		}
		if len(f) <= i || err != nil || ns[i] < 0 {
			return schedTimes{}, fmt.Errorf("virt: %s: %q is not a schedstat line", path, b)
		}
	}
	return schedTimes{ran: time.Duration(ns[0]), waited: time.Duration(ns[1])}, nil
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
