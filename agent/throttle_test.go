package agent_test

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/agent"
)

// device is a shared device that does not weigh its users (a disk under
// mq-deadline, a link): it delivers bandwidth to the VMs that want it in
// equal parts (unweighted max-min), each at most its cap and its demand.
type device struct {
	bandwidth float64
	demand    map[string]float64 // what each VM would move uncapped
}

func (d *device) serve(caps map[string]float64) map[string]float64 {
	limit := map[string]float64{}
	var vms []string
	for vm, w := range d.demand {
		l := w
		if c, ok := caps[vm]; ok && caps != nil {
			l = min(l, c)
		}
		limit[vm] = l
		vms = append(vms, vm)
	}
	sort.Slice(vms, func(i, j int) bool { return limit[vms[i]] < limit[vms[j]] })
	out, left := map[string]float64{}, d.bandwidth
	for i, vm := range vms {
		out[vm] = min(limit[vm], left/float64(len(vms)-i))
		left -= out[vm]
	}
	return out
}

// run ticks the throttle against the device n times and returns each VM's
// part of what was moved over the ticks, and the mean total moved.
func run(th *agent.Throttle, dev *device, shares map[string]float64, moved *map[string]float64, n int) (map[string]float64, float64) {
	sum, total := map[string]float64{}, 0.0
	for range n {
		caps := th.Plan(shares, *moved, nil)
		*moved = dev.serve(caps)
		for vm, m := range *moved {
			sum[vm] += m
			total += m
		}
	}
	for vm := range sum {
		sum[vm] /= total
	}
	return sum, total / float64(n)
}

func partsNear(t *testing.T, what string, got, want map[string]float64, tol float64) {
	t.Helper()
	for vm, w := range want {
		if math.Abs(got[vm]-w) > tol {
			t.Errorf("%s: %s moved %.3f of the total, want %.3f ± %.2f (all: %v)", what, vm, got[vm], w, tol, fmtShares(got))
		}
	}
}

func fmtShares(m map[string]float64) string {
	var vms []string
	for vm := range m {
		vms = append(vms, vm)
	}
	sort.Strings(vms)
	s := ""
	for _, vm := range vms {
		s += fmt.Sprintf("%s=%.3f ", vm, m[vm])
	}
	return s
}

// TestThrottleDividesAnUnweighingDevice: on a device that would split
// itself equally, the caps make the VMs' throughput follow their shares
// (3:1, 1:2:5), from a cold start whose first ticks move little, with the
// capacity estimate settling near the device's bandwidth.
func TestThrottleDividesAnUnweighingDevice(t *testing.T) {
	for _, tc := range []struct {
		shares map[string]float64
		alone  float64 // what each VM moves alone (of the device's 1000)
	}{
		{map[string]float64{"a": 0.75, "b": 0.25}, 900},
		{map[string]float64{"a": 0.125, "b": 0.25, "c": 0.625}, 900},
		// Each VM alone moves little more than c's part: c gets it only
		// if a and b are held to theirs while c falls short of its cap
		// (the device gives each an equal turn), as on real guests
		// reading one at a time.
		{map[string]float64{"a": 0.125, "b": 0.25, "c": 0.625}, 650},
	} {
		dev := &device{bandwidth: 1000, demand: map[string]float64{}}
		for vm := range tc.shares {
			dev.demand[vm] = 20 // booting
		}
		th := &agent.Throttle{}
		moved := map[string]float64{}
		run(th, dev, tc.shares, &moved, 3)
		for vm := range tc.shares {
			dev.demand[vm] = tc.alone
		}
		// Within 20 ticks of saturating (10 s at the agent's 500 ms).
		run(th, dev, tc.shares, &moved, 20)
		got, mean := run(th, dev, tc.shares, &moved, 20)
		partsNear(t, fmt.Sprintf("%v", tc.shares), got, tc.shares, 0.02)
		if mean < 900 {
			t.Errorf("%v: the VMs moved %.0f of the device's 1000 per tick", tc.shares, mean)
		}
		if th.Capacity < 900 || th.Capacity > 1150 {
			t.Errorf("%v: capacity estimate %.0f, device 1000", tc.shares, th.Capacity)
		}
		t.Logf("%v: moved %s, %.0f per tick, estimate %.0f", tc.shares, fmtShares(got), mean, th.Capacity)
	}
}

