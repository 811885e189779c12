package virt

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Network caps by tc. libvirt shapes a tap (virDomainSetInterfaceParameters)
// with HTB and an SFQ leaf inbound and polices it with act_police outbound;
// a kernel without sch_sfq or act_police (such as the one the share tests
// run on, docs/PLATFORM.md) fails both ways, and policing drops
// what exceeds the rate where a queue would delay it. So the enforcer shapes
// the taps itself with iproute2, one mechanism everywhere:
//
//   - into the guest (the tap's egress): an HTB root qdisc (handle 1:) with
//     one class 1:1 at the cap, everything classified to it;
//   - out of the guest (the tap's ingress): an ingress qdisc whose u32
//     match-all filter redirects (act_mirred) every packet to an IFB of the
//     tap's own (ifbName), shaped by the same HTB: the guest's packets queue
//     there, and its TCP slows down as it would behind a slow link.
//
// A cap of 0 removes the shaping (the root qdisc back to the kernel's
// default, the ingress qdisc and its redirect gone); the IFB is deleted when
// its VM is gone (Rebalance) and at Close. The enforcer owns its taps' root
// and ingress qdiscs. Host requirements: iproute2's tc and ip, and the
// kernel's sch_htb, sch_ingress, cls_u32, act_mirred and ifb
// (CheckNetShaping tries them all).

// ifbAliasPrefix marks an IFB as the enforcer's: its alias is the prefix
// and the tap it shapes, so IFBs a former run left can be found and removed.
const ifbAliasPrefix = "mrmarket ifb of "

// ifbName is the IFB that shapes what comes out of tap: "mi" and the tap's
// name when that fits in an interface name (15 bytes), else "mi" and a hash
// of the tap's name.
func ifbName(tap string) string {
	if len(tap) <= 13 {
		return "mi" + tap
	}
	h := fnv.New32a()
	h.Write([]byte(tap))
	return fmt.Sprintf("mi%s%08x", tap[:5], h.Sum32())
}

// tcExec runs iproute2 (tc or ip) with args and returns its combined
// output; the unit tests replace it.
var tcExec = func(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}

