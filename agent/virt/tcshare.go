package virt

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
)

// A link shared in the kernel. Caps re-planned every tick lend what a VM
// leaves to the others a tick late, and a shuffle's flows turn from one
// guest to another every second (docs/E2E.md, runs 53–55). Where the
// link's speed is stated, the kernel can divide it itself, at once:
//
//   - one IFB per direction (sharedIFBs): into the guests ("mrmin") and out
//     of them ("mrmout"), each with an HTB root (handle 1:) whose class 1:1
//     is the link's rate;
//   - under it a class per VM (1:<minor>) at its part of the link (rate)
//     with the whole link as its ceiling: a VM that wants more than its
//     part borrows what the others leave, in proportion to the classes'
//     quanta, which follow the shares; its queue holds queueDelay at its
//     rate, so a guest's bulk data cannot hold its new connections back
//     for seconds;
//   - u32 filters on each IFB send a VM's packets to its class by its MAC:
//     the destination into the guest, the source out of it. (This kernel
//     has neither act_skbedit nor cls_matchall, which would mark a tap's
//     packets for their class on the tap; docs/PLATFORM.md.) A VM nobody
//     bids on has a class too, at its piece of unpaidPart; packets of no
//     VM's (ARP from the host) pass unshaped;
//   - each tap gets a clsact qdisc whose egress (into the guest) and
//     ingress (out of it) filters redirect every packet to the direction's
//     IFB; the IFB sends it on where it was going. Out of the guest only
//     frames from the guest's own MACs go on: the outbound IFB classifies
//     by source MAC, and a guest that forged another's would be charged to
//     that VM's class, or, forging one of no VM's, pass unshaped. Its
//     other frames are redirected to dropIFB, an IFB kept down, which
//     drops them (this kernel has no gact to drop them with).
//
// sharedShaping computes the commands; the enforcer runs them.

// sharedIFBs are the IFBs of the two directions, by resource.
var sharedIFBs = map[string]string{"net-in": "mrmin", "net-out": "mrmout"}

// dropIFB is where a guest's frames from a MAC not its own go: an IFB
// never set up, whose mirred redirect drops them (counted as the filter's
// overlimits).
const dropIFB = "mrmdrop"

// leastQuantum is the HTB quantum of the class with the least share: what
// it may send in a round when borrowing, the others' in proportion to
// their shares. It is one GSO packet (64 KiB): with a quantum smaller
// than the packets, each round sends a packet per class whatever the
// quanta, and the faster flow's larger packets took more of what an idle
// VM left (1:2 came out 0.62 : 0.38 at quanta of 12,000 and 24,000 bytes).
const leastQuantum = 64 << 10

// vmClass is a VM's class on the shared link: its minor and its rate and
// quantum, the MACs its filters match.
type vmClass struct {
	minor   uint16
	rate    float64 // bytes/s
	ceil    float64 // bytes/s; 0: the link's
	quantum int
	macs    []string
}

// unpaidPart is the part of the link the VMs nobody bids on share, each
// capped at its even piece of it, rate and ceiling: enough for ARP, DHCP
// and a worker's heartbeats. Without a class of its own such a VM's tap
// would pass beside the shared HTB, unshaped, and take from the link what
// the paying VMs' parts assume they have; with the whole link as its
// ceiling it would borrow as much as the least paying VM (HTB sends a
// packet a class each round whatever a quantum below the packet's size).
const unpaidPart = 0.02

