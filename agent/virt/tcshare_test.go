package virt

import (
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// vethGuest is a stand-in for a VM on the shared link: a network namespace
// behind a veth pair whose host end plays the tap.
type vethGuest struct {
	ns, tap, mac, hostIP, ip string
}

// startVethGuests makes n of them, failing in CI and skipping elsewhere
// where the host cannot (root, iproute2, veth, namespaces, ifb, htb, u32,
// mirred, clsact).
func startVethGuests(t *testing.T, n int) []vethGuest {
	t.Helper()
	need := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			msg := fmt.Sprintf("the shared link needs root, iproute2, veth, namespaces and the kernel's ifb, htb, u32, mirred, clsact: %s: %v\n%s",
				strings.Join(args, " "), err, out)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	id := os.Getpid() % 10000
	var gs []vethGuest
	for i := range n {
		g := vethGuest{ns: fmt.Sprintf("mrmsh%d%d", id, i), tap: fmt.Sprintf("mrmsh%d%d", id, i),
			hostIP: fmt.Sprintf("10.233.%d.1", i), ip: fmt.Sprintf("10.233.%d.2", i)}
		t.Cleanup(func() {
			_ = exec.Command("ip", "link", "del", g.tap).Run()
			_ = exec.Command("ip", "netns", "del", g.ns).Run()
		})
		need("ip", "netns", "add", g.ns)
		need("ip", "link", "add", g.tap, "type", "veth", "peer", "name", "eth0", "netns", g.ns)
		need("ip", "addr", "add", g.hostIP+"/24", "dev", g.tap)
		need("ip", "link", "set", g.tap, "up")
		need("ip", "-n", g.ns, "addr", "add", g.ip+"/24", "dev", "eth0")
		need("ip", "-n", g.ns, "link", "set", "eth0", "up")
		need("ip", "-n", g.ns, "link", "set", "lo", "up")
		out, err := exec.Command("ip", "-n", g.ns, "-br", "link", "show", "eth0").Output()
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(out))
		g.mac = f[2]
		gs = append(gs, g)
	}
	for _, ifb := range sharedIFBs {
		t.Cleanup(func() { _ = exec.Command("ip", "link", "del", ifb).Run() })
		need("ip", "link", "add", ifb, "type", "ifb")
		need("ip", "link", "set", ifb, "up")
	}
	return gs
}

// inNS runs f on a thread inside ns's network namespace.
func inNS(ns string, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			done <- err
			return
		}
		defer home.Close()
		there, err := os.Open("/run/netns/" + ns)
		if err != nil {
			done <- err
			return
		}
		defer there.Close()
		if err := unix.Setns(int(there.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		err = f()
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

// flow streams from the host into a guest (in) or out of it for window,
// and returns what was received, in bytes.
func flow(t *testing.T, g vethGuest, in bool, window time.Duration) *atomic.Int64 {
	t.Helper()
	var got atomic.Int64
	var ln net.Listener
	listenAt := g.hostIP
	if in {
		listenAt = g.ip
	}
	listen := func() (err error) { ln, err = net.Listen("tcp", listenAt+":0"); return err }
	var err error
	if in {
		err = inNS(g.ns, listen)
	} else {
		err = listen()
	}
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		c, err := ln.Accept()
		ln.Close()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(window))
		n, _ := io.Copy(io.Discard, c)
		got.Add(n)
	}()
	dial := func() error {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(window))
			buf := make([]byte, 64<<10)
			for {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
		return nil
	}
	if in {
		err = dial()
	} else {
		err = inNS(g.ns, dial)
	}
	if err != nil {
		t.Fatal(err)
	}
	return &got
}

// TestSharedLinkDividesByShares: two stand-in guests on a 2 MiB/s link
// shaped by one HTB per direction, at shares 3:1. While both receive (and
// then both send) the kernel divides the link 0.75 : 0.25 within 0.05;
// one alone gets at least 80 % of the link at once, its class borrowing
// what the other leaves. Mutation: classes at equal rates (the shares
// ignored) divide it evenly; a class without the link as its ceiling
// holds one alone to its part.
func TestSharedLinkDividesByShares(t *testing.T) {
	gs := startVethGuests(t, 2)
	const link = 2 << 20
	shares := map[string]float64{"a": 3, "b": 1}
	macs := map[string][]string{"a": {gs[0].mac}, "b": {gs[1].mac}}
	classes := sharedClasses(link, shares, macs, map[string]uint16{})
	for dir, ifb := range sharedIFBs {
		if err := runTC(linkCommands(ifb, link)); err != nil {
			t.Fatal(err)
		}
		for _, vm := range []string{"a", "b"} {
			if err := runTC(classCommands(ifb, dir, link, classes[vm])); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, g := range gs {
		if err := redirectTap(g.tap); err != nil {
			t.Fatal(err)
		}
	}
	const window = 6 * time.Second
	for _, in := range []bool{true, false} {
		name := map[bool]string{true: "into the guests", false: "out of them"}[in]
		a, b := flow(t, gs[0], in, window), flow(t, gs[1], in, window)
		time.Sleep(window + time.Second)
		ra, rb := float64(a.Load()), float64(b.Load())
		part := ra / (ra + rb)
		t.Logf("%s, both: a %.2f MiB/s, b %.2f MiB/s: a's part %.3f", name, ra/window.Seconds()/(1<<20), rb/window.Seconds()/(1<<20), part)
		if math.Abs(part-0.75) > 0.05 {
			t.Errorf("%s, both at 3:1: a's part %.3f, want 0.750 ± 0.05", name, part)
		}
		alone := flow(t, gs[1], in, window)
		time.Sleep(window + time.Second)
		rate := float64(alone.Load()) / window.Seconds()
		t.Logf("%s, b alone: %.2f MiB/s", name, rate/(1<<20))
		if rate < 0.8*link {
			t.Errorf("%s, b alone: %.2f MiB/s, want at least 80 %% of the link's 2", name, rate/(1<<20))
		}
	}
}
