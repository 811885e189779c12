package virt_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/mrmarket/mrmarket/agent/virt"
	"github.com/mrmarket/mrmarket/internal/testpoll"
)

// The I/O guests: real TCG guests that saturate a virtio disk or a virtio
// network link, for the tests of the agent's disk and network shares, which
// QEMU's per-VM throttles enforce (virDomainSetBlockIoTune on the drive,
// HTB by tc on the tap, see tcnet.go). This file is the guests and
// the measurement; the enforcement is tested elsewhere.
//
// Pinning: the I/O guests are not pinned. Under TCG every byte a guest
// moves costs it emulated CPU, so guests sharing one host CPU move bytes in
// proportion to the CPU the scheduler gives them: guests pinned to one
// host CPU split it evenly, a split that would pass for an enforced one.
// Floating over both host CPUs they move far more than the caps the share
// tests set (tens of MiB/s), so those caps bind, and the split is the
// throttles', not the CPU scheduler's (docs/PLATFORM.md has the rates;
// TestGuestIOPlumbing logs them). Reads of the sparse image's holes cost no device time:
// only the drive's throttle limits them, which is what is enforced.
//
// Throttles on this host (docs/PLATFORM.md has the versions and how
// closely each binds): SetBlockIoTune total_bytes_sec binds from the call
// on. SetInterfaceParameters fails in both directions: libvirt shapes a tap's inbound with HTB and an
// SFQ leaf and polices its outbound with act_police, and this kernel has
// neither SFQ nor act_police (it has HTB, ingress, u32, mirred and IFB).
// HTB set by hand on the tap (inbound) and on an IFB the tap's ingress is
// redirected to (outbound) binds a little under the cap (HTB counts
// headers) from the call on. QEMU user networking cannot be throttled: libvirt
// answers "setting bandwidth on interfaces of type 'user' is not implemented
// yet", hence taps.

const (
	// modulesDir holds the guest kernel's virtio modules and their load
	// order, installed by .ci/libvirt.sh from the kernel it installs.
	modulesDir = imagesDir + "/mrm-modules"
	// netOutPort is where a net guest sends (the host sinks), netInPort
	// where it receives (the host sources), both on its host address.
	netOutPort = 5201
	netInPort  = 5202
	// diskImageSize is the sparse raw image behind a disk guest's vda.
	diskImageSize = 2 << 30
)