// sharedClasses gives each VM whose MACs are known its class on a link of
// bps bytes/s: one with a share its part of the link by shares (of all but
// unpaidPart of it when some VM has none), its quantum in proportion to
// its share; one without its even piece of unpaidPart, as its rate and
// its ceiling. minors keeps each VM's minor across calls (a new VM takes
// the least one free from 2).
func sharedClasses(bps float64, shares map[string]float64, macs map[string][]string, minors map[string]uint16) map[string]vmClass {
	var sum float64
	least := math.Inf(1)
	unpaid := 0
	for vm := range macs {
		if q := shares[vm]; q > 0 {
			sum, least = sum+q, math.Min(least, q)
		} else {
			unpaid++
		}
	}
	paid := bps
	if unpaid > 0 {
		paid = bps * (1 - unpaidPart)
	}
	used := map[uint16]bool{}
	for _, m := range minors {
		used[m] = true
	}
	vms := make([]string, 0, len(macs))
	for vm := range macs {
		vms = append(vms, vm)
	}
	sort.Strings(vms)
	out := map[string]vmClass{}
	for _, vm := range vms {
		if len(macs[vm]) == 0 {
			continue
		}
		m, ok := minors[vm]
		if !ok {
			for m = 2; used[m]; m++ {
			}
			used[m], minors[vm] = true, m
		}
		c := vmClass{minor: m, quantum: leastQuantum, macs: macs[vm]}
		if q := shares[vm]; q > 0 {
			c.rate, c.quantum = paid*q/sum, int(math.Round(leastQuantum*min(q/least, 256)))
		} else {
			c.rate = bps * unpaidPart / float64(unpaid)
			c.ceil = c.rate
		}
		out[vm] = c
	}
	return out
}

// rateArg is bytes/s as tc's rate, in bits, with htbSlack (HTB charges a
// GSO packet the headers of every segment it stands for).
func rateArg(bps float64) string {
	return fmt.Sprintf("%dbit", uint64(max(math.Round(bps*htbSlack*8), 8000)))
}

// burstArg is the bucket of a rate: 100 ms of it, at least 128 KiB (see
// htbArgs).
func burstArg(bps float64) string {
	return fmt.Sprintf("%db", uint64(max(bps*htbSlack/10, 128<<10)))
}

// queueDelay is how long a class's queue holds what it sends at its rate.
// HTB's leaf otherwise queues txqueuelen packets (1,000), each up to a
// 64 KiB GSO packet: a guest's TCP, never losing one, grows its window
// until seconds of its bulk data wait in its class, and a new
// connection's handshake and its ACKs wait behind them (a shuffle's fetch
// started seconds after the others', docs/E2E.md). A queue of a fifth of
// a second at the rate still outlasts a TCP flow's backing off on the
// links these classes divide (round trips of a millisecond or so), so a
// busy class does not run dry and lend its part away.
const queueDelay = 0.2

// leastQueue is the smallest queue a class gets: two GSO packets.
const leastQueue = 128 << 10

// queueArg is the byte limit of the queue of a class of bps bytes/s.
func queueArg(bps float64) string {
	return fmt.Sprintf("%db", uint64(max(bps*htbSlack*queueDelay, leastQueue)))
}

// linkCommands sets up one direction's IFB for a link of bps bytes/s: its
// HTB root and the link's class (idempotent: replace).
func linkCommands(ifb string, bps float64) [][]string {
	return [][]string{
		{"qdisc", "replace", "dev", ifb, "root", "handle", "1:", "htb"},
		{"class", "replace", "dev", ifb, "parent", "1:", "classid", "1:1", "htb",
			"rate", rateArg(bps), "ceil", rateArg(bps), "burst", burstArg(bps), "cburst", burstArg(bps)},
	}
}

// classCommands sets a VM's class on one direction's IFB (link: the link's
// bytes/s, its ceiling) and its filters, one per MAC: dir "net-in" matches
// the destination, "net-out" the source. Its filters are added under the
// class's own handle (800:<minor>) in the root's u32 table, so that
// replacing them changes only the VM's own.
func classCommands(ifb, dir string, link float64, c vmClass) [][]string {
	class := fmt.Sprintf("1:%x", c.minor)
	ceil := link
	if c.ceil > 0 {
		ceil = c.ceil
	}
	cmds := [][]string{{"class", "replace", "dev", ifb, "parent", "1:1", "classid", class, "htb",
		"rate", rateArg(c.rate), "ceil", rateArg(ceil), "burst", burstArg(c.rate), "cburst", burstArg(ceil),
		"quantum", fmt.Sprint(c.quantum)},
		{"qdisc", "replace", "dev", ifb, "parent", class, "handle", fmt.Sprintf("%x:", c.minor), "bfifo", "limit", queueArg(c.rate)}}
	side := "dst"
	if dir == "net-out" {
		side = "src"
	}
	for i, mac := range c.macs {
		cmds = append(cmds, []string{"filter", "replace", "dev", ifb, "parent", "1:", "protocol", "all", "prio", "1",
			"handle", fmt.Sprintf("800::%x", int(c.minor)*16+i), "u32", "match", "ether", side, strings.ToLower(mac), "flowid", class})
	}
	return cmds
}