// TestThrottleLendsWhatIsNotUsed: a VM going idle leaves its part to the
// others (who keep their ratio among themselves); a VM using less than
// its part gets what it uses and the rest goes to the others; back busy,
// the VM has its share again.
func TestThrottleLendsWhatIsNotUsed(t *testing.T) {
	shares := map[string]float64{"a": 0.125, "b": 0.25, "c": 0.625}
	dev := &device{bandwidth: 1000, demand: map[string]float64{"a": 900, "b": 900, "c": 900}}
	th := &agent.Throttle{}
	moved := map[string]float64{}
	run(th, dev, shares, &moved, 30)

	dev.demand["c"] = 0
	run(th, dev, shares, &moved, 10)
	got, mean := run(th, dev, shares, &moved, 20)
	if mean < 880 {
		t.Errorf("c idle: a and b moved %.0f per tick of 1000", mean)
	}
	partsNear(t, "c idle", got, map[string]float64{"a": 1.0 / 3, "b": 2.0 / 3, "c": 0}, 0.02)
	t.Logf("c idle: %s, %.0f per tick", fmtShares(got), mean)

	dev.demand["c"] = 50 // under its part of 625
	run(th, dev, shares, &moved, 10)
	got, mean = run(th, dev, shares, &moved, 20)
	if mean < 880 || math.Abs(got["c"]*mean-50) > 5 {
		t.Errorf("c using 50: %s, %.0f per tick", fmtShares(got), mean)
	}
	t.Logf("c using 50: %s, %.0f per tick", fmtShares(got), mean)

	dev.demand["c"] = 900
	run(th, dev, shares, &moved, 10)
	got, _ = run(th, dev, shares, &moved, 20)
	partsNear(t, "c busy again", got, shares, 0.02)
}

// TestThrottleFollowsTheDevice: when the device slows down (another
// tenant, a degraded disk) the estimate follows it down within a Window
// of ticks and the shares hold; when it speeds up again the estimate climbs back; a ceiling (a
// link's known speed) is never exceeded.
func TestThrottleFollowsTheDevice(t *testing.T) {
	shares := map[string]float64{"a": 0.75, "b": 0.25}
	dev := &device{bandwidth: 1000, demand: map[string]float64{"a": 2000, "b": 2000}}
	th := &agent.Throttle{}
	moved := map[string]float64{}
	run(th, dev, shares, &moved, 30)
	dev.bandwidth = 400
	run(th, dev, shares, &moved, agent.Window+5) // the faster device is remembered a Window
	got, _ := run(th, dev, shares, &moved, 20)
	partsNear(t, "device at 400", got, shares, 0.02)
	if th.Capacity > 460 {
		t.Errorf("device at 400: estimate %.0f", th.Capacity)
	}
	dev.bandwidth = 1000
	run(th, dev, shares, &moved, 20)
	got, mean := run(th, dev, shares, &moved, 20)
	partsNear(t, "device back at 1000", got, shares, 0.02)
	if mean < 900 {
		t.Errorf("device back at 1000: %.0f per tick", mean)
	}

	capped := &agent.Throttle{Ceiling: 500}
	moved = map[string]float64{}
	run(capped, dev, shares, &moved, 30)
	if capped.Capacity > 500 {
		t.Errorf("ceiling 500: estimate %.0f", capped.Capacity)
	}
	if caps := (&agent.Throttle{}).Plan(shares, nil, nil); caps != nil {
		t.Errorf("nothing seen yet: caps %v", caps)
	}
	// A lone VM is capped at the ceiling (a link slower than the taps),
	// without one not at all.
	lone := map[string]float64{"a": 300, "b": 0}
	if caps := capped.Plan(shares, lone, nil); caps["a"] != 500 || caps["b"] != 500 {
		t.Errorf("a lone VM under a ceiling of 500: caps %v", caps)
	}
	if caps := th.Plan(shares, lone, nil); caps != nil {
		t.Errorf("a lone VM without a ceiling: caps %v", caps)
	}
}