// tcRun runs one command, its output in the error.
func tcRun(name string, args ...string) error {
	out, err := tcExec(name, args...)
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// absent reports whether err is iproute2 saying there was nothing to
// remove (no such device, no qdisc of ours).
func absent(err error) bool {
	if err == nil {
		return true
	}
	s := err.Error()
	for _, m := range []string{"Cannot find device", "No such file or directory", "No such device",
		"handle of zero", "Invalid handle", "Cannot find specified qdisc"} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// htbSlack is how much faster than the cap HTB is set: HTB charges a GSO
// packet (up to 64 KiB from a virtio guest) the headers of every segment
// it stands for, the tap's counters — what the plan is measured and made
// in — count them once, so an HTB at the cap lets about 4 % less through
// (66 header bytes a 1500-byte segment); the planner would see every VM
// short of its cap.
const htbSlack = 1.05

// htbArgs are the class arguments of a cap of bps bytes/s. The burst is
// 100 ms at the rate, at least 128 KiB: a tap's packets are up to 64 KiB
// (GSO), and on a busy host HTB's dequeue runs late, a smaller bucket
// overflows meanwhile and the tokens are lost, and the guest gets visibly
// less than its cap (docs/PLATFORM.md). The cap is re-planned every tick from
// what was moved, so a burst's excess is seen and paid for.
func htbArgs(dev string, bps float64) []string {
	bps *= htbSlack
	rate := fmt.Sprintf("%dbit", uint64(max(math.Round(bps*8), 8000)))
	burst := fmt.Sprintf("%db", uint64(max(bps/10, 128<<10)))
	return []string{"class", "replace", "dev", dev, "parent", "1:", "classid", "1:1",
		"htb", "rate", rate, "ceil", rate, "burst", burst, "cburst", burst, "quantum", "60000"}
}

// shapeDev caps dev's egress at bps bytes/s with HTB: the class and its
// queue are changed in place when dev's root is already the enforcer's
// HTB (two commands), else the root is replaced first.
func shapeDev(dev string, bps float64) error {
	class := htbArgs(dev, bps)
	// The class's queue holds queueDelay at the cap (tcshare.go says why).
	leaf := []string{"qdisc", "replace", "dev", dev, "parent", "1:1", "handle", "2:", "bfifo", "limit", queueArg(bps)}
	if tcRun("tc", class...) == nil {
		return tcRun("tc", leaf...)
	}
	// `replace` fails on an HTB root already there ("change not
	// supported"), so the root is deleted (whatever it is) and added.
	if err := tcRun("tc", "qdisc", "del", "dev", dev, "root"); !absent(err) {
		return err
	}
	if err := tcRun("tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"); err != nil {
		return err
	}
	if err := tcRun("tc", class...); err != nil {
		return err
	}
	return tcRun("tc", leaf...)
}

// unshapeDev removes dev's root qdisc (nothing to remove is no error).
func unshapeDev(dev string) error {
	if err := tcRun("tc", "qdisc", "del", "dev", dev, "root"); !absent(err) {
		return err
	}
	return nil
}

// ensureIFB creates tap's IFB if missing, marked as the enforcer's, and
// brings it up.
func ensureIFB(tap string) (string, error) {
	ifb := ifbName(tap)
	i, err := net.InterfaceByName(ifb)
	if err != nil {
		if err := addIFB(ifb, ifbAliasPrefix+tap); err != nil {
			return "", err
		}
	}
	if i == nil || i.Flags&net.FlagUp == 0 {
		if err := tcRun("ip", "link", "set", ifb, "up"); err != nil {
			return "", err
		}
	}
	return ifb, nil
}

// addIFB adds an IFB named name, marked as the enforcer's by alias, and
// leaves it down. Its queue is 1000 packets, which HTB gives its direct
// queue (what no class takes: ARP from the host on the shared link). An
// IFB's own 32 was once every class's queue too and overflowed under the
// guests' TCP bursts; the classes now have their own (queueArg).
func addIFB(name, alias string) error {
	for _, args := range [][]string{{"link", "add", name, "txqueuelen", "1000", "type", "ifb"}, {"link", "set", name, "alias", alias}} {
		if err := tcRun("ip", args...); err != nil {
			return err
		}
	}
	return nil
}

// redirectArgs are the commands that send everything tap receives (what
// its guest sends) through ifb; both are idempotent.
func redirectArgs(tap, ifb string) [][]string {
	return [][]string{
		{"qdisc", "replace", "dev", tap, "handle", "ffff:", "ingress"},
		{"filter", "replace", "dev", tap, "parent", "ffff:", "protocol", "all", "prio", "1", "handle", "800::800",
			"u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", ifb},
	}
}

// shapeTap caps one tap at in bytes/s into its guest and out bytes/s out
// of it (0: no cap).
func shapeTap(tap string, in, out float64) error {
	var errs []error
	if in > 0 {
		errs = append(errs, shapeDev(tap, in))
	} else {
		errs = append(errs, unshapeDev(tap))
	}
	if out > 0 {
		ifb, err := ensureIFB(tap)
		if err == nil {
			err = shapeDev(ifb, out)
		}
		for _, args := range redirectArgs(tap, ifb) {
			if err != nil {
				break
			}
			err = tcRun("tc", args...)
		}
		errs = append(errs, err)
	} else if err := tcRun("tc", "qdisc", "del", "dev", tap, "ingress"); !absent(err) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// unshapeTap removes all of tap's shaping and its IFB.
func unshapeTap(tap string) error {
	var errs []error
	if err := tcRun("tc", "qdisc", "del", "dev", tap, "ingress"); !absent(err) {
		errs = append(errs, err)
	}
	errs = append(errs, unshapeDev(tap))
	if err := tcRun("ip", "link", "del", ifbName(tap)); !absent(err) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// setNetCaps caps d's interfaces (taps), split evenly, at in and out MB/s
// into and out of the domain (0: no limit).
func setNetCaps(nics []string, in, out float64) error {
	if len(nics) == 0 {
		return nil
	}
	n := float64(len(nics))
	var errs []error
	for _, tap := range nics {
		if err := shapeTap(tap, in*mib/n, out*mib/n); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", tap, err))
		}
	}
	return errors.Join(errs...)
}

// heldCounts reads, in one `tc -s qdisc show` of every device, how often
// each device's shaping (the enforcer's HTB root, handle 1:) held packets
// back so far: the times it had packets queued and no tokens to send them
// (overlimits), and the packets its queue dropped. A rise between two
// ticks says the VM behind it asked for more than its cap, whatever it
// moved: a TCP flow that lost packets at its cap backs off and moves a
// trickle (agent.Throttle's pressed). Devices without that shaping are not
// listed.
func heldCounts() (map[string]float64, error) {
	out, err := tcExec("tc", "-s", "-j", "qdisc", "show")
	if err != nil {
		return nil, fmt.Errorf("tc -s -j qdisc show: %v: %s", err, strings.TrimSpace(string(out)))
	}
	var qdiscs []struct {
		Dev        string `json:"dev"`
		Kind       string `json:"kind"`
		Handle     string `json:"handle"`
		Root       bool   `json:"root"`
		Drops      uint64 `json:"drops"`
		Overlimits uint64 `json:"overlimits"`
	}
	if err := json.Unmarshal(out, &qdiscs); err != nil {
		return nil, fmt.Errorf("tc -s -j qdisc show: %w", err)
	}
	held := map[string]float64{}
	for _, q := range qdiscs {
		if q.Root && q.Kind == "htb" && q.Handle == "1:" && q.Dev != "" {
			held[q.Dev] = float64(q.Overlimits + q.Drops)
		}
	}
	return held, nil
}

// sysNet is where the kernel lists the host's interfaces.
var sysNet = "/sys/class/net"

// staleIFBs lists the enforcer's IFBs whose tap is gone (a former run's,
// or a VM's that stopped between two ticks).
func staleIFBs() []string {
	ents, err := os.ReadDir(sysNet)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "mi") {
			continue
		}
		alias, err := os.ReadFile(filepath.Join(sysNet, e.Name(), "ifalias"))
		tap, ours := strings.CutPrefix(strings.TrimSpace(string(alias)), ifbAliasPrefix)
		if err != nil || !ours || tap == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(sysNet, tap)); errors.Is(err, os.ErrNotExist) {
			out = append(out, e.Name())
		}
	}
	return out
}