// tapCommands redirects what a tap carries to the shared IFBs: egress
// (into the guest) all of it to the inbound one, ingress (out of it) the
// frames from the guest's own macs to the outbound one and the rest to
// dropIFB. Run on a tap without the enforcer's clsact (redirectTap
// removes one first): two u32 filters given the same handle on the two
// hooks of one clsact are one filter, and the second replaced the first.
func tapCommands(tap string, macs []string) [][]string {
	cmds := [][]string{
		{"qdisc", "add", "dev", tap, "clsact"},
		{"filter", "add", "dev", tap, "egress", "protocol", "all", "prio", "1",
			"u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", sharedIFBs["net-in"]},
	}
	for _, mac := range macs {
		cmds = append(cmds, []string{"filter", "add", "dev", tap, "ingress", "protocol", "all", "prio", "1",
			"u32", "match", "ether", "src", strings.ToLower(mac), "action", "mirred", "egress", "redirect", "dev", sharedIFBs["net-out"]})
	}
	return append(cmds, []string{"filter", "add", "dev", tap, "ingress", "protocol", "all", "prio", "2",
		"u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", dropIFB})
}

// redirectTap sets tapCommands up on tap, replacing whatever clsact or
// ingress qdisc it had.
func redirectTap(tap string, macs []string) error {
	for _, kind := range []string{"clsact", "ingress"} {
		if err := tcRun("tc", "qdisc", "del", "dev", tap, kind); !absent(err) {
			return err
		}
	}
	return runTC(tapCommands(tap, macs))
}