// TestThrottleKnownLinkDoesNotRatchet: on a link of known speed the caps
// divide that speed whatever the VMs move. Two TCP-like flows that move
// only 70 % of their caps each tick (backing off below them) keep caps in
// proportion to their shares that add up to the link; an estimate learned
// from what they moved would fall with them tick by tick (the mutation:
// learning under a Ceiling, the estimate bounded by it, leaves caps of a
// few percent of the link after 30 ticks).
func TestThrottleKnownLinkDoesNotRatchet(t *testing.T) {
	th := &agent.Throttle{Ceiling: 2}
	shares := map[string]float64{"a": 3, "b": 1}
	moved := map[string]float64{"a": 0.05, "b": 0.05}
	var caps map[string]float64
	for tick := range 30 {
		caps = th.Plan(shares, moved, nil)
		if len(caps) != 2 {
			t.Fatalf("tick %d: caps %v", tick, caps)
		}
		for vm, c := range caps {
			moved[vm] = 0.7 * c
		}
	}
	if sum := caps["a"] + caps["b"]; math.Abs(sum-2) > 1e-9 {
		t.Errorf("caps %v add up to %.3f, want the link's 2", caps, sum)
	}
	if r := caps["a"] / caps["b"]; math.Abs(r-3) > 0.01 {
		t.Errorf("caps %v in ratio %.3f, want 3", caps, r)
	}
}

// TestThrottleSeesAFlowItsCapHolds: on a 2 MB/s link shared 1.5:1.5:1
// (alice's two VMs, bob's one), bob's VM is idle for a while (held at its
// probe while alice's move data) and then starts a transfer that wants the
// whole link. Like TCP behind a small cap's queue, its flow loses packets
// and backs off: it moves a trickle (below the idle threshold), while the
// shaper counts the packets it held back. From the tick after the
// shaper's count rises, bob's cap is his part (0.5 MB/s) and stays so.
// Mutation: ignoring the held counts leaves bob at his probe of 0.05 MB/s
// (judged idle by what he moved) for as long as he tries.
func TestThrottleSeesAFlowItsCapHolds(t *testing.T) {
	const r = "net-in"
	shares := map[string]float64{"a1": 1.5, "a2": 1.5, "b": 1}
	t0 := time.Unix(0, 0)
	s := agent.ThrottleSet{Plans: map[string]*agent.Throttle{r: {Ceiling: 2}}}
	sofar, held := map[string]float64{}, map[string]float64{}
	counters := func(c map[string]float64) map[string]map[string]float64 {
		out := map[string]map[string]float64{}
		for vm := range shares {
			out[vm] = map[string]float64{r: c[vm]}
		}
		return out
	}
	var caps map[string]map[string]float64
	for tick := range 30 {
		caps = s.Plan(shares, counters(sofar), counters(held), t0.Add(time.Duration(tick)*time.Second))
		capB := caps["b"][r]
		if tick == 10 && math.Abs(capB-agent.IdleProbe*0.5) > 1e-9 {
			t.Fatalf("tick 10: bob, idle, is capped at %.3f MB/s, want his probe %.3f", capB, agent.IdleProbe*0.5)
		}
		if tick >= 12 && math.Abs(capB-0.5) > 1e-9 {
			t.Fatalf("tick %d: bob's flow held back for %d ticks, his cap %.3f MB/s, want his part 0.5 (caps %v)",
				tick, tick-10, capB, caps)
		}
		for _, a := range []string{"a1", "a2"} { // alice's fill their caps, which hold them
			sofar[a] += caps[a][r]
			held[a] += 7
		}
		switch {
		case tick < 10 || capB == 0: // idle, or nothing capped yet
		case capB >= 0.5: // his part: the flow grows into it
			sofar["b"] += capB
			held["b"] += 3
		default: // his probe: packets dropped, the flow backs off
			sofar["b"] += 0.005
			held["b"]++
		}
	}

	// A held count that went back (the shaping was set up again) counts
	// as held since: bob, trickling, is pressed.
	s = agent.ThrottleSet{Plans: map[string]*agent.Throttle{r: {Ceiling: 2}}}
	sofar, held = map[string]float64{}, map[string]float64{}
	for tick := range 8 {
		caps = s.Plan(shares, counters(sofar), counters(held), t0.Add(time.Duration(tick)*time.Second))
		sofar["a1"], sofar["a2"] = sofar["a1"]+1, sofar["a2"]+1
		held["a1"], held["a2"] = held["a1"]+7, held["a2"]+7
		switch {
		case tick == 5:
			held["b"] = 50 // pressed before the reset
			sofar["b"] += 0.001
		case tick == 6:
			held["b"] = 2 // reset, and held twice since
			sofar["b"] += 0.001
		}
		if tick == 6 && math.Abs(caps["b"][r]-0.5) > 1e-9 {
			t.Errorf("tick 6: bob's cap %.3f after a rise of his held count, want 0.5", caps["b"][r])
		}
	}
	if capB := caps["b"][r]; math.Abs(capB-0.5) > 1e-9 {
		t.Errorf("after his held count was reset: bob's cap %.3f, want 0.5", capB)
	}
}

