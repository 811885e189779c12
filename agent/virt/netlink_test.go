package virt_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// netLink is a link whose limit the kernel enforces, as a host's uplink:
// a veth pair from the host into a network namespace of the test's, each
// end's outbound shaped by tbf at the link's rate, so the guests' outbound
// is limited on the host's end and their inbound on the namespace's. The
// net guests' peers listen inside the namespace and the guests route to
// them through the host: all they send and receive crosses the one link,
// one queue, and each guest's part is counted by its peer. The agent
// shapes each guest's tap as it would on any host; what it cannot do is
// make the link faster.
type netLink struct {
	ns             string // its name (ip netns)
	hostIP, peerIP string // the host's end, the namespace's
	hostEnd        string // the host's end's device
	mibps          int
}

// startNetLink makes the link at mibps MiB/s each way. It fails in CI and
// skips elsewhere when the host cannot (root, iproute2, veth, tbf, network
// namespaces).
func startNetLink(t testing.TB, mibps int) *netLink {
	t.Helper()
	id := os.Getpid() % 100000
	l := &netLink{ns: fmt.Sprintf("mrmlink%d", id), hostIP: "10.232.0.1", peerIP: "10.232.0.2", mibps: mibps}
	hostEnd, nsEnd := fmt.Sprintf("mrmlh%d", id), fmt.Sprintf("mrmln%d", id)
	l.hostEnd = hostEnd
	// tbf's burst bounds how far a moment's rate may pass the limit: a few
	// milliseconds of the link, at least what a guest's socket sends at once.
	rate, burst := fmt.Sprintf("%dmbit", mibps*8*1024*1024/1_000_000), fmt.Sprintf("%dkb", max(mibps*8, 64))
	steps := [][]string{
		{"ip", "netns", "add", l.ns},
		{"ip", "link", "add", hostEnd, "type", "veth", "peer", "name", nsEnd, "netns", l.ns},
		{"ip", "addr", "add", l.hostIP + "/30", "dev", hostEnd},
		{"ip", "link", "set", hostEnd, "up"},
		{"ip", "-n", l.ns, "addr", "add", l.peerIP + "/30", "dev", nsEnd},
		{"ip", "-n", l.ns, "link", "set", nsEnd, "up"},
		{"ip", "-n", l.ns, "link", "set", "lo", "up"},
		{"ip", "-n", l.ns, "route", "add", "10.231.0.0/16", "via", l.hostIP},
		{"tc", "qdisc", "add", "dev", hostEnd, "root", "tbf", "rate", rate, "burst", burst, "latency", "50ms"},
		{"tc", "-n", l.ns, "qdisc", "add", "dev", nsEnd, "root", "tbf", "rate", rate, "burst", burst, "latency", "50ms"},
	}
	t.Cleanup(func() {
		// The pair is deleted first, at once: with the namespace (its veth
		// end goes with it, and so the pair) it goes later, and the next
		// test's link found its names taken.
		_ = exec.Command("ip", "link", "del", hostEnd).Run()
		_ = exec.Command("ip", "netns", "del", l.ns).Run()
	})
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			msg := fmt.Sprintf("a kernel-limited link needs root, iproute2, veth, tbf and network namespaces: %s: %v\n%s", strings.Join(s, " "), err, out)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	// The host forwards between the guests' taps and the link.
	const forward = "/proc/sys/net/ipv4/ip_forward"
	was, err := os.ReadFile(forward)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(forward, []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(forward, was, 0o644) })
	return l
}

// listen listens on the namespace's end, port port: the socket is made
// inside the namespace and stays there, whichever thread accepts on it.
func (l *netLink) listen(port int) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The thread enters the namespace and leaves it; one that could
		// not leave is not given back to the scheduler (it ends with the
		// goroutine).
		runtime.LockOSThread()
		home, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			done <- result{nil, err}
			return
		}
		defer home.Close()
		there, err := os.Open("/run/netns/" + l.ns)
		if err != nil {
			done <- result{nil, err}
			return
		}
		defer there.Close()
		if err := unix.Setns(int(there.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{nil, fmt.Errorf("entering %s: %w", l.ns, err)}
			return
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", l.peerIP, port))
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- result{ln, err}
	}()
	r := <-done
	return r.ln, r.err
}