// runTC runs tc with each command's arguments, all of them, and returns
// their errors joined.
func runTC(cmds [][]string) error {
	var errs []error
	for _, c := range cmds {
		if err := tcRun("tc", c...); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// linkMargin is the part of the stated link speed the shared HTB gives:
// the kernel divides the link only where its queue forms, and a shaper as
// fast as the link leaves the queue to the link itself (a NIC, or in
// TestNetShares a tbf at the stated 48 MiB/s that delivered 45.8 of
// payload), which divides it evenly whatever the classes say.
const linkMargin = 0.92

// sharedAlias marks the shared IFBs as the enforcer's.
const sharedAlias = "mrmarket shared link"

// sharedLink is the enforcer's state of a link shared in the kernel: the
// classes in force and the taps redirected.
type sharedLink struct {
	bps    float64 // the link's speed, bytes/s
	ready  bool    // the IFBs and the link's classes are set up
	minors map[string]uint16
	set    map[string]vmClass // by VM, in force
	taps   map[string]bool    // redirected to the IFBs
}

// setUp makes both IFBs afresh (a former run's, with its classes, is
// deleted first) with the link's HTB.
func (l *sharedLink) setUp() error {
	for _, dir := range []string{"net-in", "net-out"} {
		ifb := sharedIFBs[dir]
		if err := tcRun("ip", "link", "del", ifb); !absent(err) {
			return err
		}
		if err := addIFB(ifb, sharedAlias); err != nil {
			return err
		}
		if err := tcRun("ip", "link", "set", ifb, "up"); err != nil {
			return err
		}
		if err := runTC(linkCommands(ifb, l.bps)); err != nil {
			return err
		}
	}
	// dropIFB stays down: what is redirected to it is dropped.
	if err := tcRun("ip", "link", "del", dropIFB); !absent(err) {
		return err
	}
	if err := addIFB(dropIFB, sharedAlias); err != nil {
		return err
	}
	l.ready, l.minors, l.set, l.taps = true, map[string]uint16{}, map[string]vmClass{}, map[string]bool{}
	return nil
}

// apply sets each VM's class by the shares (VMs with taps whose MACs are
// known), removes the classes of VMs gone, redirects
// the taps not yet redirected, and returns the parts in force by VM, in
// MiB/s each way.
func (l *sharedLink) apply(shares map[string]float64, counters map[string]ioCounters) (map[string]map[string]float64, error) {
	if !l.ready {
		if err := l.setUp(); err != nil {
			return nil, fmt.Errorf("virt: setting up the shared link: %w", err)
		}
	}
	macs := map[string][]string{}
	for vm, c := range counters {
		if len(c.macs) > 0 {
			macs[vm] = c.macs
		}
	}
	classes := sharedClasses(l.bps, shares, macs, l.minors)
	var errs []error
	for vm, prev := range l.set {
		if _, keep := classes[vm]; keep {
			continue
		}
		for _, dir := range []string{"net-in", "net-out"} {
			errs = append(errs, runTC(removeClassCommands(sharedIFBs[dir], prev)))
		}
		delete(l.set, vm)
		delete(l.minors, vm)
	}
	for vm, c := range classes {
		if prev, ok := l.set[vm]; ok && !classDiffers(prev, c) {
			continue
		}
		var err error
		for _, dir := range []string{"net-in", "net-out"} {
			err = errors.Join(err, runTC(classCommands(sharedIFBs[dir], dir, l.bps, c)))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("virt: %s's class on the shared link: %w", vm, err))
			continue
		}
		l.set[vm] = c
	}
	live := map[string]bool{}
	for vm := range classes {
		for _, tap := range counters[vm].nics {
			live[tap] = true
			if !l.taps[tap] {
				if err := redirectTap(tap, counters[vm].macs); err != nil {
					errs = append(errs, fmt.Errorf("virt: redirecting %s to the shared link: %w", tap, err))
					continue
				}
				l.taps[tap] = true
			}
		}
	}
	for tap := range l.taps {
		if !live[tap] {
			if err := tcRun("tc", "qdisc", "del", "dev", tap, "clsact"); !absent(err) {
				errs = append(errs, err)
			}
			delete(l.taps, tap)
		}
	}
	parts := map[string]map[string]float64{}
	for vm, c := range l.set {
		parts[vm] = map[string]float64{"net-in": c.rate / mib, "net-out": c.rate / mib}
	}
	return parts, errors.Join(errs...)
}

// close removes the taps' redirects and both IFBs.
func (l *sharedLink) close() error {
	var errs []error
	for tap := range l.taps {
		if err := tcRun("tc", "qdisc", "del", "dev", tap, "clsact"); !absent(err) {
			errs = append(errs, err)
		}
	}
	for _, ifb := range append(slices.Collect(maps.Values(sharedIFBs)), dropIFB) {
		if err := tcRun("ip", "link", "del", ifb); !absent(err) {
			errs = append(errs, err)
		}
	}
	l.ready = false
	return errors.Join(errs...)
}

// classDiffers: a class is set again when its MACs change or its rate or
// quantum moves by more than 1 %.
func classDiffers(a, b vmClass) bool {
	return a.minor != b.minor || strings.Join(a.macs, ",") != strings.Join(b.macs, ",") ||
		math.Abs(a.rate-b.rate) > 0.01*max(a.rate, b.rate) || a.ceil != b.ceil || a.quantum != b.quantum
}

// removeClassCommands deletes a VM's filters, then its class.
func removeClassCommands(ifb string, c vmClass) [][]string {
	var cmds [][]string
	for i := range c.macs {
		cmds = append(cmds, []string{"filter", "del", "dev", ifb, "parent", "1:", "protocol", "all", "prio", "1",
			"handle", fmt.Sprintf("800::%x", int(c.minor)*16+i), "u32"})
	}
	return append(cmds, []string{"class", "del", "dev", ifb, "classid", fmt.Sprintf("1:%x", c.minor)})
}