// TestThrottleLoneSenderKeepsTheLink: bob's sort shuffles between his two
// VMs while alice's are idle; in the direction out of them one VM sends
// and the other sends only the ACKs of what it receives, now under the
// bar of using the link, now over it. The sender alone on the link has
// it all (its cap the link's 2 MB/s), and when the ACKs count it still
// has all the ACKs and alice's probes leave, every tick. Mutation: taking
// every VM that was not capped (the tick after one VM alone had the link)
// as wanting more gives the ACKs an equal part and the sender half the
// link every other tick (make e2e run 53: bob's shuffle moved 1.0-1.4
// MB/s on his own).
func TestThrottleLoneSenderKeepsTheLink(t *testing.T) {
	th := &agent.Throttle{Ceiling: 2}
	shares := map[string]float64{"a1": 0.375, "a2": 0.375, "b0": 0.125, "b1": 0.125}
	moved := map[string]float64{"b1": 1.9}
	for tick := range 20 {
		caps := th.Plan(shares, moved, nil)
		if tick >= 2 && caps["b1"] < 1.7 {
			t.Fatalf("tick %d: the lone sender's cap %.3f MB/s, want nearly the link's 2 (caps %v)", tick, caps["b1"], caps)
		}
		moved = map[string]float64{"b1": min(caps["b1"], 1.9), "b0": 0.004}
		if tick%2 == 0 {
			moved["b0"] = 0.03
		}
	}
}

// TestThrottleSetRatesNeedTwoReadings: a VM's counter is a rate only
// between two readings in a row that have it. A disk left unread for a
// tick (its QEMU was not asked) and read again must not count everything
// it moved since the start as one tick's traffic. Mutation: taking a
// missing counter as 0 plans the VM's 600 MB as 600 MB/s and caps the
// device's capacity at that.
func TestThrottleSetRatesNeedTwoReadings(t *testing.T) {
	s := agent.ThrottleSet{Plans: map[string]*agent.Throttle{"disk": {}}}
	t0 := time.Unix(0, 0)
	shares := map[string]float64{"a": 0.5, "b": 0.5}
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	s.Plan(shares, map[string]map[string]float64{"a": {"disk": 0}, "b": {"disk": 0}}, nil, at(0))
	s.Plan(shares, map[string]map[string]float64{"a": {"disk": 10}, "b": {}}, nil, at(1)) // b unread
	caps := s.Plan(shares, map[string]map[string]float64{"a": {"disk": 20}, "b": {"disk": 600}}, nil, at(2))
	if c := s.Plans["disk"].Capacity; c > 20 {
		t.Fatalf("capacity %.1f MB/s after b's unread tick (caps %v): its 600 MB counted as one second's", c, caps)
	}
	caps = s.Plan(shares, map[string]map[string]float64{"a": {"disk": 30}, "b": {"disk": 610}}, nil, at(3))
	if caps["b"]["disk"] <= 0 {
		t.Fatalf("b, read twice in a row, is not planned: %v", caps)
	}
}