// needModules fails in CI and skips elsewhere when the guest kernel's
// virtio modules are missing.
func needModules(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(modulesDir, "load-order")); err != nil {
		msg := fmt.Sprintf("no guest kernel modules at %s (run .ci/libvirt.sh)", modulesDir)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// ioInitSource is the I/O guests' init.
const ioInitSource = `
// The I/O guests' init (see guests_test.go). It loads the virtio modules
// packed beside it, mounts devtmpfs on /dev, then runs the workload the
// kernel command line names: mrm_mode=disk reads /dev/vda forever with
// O_DIRECT in 1 MiB blocks; mrm_mode=net configures eth0 as mrm_ip/30 and
// forever sends to mrm_peer:mrm_out_port and (a forked process) receives
// from mrm_peer:mrm_in_port, reconnecting every 200 ms.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

static void say(const char *fmt, const char *a, int e) {
	fprintf(stderr, "mrm-init: ");
	fprintf(stderr, fmt, a);
	if (e) fprintf(stderr, ": %s", strerror(e));
	fprintf(stderr, "\n");
}

static void idle(void) { for (;;) pause(); }

static void load_modules(void) {
	FILE *f = fopen("/load-order", "r");
	char name[128], path[160];
	if (!f) { say("no %s", "/load-order", errno); return; }
	while (fscanf(f, "%127s", name) == 1) {
		snprintf(path, sizeof path, "/%s.ko", name);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0) { say("open %s", path, errno); continue; }
		if (syscall(SYS_finit_module, fd, "", 0) != 0 && errno != EEXIST)
			say("finit_module %s", path, errno);
		close(fd);
	}
	fclose(f);
}

static void disk(void) {
	int fd = -1;
	for (int i = 0; fd < 0; i++) {
		fd = open("/dev/vda", O_RDONLY | O_DIRECT);
		if (fd < 0) {
			if (i == 100) say("open %s", "/dev/vda", errno);
			usleep(50000);
		}
	}
	unsigned long long size = 0;
	if (ioctl(fd, BLKGETSIZE64, &size) != 0 || size < (1 << 20)) { say("size of %s", "/dev/vda", errno); idle(); }
	const size_t block = 1 << 20;
	void *buf;
	if (posix_memalign(&buf, block, block) != 0) { say("%s", "memalign", 0); idle(); }
	say("%s: reading", "/dev/vda", 0);
	for (off_t off = 0;; off += block) {
		if (off + block > size) off = 0;
		if (pread(fd, buf, block, off) < 0) { say("pread %s", "/dev/vda", errno); usleep(200000); }
	}
}

static void setaddr(int s, unsigned long req, const char *ip) {
	struct ifreq ifr;
	memset(&ifr, 0, sizeof ifr);
	strcpy(ifr.ifr_name, "eth0");
	struct sockaddr_in *sin = (struct sockaddr_in *)&ifr.ifr_addr;
	sin->sin_family = AF_INET;
	inet_pton(AF_INET, ip, &sin->sin_addr);
	if (ioctl(s, req, &ifr) != 0) say("address ioctl %s", ip, errno);
}

// stream connects to peer:port forever and sends (out) or receives on it.
// A connect gives up after a second: one made before the host's side of
// the link is up loses its SYN, and the kernel's retries (1, 3, 7, 15, 31
// s) left a guest without its stream for the first 20 s of a test.
static void stream(const char *peer, int port, int out) {
	static char buf[1 << 16];
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, peer, &sa.sin_addr);
	struct timeval connectWait = {.tv_sec = 1}, never = {0};
	for (;;) {
		int c = socket(AF_INET, SOCK_STREAM, 0);
		if (c >= 0) setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &connectWait, sizeof connectWait);
		if (c < 0 || connect(c, (struct sockaddr *)&sa, sizeof sa) != 0) {
			if (c >= 0) close(c);
			usleep(200000);
			continue;
		}
		setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &never, sizeof never);
		for (;;) {
			ssize_t n = out ? write(c, buf, sizeof buf) : read(c, buf, sizeof buf);
			if (n <= 0) break;
		}
		close(c);
	}
}

// sysctl writes v to /proc/sys/<key> and says what it now holds.
static void sysctl(const char *key, const char *v) {
	char path[128], was[128] = "", got[128] = "";
	snprintf(path, sizeof path, "/proc/sys/%s", key);
	FILE *f = fopen(path, "r");
	if (f && fgets(was, sizeof was, f)) was[strcspn(was, "\n")] = 0;
	if (f) fclose(f);
	f = fopen(path, "w");
	if (!f || fputs(v, f) < 0 || fclose(f) != 0) { say("sysctl %s", key, errno); return; }
	f = fopen(path, "r");
	if (f && fgets(got, sizeof got, f)) got[strcspn(got, "\n")] = 0;
	if (f) fclose(f);
	fprintf(stderr, "mrm-init: %s = %s (was %s)\n", key, got, was);
}

static void net(void) {
	// A receiver's TCP window is bounded by its buffer, which the kernel
	// sizes by the guest's memory: at 160 MiB tcp_rmem's largest is 810 kB
	// (a window of about 0.6 MB, 26 ms of a 22 MiB/s stream) and tcp_mem
	// presses all sockets from 6 MB. A TCG guest whose vCPU waits for a
	// busy host CPU acks later than that, and its stream then runs below
	// its part of the link however the link is divided (TestNetShares'
	// inbound 3:1 at 0.63-0.69 beside a spinning host process). Buffers of
	// a host's size keep the window from binding.
	mkdir("/proc", 0755);
	if (mount("proc", "/proc", "proc", 0, NULL) != 0 && errno != EBUSY) say("mount %s", "/proc", errno);
	sysctl("net/ipv4/tcp_mem", "16384 24576 32768");
	sysctl("net/ipv4/tcp_rmem", "4096 131072 8388608");
	sysctl("net/ipv4/tcp_wmem", "4096 65536 8388608");
	const char *ip = getenv("mrm_ip"), *peer = getenv("mrm_peer");
	const char *op = getenv("mrm_out_port"), *ip_ = getenv("mrm_in_port");
	if (!ip || !peer || !op || !ip_) { say("%s", "net: mrm_ip, mrm_peer, mrm_out_port, mrm_in_port needed", 0); idle(); }
	int s = socket(AF_INET, SOCK_DGRAM, 0);
	struct ifreq ifr;
	for (int i = 0;; i++) {
		memset(&ifr, 0, sizeof ifr);
		strcpy(ifr.ifr_name, "eth0");
		if (ioctl(s, SIOCGIFFLAGS, &ifr) == 0) break;
		if (i == 100) say("no %s", "eth0", errno);
		usleep(50000);
	}
	setaddr(s, SIOCSIFADDR, ip);
	setaddr(s, SIOCSIFNETMASK, "255.255.255.252");
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0) say("%s up", "eth0", errno);
	const char *gw = getenv("mrm_gw");
	if (gw) { // a peer beyond the host: the default route through it
		struct rtentry rt;
		memset(&rt, 0, sizeof rt);
		((struct sockaddr_in *)&rt.rt_dst)->sin_family = AF_INET;
		((struct sockaddr_in *)&rt.rt_genmask)->sin_family = AF_INET;
		struct sockaddr_in *g = (struct sockaddr_in *)&rt.rt_gateway;
		g->sin_family = AF_INET;
		inet_pton(AF_INET, gw, &g->sin_addr);
		rt.rt_flags = RTF_UP | RTF_GATEWAY;
		if (ioctl(s, SIOCADDRT, &rt) != 0) say("route via %s", gw, errno);
	}
	close(s);
	say("eth0 %s: streaming", ip, 0);
	if (fork() == 0) stream(peer, atoi(ip_), 0);
	stream(peer, atoi(op), 1);
}

int main(void) {
	load_modules();
	mkdir("/dev", 0755);
	if (mount("devtmpfs", "/dev", "devtmpfs", 0, NULL) != 0 && errno != EBUSY) say("mount %s", "/dev", errno);
	const char *mode = getenv("mrm_mode");
	if (mode && strcmp(mode, "disk") == 0) disk();
	if (mode && strcmp(mode, "net") == 0) net();
	say("unknown mrm_mode %s", mode ? mode : "(none)", 0);
	idle();
}
`

// buildIOInitramfs packs the I/O guests' init with the virtio modules it
// loads, in their load order.
func buildIOInitramfs(t testing.TB) string {
	t.Helper()
	needModules(t)
	order, err := os.ReadFile(filepath.Join(modulesDir, "load-order"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"init": compileInit(t, ioInitSource), "load-order": order}
	for _, m := range strings.Fields(string(order)) {
		ko, err := os.ReadFile(filepath.Join(modulesDir, m+".ko"))
		if err != nil {
			t.Fatalf("guest kernel module %s: %v (run .ci/libvirt.sh)", m, err)
		}
		files[m+".ko"] = ko
	}
	return writeInitramfs(t, "mrm-io", files)
}

// consoleLog is where a guest's serial console goes.
func consoleLog(name string) string { return "/var/log/libvirt/qemu/" + name + ".console" }

// startIOGuest boots a transient, unpinned TCG guest owned by owner, with
// the I/O init's settings on its kernel command line and extra devices. On
// a failed test the guest's console is logged.
func startIOGuest(t testing.TB, conn *libvirt.Connect, name, owner, initrd, cmdline, devices string, paused bool) *libvirt.Domain {
	t.Helper()
	console := consoleLog(name)
	xml := fmt.Sprintf(`<domain type='qemu'>
  <name>%s</name>
  <memory unit='MiB'>160</memory>
  <vcpu placement='static'>1</vcpu>
  <metadata><mrm:vm xmlns:mrm='%s' owner='%s'/></metadata>
  <os><type arch='x86_64' machine='pc'>hvm</type><kernel>%s</kernel><initrd>%s</initrd><cmdline>console=ttyS0 quiet panic=-1 %s</cmdline></os>
  <on_poweroff>destroy</on_poweroff><on_crash>destroy</on_crash>
  <devices>
    %s
    <serial type='file'><source path='%s'/><target port='0'/></serial>
    <memballoon model='none'/>
  </devices>
</domain>`, name, virt.Namespace, owner, guestKernel, initrd, cmdline, devices, console)
	return createGuest(t, conn, name, xml, paused, func() {
		if out, err := os.ReadFile(console); err == nil && t.Failed() {
			t.Logf("%s console:\n%s", name, out)
		}
		os.Remove(console)
	})
}

// startDiskGuest boots a guest whose init reads its disk vda forever with
// O_DIRECT in 1 MiB blocks. vda is a sparse raw image (removed at cleanup)
// without host caching (cache='none', io='native'), so what the guest reads
// is what its drive's throttle lets through.
func startDiskGuest(t testing.TB, conn *libvirt.Connect, name, owner, initrd string, paused bool) *libvirt.Domain {
	t.Helper()
	return startDiskGuestOn(t, conn, name, owner, initrd, diskImage(t, name, diskImageSize, false), paused)
}

// startDiskGuestOn is startDiskGuest on the raw image img.
func startDiskGuestOn(t testing.TB, conn *libvirt.Connect, name, owner, initrd, img string, paused bool) *libvirt.Domain {
	t.Helper()
	disk := fmt.Sprintf(`<disk type='file' device='disk'><driver name='qemu' type='raw' cache='none' io='native'/><source file='%s'/><target dev='vda' bus='virtio'/></disk>`, img)
	return startIOGuest(t, conn, name, owner, initrd, "mrm_mode=disk", disk, paused)
}

// diskImage makes the raw image of guest name under imagesDir (removed at
// cleanup, after the guest's: cleanups run last first): sparse, or written
// through, so that reading it with O_DIRECT reaches the host's disk.
func diskImage(t testing.TB, name string, size int64, written bool) string {
	t.Helper()
	img := filepath.Join(imagesDir, name+".raw")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(img) })
	if written {
		block := make([]byte, 1<<20)
		for i := range block {
			block[i] = byte(i * 7) // not zeros: nothing may elide them
		}
		for off := int64(0); off < size && err == nil; off += int64(len(block)) {
			_, err = f.Write(block)
		}
		if err == nil {
			err = f.Sync()
		}
	} else {
		err = f.Truncate(size)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// bootPausedWhenReading waits for the disk guests to boot to their reading
// loop and pauses each as soon as it reads: a guest reading uncapped keeps
// a host CPU busy, and a TCG boot beside two of them is many times slower,
// so the rest boot on idle CPUs. Resume them to start their reading together.
func bootPausedWhenReading(t testing.TB, doms map[string]*libvirt.Domain) {
	t.Helper()
	reading := map[string]bool{}
	if err := testpoll.Wait(60*time.Second, 0, func() error {
		booting := map[string]*libvirt.Domain{}
		for g, d := range doms {
			if !reading[g] {
				booting[g] = d
			}
		}
		for g, r := range diskRates(t, booting, 300*time.Millisecond) {
			if r > 1 {
				reading[g] = true
				if err := doms[g].Suspend(); err != nil {
					return err
				}
			}
		}
		if len(reading) < len(doms) {
			return fmt.Errorf("the disk guests reading: %v", reading)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// blockReading is what a guest's vda had moved (read and written) at an
// instant: the middle of the call that asked its QEMU.
type blockReading struct {
	bytes int64
	at    time.Time
}

// blockBytes reads each guest's vda counters, each with its own instant.
// A guest's QEMU may take a second or more to answer (one just resumed,
// beside busy ones), so one instant for all would charge the guests read
// before the slow one with bytes moved outside the window.
func blockBytes(t testing.TB, doms map[string]*libvirt.Domain) map[string]blockReading {
	t.Helper()
	out := map[string]blockReading{}
	for name, d := range doms {
		asked := time.Now()
		st, err := d.BlockStats("vda")
		if err != nil {
			t.Fatalf("%s: block stats: %v", name, err)
		}
		answered := time.Now()
		if took := answered.Sub(asked); took > 500*time.Millisecond {
			t.Logf("%s: its QEMU took %v to give its block statistics", name, took.Round(time.Millisecond))
		}
		out[name] = blockReading{st.RdBytes + st.WrBytes, asked.Add(answered.Sub(asked) / 2)}
	}
	return out
}

// diskRates measures each guest's disk rate over window, in MiB/s, from
// libvirt's block statistics (QEMU's count of what the drive moved), each
// guest's bytes over the time between its own two readings.
func diskRates(t testing.TB, doms map[string]*libvirt.Domain, window time.Duration) map[string]float64 {
	t.Helper()
	a := blockBytes(t, doms)
	time.Sleep(window)
	b := blockBytes(t, doms)
	out := map[string]float64{}
	for n := range doms {
		out[n] = float64(b[n].bytes-a[n].bytes) / (1 << 20) / b[n].at.Sub(a[n].at).Seconds()
	}
	return out
}

// netGuest is a guest streaming over its own point-to-point link to the
// host: a tap the test names, the host at 10.231.<i>.1/30, the guest at
// 10.231.<i>.2. Nothing routes or bridges the link anywhere.
type netGuest struct {
	Dom  *libvirt.Domain
	Tap  string
	Peer *netPeer
}

// netSubnet is the link of the i-th net guest (1 ≤ i ≤ 255).
func netSubnet(i int) (host, guest string) {
	return fmt.Sprintf("10.231.%d.1", i), fmt.Sprintf("10.231.%d.2", i)
}

// startNetGuest boots the i-th net guest and its host peer, which neither
// sinks nor sources until told (netPeer.Direct): the guest keeps trying.
// libvirt creates the tap (type='ethernet'), which the agent shapes with tc.
func startNetGuest(t testing.TB, conn *libvirt.Connect, name, owner, initrd string, i int, paused bool) *netGuest {
	t.Helper()
	host, _ := netSubnet(i)
	listen := func(port int) (net.Listener, error) { return net.Listen("tcp", fmt.Sprintf("%s:%d", host, port)) }
	return bootNetGuest(t, conn, name, owner, initrd, i, paused, host, "", netOutPort, netInPort, listen)
}

// bootNetGuest boots the i-th net guest streaming to peer on outPort and
// inPort (routed through its host when gw is set), its peer listening with
// listen.
func bootNetGuest(t testing.TB, conn *libvirt.Connect, name, owner, initrd string, i int, paused bool,
	peer, gw string, outPort, inPort int, listen func(port int) (net.Listener, error)) *netGuest {
	t.Helper()
	host, guest := netSubnet(i)
	tap := fmt.Sprintf("mrmt%d%d", os.Getpid()%1000, i)
	iface := fmt.Sprintf(`<interface type='ethernet'><target dev='%s'/><model type='virtio'/></interface>`, tap)
	cmdline := fmt.Sprintf("mrm_mode=net mrm_ip=%s mrm_peer=%s mrm_out_port=%d mrm_in_port=%d", guest, peer, outPort, inPort)
	if gw != "" {
		cmdline += " mrm_gw=" + gw
	}
	d := startIOGuest(t, conn, name, owner, initrd, cmdline, iface, paused)
	// libvirt 9.0 takes an ethernet interface's <ip> for the guest's side
	// ("not supported by QEMU"): the host's side is set here.
	for _, args := range [][]string{{"addr", "add", host + "/30", "dev", tap}, {"link", "set", tap, "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return &netGuest{Dom: d, Tap: tap, Peer: newNetPeer(t, host, outPort, inPort, listen)}
}

// netPeer is the host's end of a net guest's link: it sinks what the guest
// sends (its out port) and sources what it receives (its in port), each
// while enabled, counting the bytes.
type netPeer struct {
	out, in       atomic.Bool
	sunk, sourced atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]bool
	lns   []net.Listener
	done  bool
}

func newNetPeer(t testing.TB, host string, outPort, inPort int, listen func(port int) (net.Listener, error)) *netPeer {
	t.Helper()
	p := &netPeer{conns: map[net.Conn]bool{}}
	for _, port := range []int{outPort, inPort} {
		var ln net.Listener
		// An address on the tap waits for its duplicate address detection.
		if err := testpoll.Wait(5*time.Second, 50*time.Millisecond, func() (err error) {
			ln, err = listen(port)
			return err
		}); err != nil {
			t.Fatalf("peer of %s, port %d: %v", host, port, err)
		}
		p.lns = append(p.lns, ln)
		go p.serve(ln, port == outPort)
	}
	t.Cleanup(p.close)
	return p
}

// connected reports how many of the guest's streams the peer holds.
func (p *netPeer) connected() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Direct enables the guest's outbound (the host sinks) and inbound (the
// host sources) streams. A disabled direction's connections are held open
// and idle: closed, the guest reconnected in a tight loop (it waits only
// when a connect fails), which cost its vCPU and, under TCG, the other
// guests' throughput — an idle guest was not idle.
func (p *netPeer) Direct(out, in bool) {
	p.out.Store(out)
	p.in.Store(in)
}

func (p *netPeer) serve(ln net.Listener, sink bool) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.done {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.conns[c] = true
		p.mu.Unlock()
		go func() {
			defer func() {
				p.mu.Lock()
				delete(p.conns, c)
				p.mu.Unlock()
				c.Close()
			}()
			buf := make([]byte, 256<<10)
			for {
				var n int
				var err error
				// The deadline lets a throttled-to-nothing stream notice
				// it was disabled, or enabled again.
				_ = c.SetDeadline(time.Now().Add(time.Second))
				if on := (sink && p.out.Load()) || (!sink && p.in.Load()); !on {
					p.mu.Lock()
					done := p.done
					p.mu.Unlock()
					if done {
						return
					}
					time.Sleep(50 * time.Millisecond)
					continue
				}
				if sink {
					n, err = c.Read(buf)
					p.sunk.Add(int64(n))
				} else {
					n, err = c.Write(buf)
					p.sourced.Add(int64(n))
				}
				if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
					return
				}
			}
		}()
	}
}

func (p *netPeer) close() {
	p.mu.Lock()
	p.done = true
	for _, ln := range p.lns {
		ln.Close()
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

// netRate is a guest's network rate in MiB/s: Out what it sent, In what it
// received.
type netRate struct{ Out, In float64 }

func (r netRate) String() string { return fmt.Sprintf("out %.1f in %.1f MiB/s", r.Out, r.In) }

// netRates measures each guest's network rates over window from its host
// peer's byte counts (independent of libvirt's and QEMU's counters).
func netRates(peers map[string]*netPeer, window time.Duration) map[string]netRate {
	type count struct{ out, in int64 }
	read := func() map[string]count {
		m := map[string]count{}
		for n, p := range peers {
			m[n] = count{p.sunk.Load(), p.sourced.Load()}
		}
		return m
	}
	a, start := read(), time.Now()
	time.Sleep(window)
	b, el := read(), time.Since(start).Seconds()
	out := map[string]netRate{}
	for n := range peers {
		out[n] = netRate{Out: float64(b[n].out-a[n].out) / (1 << 20) / el, In: float64(b[n].in-a[n].in) / (1 << 20) / el}
	}
	return out
}

// TestGuestIOPlumbing boots two disk guests and two net guests and checks
// they saturate what they are given: each moves bytes alone and together,
// the net guests in each direction. It logs the rates, which bound the
// caps the share tests can set.
func TestGuestIOPlumbing(t *testing.T) {
	conn := needQEMU(t)
	initrd := buildIOInitramfs(t)
	prefix := fmt.Sprintf("mrm-io-%d-", os.Getpid())
	fmtRates := func(m map[string]float64) string {
		var parts []string
		for _, n := range sortedKeys(m) {
			parts = append(parts, fmt.Sprintf("%s %.1f MiB/s", n, m[n]))
		}
		return strings.Join(parts, ", ")
	}

	t.Run("disk", func(t *testing.T) {
		names := []string{"d1", "d2"}
		doms := map[string]*libvirt.Domain{}
		for _, g := range names {
			doms[g] = startDiskGuest(t, conn, prefix+g, "alice", initrd, false)
		}
		bootPausedWhenReading(t, doms)
		// d1 alone, then with d2. (A third guest would split the two host
		// CPUs three ways.)
		running := map[string]*libvirt.Domain{}
		for _, g := range names {
			if err := doms[g].Resume(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			running[g] = doms[g]
			r := diskRates(t, running, 2*time.Second)
			t.Logf("disk, %d guest(s) reading: %s", len(running), fmtRates(r))
			for g, v := range r {
				if v < minDiskMiBps {
					t.Errorf("%s read %.1f MiB/s with %d guest(s) reading, want at least %d", g, v, len(running), minDiskMiBps)
				}
			}
		}
	})

	t.Run("net", func(t *testing.T) {
		gs := map[string]*netGuest{}
		peers := map[string]*netPeer{}
		for i, g := range []string{"n1", "n2"} {
			gs[g] = startNetGuest(t, conn, prefix+g, "alice", initrd, i+1, false)
			peers[g] = gs[g].Peer
		}
		for _, dir := range []string{"out", "in"} {
			pick := func(r netRate) float64 {
				if dir == "out" {
					return r.Out
				}
				return r.In
			}
			direct := func(p *netPeer, on bool) { p.Direct(on && dir == "out", on && dir == "in") }
			direct(peers["n1"], true)
			direct(peers["n2"], true)
			if err := testpoll.Wait(30*time.Second, 0, func() error {
				r := netRates(peers, 500*time.Millisecond)
				if pick(r["n1"]) > 1 && pick(r["n2"]) > 1 {
					return nil
				}
				return fmt.Errorf("the net guests are not streaming %s: n1 %s, n2 %s", dir, r["n1"], r["n2"])
			}); err != nil {
				t.Fatal(err)
			}
			before := ifaceBytes(t, gs)
			together := netRates(peers, 2*time.Second)
			after := ifaceBytes(t, gs)
			direct(peers["n2"], false)
			time.Sleep(300 * time.Millisecond)
			alone := netRates(map[string]*netPeer{"n1": peers["n1"]}, 2*time.Second)
			t.Logf("net %s alone: n1 %.1f MiB/s; together: n1 %.1f, n2 %.1f MiB/s (libvirt's interface stats over the same window: n1 %s, n2 %s)",
				dir, pick(alone["n1"]), pick(together["n1"]), pick(together["n2"]),
				after["n1"].sub(before["n1"]), after["n2"].sub(before["n2"]))
			if pick(alone["n1"]) < minNetMiBps || pick(together["n1"]) < minNetMiBps/2 || pick(together["n2"]) < minNetMiBps/2 {
				t.Errorf("net guests %s below %.0f MiB/s alone or half that together", dir, float64(minNetMiBps))
			}
		}
	})
}

// The least a guest moves alone (MiB/s): well under what these 2-core TCG
// machines measure, well over the caps the share tests set.
const (
	minDiskMiBps = 20
	minNetMiBps  = 10
)

// ifaceStat is libvirt's count of a guest's interface bytes, in the guest's
// view (Rx what it received).
type ifaceStat struct {
	Rx, Tx int64
	At     time.Time
}

func (b ifaceStat) sub(a ifaceStat) string {
	el := b.At.Sub(a.At).Seconds()
	return fmt.Sprintf("rx %.1f tx %.1f MiB/s", float64(b.Rx-a.Rx)/(1<<20)/el, float64(b.Tx-a.Tx)/(1<<20)/el)
}

func ifaceBytes(t testing.TB, gs map[string]*netGuest) map[string]ifaceStat {
	t.Helper()
	out := map[string]ifaceStat{}
	for n, g := range gs {
		st, err := g.Dom.InterfaceStats(g.Tap)
		if err != nil {
			t.Fatalf("%s: interface stats: %v", n, err)
		}
		out[n] = ifaceStat{Rx: st.RxBytes, Tx: st.TxBytes, At: time.Now()}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
