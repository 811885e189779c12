package virt_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/mrmarket/mrmarket/agent/virt"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// startNBDKit serves a memory disk of size bytes through nbdkit's rate
// filter at mibps MiB/s across all its connections (the filter's rate= is
// in bits per second): a device the project did not write, which serves
// requests in parallel and lets a lone reader burst past its rate. It
// returns the port. nbdkit is Debian's package (.ci/libvirt.sh installs
// it); without it the test fails in CI and skips elsewhere.
func startNBDKit(t *testing.T, size uint64, mibps int) int {
	t.Helper()
	bin, err := exec.LookPath("nbdkit")
	if err != nil {
		msg := "nbdkit not installed (apt-get install nbdkit, or run .ci/libvirt.sh)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	port := natstest.FreePort(t)
	cmd := exec.Command(bin, "--foreground", "--exit-with-parent", "--ipaddr", "127.0.0.1", "--port", strconv.Itoa(port),
		"--filter=rate", "memory", fmt.Sprintf("size=%d", size), fmt.Sprintf("rate=%dM", mibps*8)) // nbdkit sizes: M is 2^20
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var log []string
	go func() {
		for s := bufio.NewScanner(out); s.Scan(); {
			mu.Lock()
			log = append(log, s.Text())
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		mu.Lock()
		defer mu.Unlock()
		if t.Failed() && len(log) > 0 {
			t.Logf("nbdkit said: %v", log)
		}
	})
	return port
}

// TestDiskSharesOnNBDKit: TCG guests reading flat out from NBD disks
// served by nbdkit's memory plugin behind its rate filter at 64 MiB/s, the
// enforcer in its default disk mode (throttle) re-planning the caps each
// tick: each guest's part is within 0.05 of its bid's over 10 s windows —
// 3:1 in steady state and from 5 s after each resume of either guest,
// twice; from 5 s after a third guest arrives at 1:2:5, after each
// guest's pause and resume, and after the bids change to 5:2:1. Before the estimate
// learned from contended ticks only, the guest paying 3× got 0.50–0.56
// for ~27 s after each resume (a lone guest's burst had taught the
// estimate ~160 MiB/s, caps that bound nothing).
func TestDiskSharesOnNBDKit(t *testing.T) {
	conn := needQEMU(t)
	port := startNBDKit(t, 1<<30, sharedDiskMiBps)
	initrd := buildIOInitramfs(t)
	prefix := fmt.Sprintf("mrm-nbk-%d-", os.Getpid())
	doms := map[string]*libvirt.Domain{}
	for _, g := range []string{"k1", "k2", "k3"} {
		xml := fmt.Sprintf(`<disk type='network' device='disk'><driver name='qemu' type='raw' cache='none'/>`+
			`<source protocol='nbd'><host name='127.0.0.1' port='%d'/></source>`+
			`<target dev='vda' bus='virtio'/><readonly/></disk>`, port)
		doms[g] = startIOGuest(t, conn, prefix+g, "alice", initrd, "mrm_mode=disk", xml, false)
	}
	bootPausedWhenReading(t, doms)
	enf, err := virt.New(virt.Config{URI: qemuURI, Disk: wire.ModeThrottle, DiskWhy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer enf.Close()
	book := &bidBook{prefix: prefix, bids: map[string]float64{"k1": 3, "k2": 1}}
	caps := runThrottles(t, enf, book.shares)
	running := map[string]*libvirt.Domain{"k1": doms["k1"], "k2": doms["k2"]}
	for _, d := range running {
		if err := d.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	window := func(what string) {
		r := diskRates(t, running, 10*time.Second)
		target := book.parts()
		checkParts(t, what, r, target, diskShareTol)
		t.Logf("%s: caps now %v, capacity %s", what, caps(), modes(enf))
	}
	time.Sleep(10 * time.Second)
	window("3:1, 10–20 s after the start")
	for round := 1; round <= 2; round++ {
		for _, g := range []string{"k2", "k1"} {
			if err := doms[g].Suspend(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Second) // the other reads alone, uncapped
			if err := doms[g].Resume(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Second)
			window(fmt.Sprintf("3:1, 5–15 s after %s's resume (round %d)", g, round))
		}
	}
	// A third guest arrives, the bids 1:2:5; then each guest pauses and
	// resumes in turn; then the bids change to 5:2:1.
	book.set(map[string]float64{"k1": 1, "k2": 2, "k3": 5})
	running["k3"] = doms["k3"]
	if err := doms["k3"].Resume(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	window("1:2:5, 5–15 s after k3 arrived")
	for _, g := range []string{"k3", "k1", "k2"} {
		if err := doms[g].Suspend(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second) // the other two divide the device
		if err := doms[g].Resume(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		window(fmt.Sprintf("1:2:5, 5–15 s after %s's resume", g))
	}
	book.set(map[string]float64{"k1": 5, "k2": 2, "k3": 1})
	time.Sleep(5 * time.Second)
	window("5:2:1, 5–15 s after the bids changed")
}