// TestThrottleResumeAfterALoneBurst: a device that serves one reader alone
// faster than two together (an NBD server behind nbdkit's rate filter let
// a lone guest read ~160 MiB/s of a 64 MiB/s limit) must not teach the
// estimate its lone speed: after the low bidder's pause and resume, 3:1
// holds within 0.05 from 10 ticks (5 s at the agent's 500 ms) after the
// resume, in every 10-tick window, and the caps never put the low bidder
// above the high one. Mutation: learning the capacity from every tick's
// total (lone ones included) raises the estimate to ~160 and the device
// then splits itself about evenly for tens of ticks.
func TestThrottleResumeAfterALoneBurst(t *testing.T) {
	shares := map[string]float64{"a": 0.75, "b": 0.25}
	dev := &loneDevice{device: device{bandwidth: 64, demand: map[string]float64{"a": 200, "b": 200}}, alone: 160}
	th := &agent.Throttle{}
	moved := map[string]float64{}
	step := func() map[string]float64 {
		caps := th.Plan(shares, moved, nil)
		if caps != nil && caps["b"] > caps["a"]+1e-9 && dev.demand["b"] > 0 {
			t.Errorf("caps inverted: %v", caps)
		}
		moved = dev.serve(caps)
		return moved
	}
	// window is each VM's part of what was moved over 10 ticks, and the
	// mean total.
	window := func() (map[string]float64, float64) {
		sum, total := map[string]float64{}, 0.0
		for range 10 {
			for vm, m := range step() {
				sum[vm] += m
				total += m
			}
		}
		for vm := range sum {
			sum[vm] /= total
		}
		return sum, total / 10
	}
	// a reads alone first (at the device's lone speed), then b joins.
	dev.demand["b"] = 0
	for range 20 {
		step()
	}
	dev.demand["b"] = 200
	for range 10 {
		step()
	}
	for range 2 {
		got, _ := window()
		partsNear(t, fmt.Sprintf("b joining a that read alone (estimate %.0f)", th.Capacity), got, shares, 0.05)
	}
	for round := range 3 {
		dev.demand["b"] = 0 // paused
		for range 30 {
			step()
		}
		dev.demand["b"] = 200 // resumed
		for range 10 {
			step()
		}
		for w := range 4 {
			got, _ := window()
			partsNear(t, fmt.Sprintf("pause %d, window %d after the resume (estimate %.0f)", round+1, w+1, th.Capacity), got, shares, 0.05)
		}
	}
}

// loneDevice is a device that gives a VM reading alone more than it gives
// several together (alone, not bandwidth).
type loneDevice struct {
	device
	alone float64
}

func (d *loneDevice) serve(caps map[string]float64) map[string]float64 {
	n := 0
	for _, w := range d.demand {
		if w > 0 {
			n++
		}
	}
	dev := d.device
	if n == 1 {
		dev.bandwidth = d.alone
	}
	return dev.serve(caps)
}

// TestThrottleCapsKeepTheBidOrder: a high bidder using little is capped
// near its use, but never below a lower bidder's cap: the moment it wants
// more, it has at least what the one paying less has. Mutation: without
// noInversion its cap is 12.5 against the low bidder's 52.
func TestThrottleCapsKeepTheBidOrder(t *testing.T) {
	shares := map[string]float64{"a": 0.75, "b": 0.25}
	dev := &device{bandwidth: 64, demand: map[string]float64{"a": 10, "b": 200}}
	th := &agent.Throttle{}
	moved := map[string]float64{}
	var caps map[string]float64
	for range 40 {
		caps = th.Plan(shares, moved, nil)
		moved = dev.serve(caps)
	}
	if caps["a"] < caps["b"] {
		t.Fatalf("caps %v: the high bidder's is below the low bidder's", caps)
	}
	if moved["b"] < 50 {
		t.Errorf("the low bidder moves %.1f of the 54 the high bidder leaves", moved["b"])
	}
}