// removeStaleIFBs deletes the IFBs staleIFBs lists.
func removeStaleIFBs() error {
	var errs []error
	for _, ifb := range staleIFBs() {
		if err := tcRun("ip", "link", "del", ifb); !absent(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CheckNetShaping reports whether this host can shape taps as the
// network throttles do (see above): it looks for tc and ip and builds the
// whole arrangement on a scratch IFB — HTB root and class, an ingress
// qdisc, a u32 filter with a mirred redirect — then deletes it. It needs
// the agent's privileges (CAP_NET_ADMIN).
func CheckNetShaping() error {
	for _, bin := range []string{"tc", "ip"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("iproute2's %s not found: %w", bin, err)
		}
	}
	probe := fmt.Sprintf("mrmprobe%d", os.Getpid()%1000000) // a name of 14 bytes at most: tap adds one
	if err := tcRun("ip", "link", "add", probe, "type", "ifb"); err != nil {
		return fmt.Errorf("no IFB device (ifb): %w", err)
	}
	defer func() { _ = tcRun("ip", "link", "del", probe) }()
	// A second IFB plays a tap of the shared link (tcshare.go): its clsact
	// redirects to the first, whose HTB classifies by MAC.
	tap := probe + "t"
	if err := tcRun("ip", "link", "add", tap, "type", "ifb"); err != nil {
		return fmt.Errorf("no IFB device (ifb): %w", err)
	}
	defer func() { _ = tcRun("ip", "link", "del", tap) }()
	class := vmClass{minor: 2, rate: mib, quantum: leastQuantum, macs: []string{"02:00:00:00:00:01"}}
	steps := []struct {
		what string
		args []string
	}{
		{"HTB (sch_htb)", []string{"qdisc", "add", "dev", probe, "root", "handle", "1:", "htb", "default", "1"}},
		{"HTB (sch_htb)", htbArgs(probe, mib)},
		{"ingress qdisc (sch_ingress)", redirectArgs(probe, probe)[0]},
		{"u32 filter with a mirred redirect (cls_u32, act_mirred)", redirectArgs(probe, probe)[1]},
		{"HTB class of a VM on the shared link", classCommands(probe, "net-in", 2*mib, class)[0]},
		{"byte-limited FIFO (sch_fifo's bfifo) under a VM's class", classCommands(probe, "net-in", 2*mib, class)[1]},
		{"u32 filter by MAC (cls_u32's ether match)", classCommands(probe, "net-in", 2*mib, class)[2]},
		{"clsact qdisc (sch_ingress)", []string{"qdisc", "add", "dev", tap, "clsact"}},
		{"u32 filter on clsact egress with a mirred redirect", []string{"filter", "add", "dev", tap, "egress", "protocol", "all", "prio", "1",
			"u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", probe}},
	}
	for _, s := range steps {
		if err := tcRun("tc", s.args...); err != nil {
			return fmt.Errorf("no %s: %w", s.what, err)
		}
	}
	return nil
}