// TestThrottleDoesNotHoldBackVMsTheDeviceDoesNot: VMs whose reads are
// limited by something else (their CPU shares: TCG guests computing on
// what they read, at 3:1) on a device several times faster than they move
// together, with each tick's rate off by up to ±15 % (a guest's CPU is
// never steady). Caps then divide nothing scarce: they must not hold the
// VMs below what they would move uncapped. Mutation: taking a noisy tick's
// shortfall or a raise that did not pay off at once as the device's speed
// ratchets the estimate down to what the caps let through (end-to-end:
// word counts at 3:1 moved a third of what they read uncapped, and their
// guests used half of their CPUs).
func TestThrottleDoesNotHoldBackVMsTheDeviceDoesNot(t *testing.T) {
	for _, tc := range []struct {
		shares map[string]float64
		want   map[string]float64 // what each VM moves uncapped, on average
	}{
		{map[string]float64{"a": 0.375, "b": 0.375, "c": 0.125, "d": 0.125}, map[string]float64{"a": 30, "b": 30, "c": 10, "d": 10}},
		{map[string]float64{"a": 0.75, "b": 0.25}, map[string]float64{"a": 60, "b": 20}},
		{map[string]float64{"a": 0.5, "b": 0.5}, map[string]float64{"a": 40, "b": 40}},
	} {
		rng := rand.New(rand.NewPCG(1, 2))
		dev := &readers{bandwidth: 400, cpu: map[string]float64{}}
		th := &agent.Throttle{}
		moved := map[string]float64{}
		var sum, asked float64
		for tick := range 300 {
			for _, vm := range slices.Sorted(maps.Keys(tc.want)) {
				dev.cpu[vm] = tc.want[vm] * (0.85 + 0.3*rng.Float64())
			}
			caps := th.Plan(tc.shares, moved, nil)
			moved = dev.serve(caps)
			uncapped := dev.serve(nil)
			if tick >= 100 {
				for vm, m := range moved {
					sum += m
					asked += uncapped[vm]
				}
			}
		}
		if sum < 0.9*asked {
			t.Errorf("%v: the VMs moved %.0f %% of what they would uncapped (estimate %.1f of a device of 400)",
				tc.shares, 100*sum/asked, th.Capacity)
		}
		t.Logf("%v: moved %.0f %% of what they would uncapped; estimate %.1f", tc.shares, 100*sum/asked, th.Capacity)
	}
}

// readers is a device read by guests that each read a chunk, then compute
// on it, then read the next (a map task reading its split, a TCG guest
// whose reads cost its CPU): each VM's rate is 1/(1/io + 1/cpu), io the
// rate its reads get (its cap, or the device) and cpu what its CPU would
// process uncapped. Capping such a VM slows it even below the cap — the
// rate it moves depends on the cap, so it never quite fills it.
type readers struct {
	bandwidth float64
	cpu       map[string]float64
}

func (d *readers) serve(caps map[string]float64) map[string]float64 {
	want := map[string]float64{}
	for vm, w := range d.cpu {
		io := d.bandwidth
		if c, ok := caps[vm]; ok {
			io = min(io, c)
		}
		want[vm] = 1 / (1/io + 1/w)
		if w <= 0 || io <= 0 {
			want[vm] = 0
		}
	}
	return (&device{bandwidth: d.bandwidth, demand: want}).serve(nil)
}

// TestThrottleDividesADeviceItsReadersWaitOn: the same readers (each
// computing between its reads) on a device slower than they read together:
// now the device is what holds them, it gives them equal turns, and the
// caps must bind for the split to follow the shares. The loosening that
// lets readers held by their CPUs run free must not keep caps loose here.
// Mutation: loosening whenever no cap is filled, whatever the split, leaves
// the device to divide itself (3:1 → 0.5:0.5).
func TestThrottleDividesADeviceItsReadersWaitOn(t *testing.T) {
	for _, shares := range []map[string]float64{
		{"a": 0.75, "b": 0.25},
		{"a": 0.125, "b": 0.25, "c": 0.625},
	} {
		rng := rand.New(rand.NewPCG(3, 4))
		dev := &readers{bandwidth: 60, cpu: map[string]float64{}}
		th := &agent.Throttle{}
		moved := map[string]float64{}
		sum, total := map[string]float64{}, 0.0
		for tick := range 200 {
			for _, vm := range slices.Sorted(maps.Keys(shares)) {
				dev.cpu[vm] = 200 * (0.85 + 0.3*rng.Float64())
			}
			moved = dev.serve(th.Plan(shares, moved, nil))
			if tick >= 100 {
				for vm, m := range moved {
					sum[vm] += m
					total += m
				}
			}
		}
		for vm := range sum {
			sum[vm] /= total
		}
		partsNear(t, fmt.Sprintf("%v", shares), sum, shares, 0.05)
		t.Logf("%v: moved %s, %.1f per tick of the device's 60; estimate %.1f", shares, fmtShares(sum), total/100, th.Capacity)
	}
}

// requests is a device read in whole requests of size MB: a VM moves in a
// tick the requests its cap's leaky bucket lets through (what the cap
// allowed since its last request, carried over), at most its own demand
// (what its CPU share lets it read and compute), and the device is far
// faster than all of them together.
type requests struct {
	size   float64
	demand map[string]float64
	credit map[string]float64
}

func (d *requests) serve(caps map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for vm, w := range d.demand {
		allow := w
		if c, ok := caps[vm]; ok {
			d.credit[vm] = min(d.credit[vm]+c, 2*max(c, d.size)) // a bucket of two ticks' worth
			allow = min(w, d.credit[vm])
		}
		n := math.Floor(allow / d.size)
		out[vm] = n * d.size
		if _, ok := caps[vm]; ok {
			d.credit[vm] -= out[vm]
		}
	}
	return out
}

// TestThrottleRisesForVMsThatReadInWholeRequests: VMs held by caps well
// below what they would read (CPU-bound jobs reading 1 MiB at a time, at
// 1.4 and 3.6 MB/s caps on a disk that reads hundreds) move 1, 1, 2
// requests a tick; within 25 ticks the estimate has risen until the caps
// no longer hold them. Mutation: judging by each tick alone whether a VM
// fills its cap — it seems to want no more than it moved, is capped near
// that, and the estimate creeps (23 MB/s after 25 ticks, the VMs moving
// half of what they would; make e2e, run 30: 10 MB/s for 13 s).
func TestThrottleRisesForVMsThatReadInWholeRequests(t *testing.T) {
	shares := map[string]float64{"a": 0.14, "b": 0.14, "c": 0.36, "d": 0.36}
	dev := &requests{size: 1.05, demand: map[string]float64{"a": 6.3, "b": 6.3, "c": 16.8, "d": 16.8}, credit: map[string]float64{}}
	th := &agent.Throttle{Capacity: 10} // as after run 30's top-up
	moved := map[string]float64{"a": 1.05, "b": 1.05, "c": 3.15, "d": 3.15}
	var sum, want float64
	for tick := range 35 {
		moved = dev.serve(th.Plan(shares, moved, nil))
		if tick >= 25 {
			for vm, m := range moved {
				sum += m
				want += dev.demand[vm]
			}
		}
	}
	if sum < 0.9*want {
		t.Errorf("after 25 ticks the VMs moved %.0f %% of what they would read uncapped (estimate %.1f MB/s)", 100*sum/want, th.Capacity)
	}
	t.Logf("after 25 ticks: moved %.0f %% of what they would read uncapped; estimate %.1f MB/s", 100*sum/want, th.Capacity)
}

// bucketDevice is a device limited by a token bucket, as nbdkit's rate
// filter limits its server: rate a tick, and what it did not deliver
// banked up to burst (nbdkit's burstiness, two seconds: four of the
// agent's ticks), so a tick after an underused one delivers more than
// the rate. It gives the VMs that want it equal turns, and what each
// moved is counted in whole requests of size (what is left over shows
// in a later tick), as QEMU's counters count a guest's reads.
type bucketDevice struct {
	rate, burst, size float64
	tokens            float64
	demand            map[string]float64
	partial           map[string]float64
}

func (d *bucketDevice) serve(caps map[string]float64) map[string]float64 {
	dev := device{bandwidth: d.rate + d.tokens, demand: d.demand}
	served := dev.serve(caps)
	used := 0.0
	for _, m := range served {
		used += m
	}
	d.tokens = min(d.burst, d.rate+d.tokens-used)
	out := map[string]float64{}
	for vm, m := range served {
		d.partial[vm] += m
		out[vm] = math.Floor(d.partial[vm]/d.size) * d.size
		d.partial[vm] -= out[vm]
	}
	return out
}

// TestThrottleHoldsOnABurstyRateLimitedDevice: on a device whose limit is
// a token bucket (nbdkit's rate filter, 64 MiB/s: what it did not deliver
// while the caps held the VMs below it, it delivers on top of the rate
// later, so raising the estimate seems to pay until the bucket is empty),
// 1:2:5 holds within 0.05 in every 10-tick window from 10 ticks (5 s)
// after each event — a third VM arriving, each VM's pause and resume, a
// bid change — and the estimate does not run away: in each such window it
// is above 1.25 times the rate in at most one tick (a raise that found the
// limit is undone the next). Mutations: without the drop to what was
// moved when the device divides itself, the estimate comes down a Probe a
// tick from a burst and the high bidder gets 0.56 after its resume and
// 0.55 after the bid change; with the learner as it was (raises from the
// window's best tick, a burst included, and an overshoot judged after the
// loosening), 0.51 after its resume (stop 40's nbdkit trace: 0.475).
func TestThrottleHoldsOnABurstyRateLimitedDevice(t *testing.T) {
	shares := map[string]float64{"a": 0.125, "b": 0.25, "c": 0.625}
	dev := &bucketDevice{rate: 64, burst: 4 * 64, size: 2, demand: map[string]float64{"a": 200, "b": 200, "c": 0}, partial: map[string]float64{}}
	dev.tokens = dev.burst
	th := &agent.Throttle{}
	moved := map[string]float64{}
	step := func() map[string]float64 {
		moved = dev.serve(th.Plan(shares, moved, nil))
		return moved
	}
	window := func(what string) {
		sum, total, over, most := map[string]float64{}, 0.0, 0, 0.0
		for range 10 {
			for vm, m := range step() {
				sum[vm] += m
				total += m
			}
			if th.Capacity > 1.25*dev.rate {
				over++
			}
			most = max(most, th.Capacity)
		}
		for vm := range sum {
			sum[vm] /= total
		}
		partsNear(t, fmt.Sprintf("%s (estimate up to %.1f)", what, most), sum, shares, 0.05)
		if over > 1 {
			t.Errorf("%s: the estimate was above 1.25 times the device's %.0f in %d of 10 ticks (up to %.1f)", what, dev.rate, over, most)
		}
	}
	settle := func(what string) {
		for range 10 {
			step()
		}
		for w := range 4 {
			window(fmt.Sprintf("%s, window %d", what, w+1))
		}
	}
	for range 30 {
		step()
	}
	dev.demand["c"] = 200
	settle("c arrives")
	for _, vm := range []string{"c", "a", "b", "c"} {
		dev.demand[vm] = 0
		for range 20 {
			step()
		}
		dev.demand[vm] = 200
		settle(vm + "'s resume")
	}
	shares = map[string]float64{"a": 0.625, "b": 0.25, "c": 0.125}
	settle("bids 5:2:1")
}
