package agent

import (
	"maps"
	"math"
	"sort"
	"time"
)

// Throttle is how the agent delivers one resource's shares where the
// device cannot weigh its users (a disk under mq-deadline ignores blkio
// weights, a tap device has no common queue; see agent/virt): each VM gets
// a bandwidth cap, and the caps are re-planned every tick from what each VM
// moved under the last ones, so that
//
//   - VMs that want more than their part divide the device in proportion
//     to their shares (weighted max-min: the caps bind, the device does
//     not choose);
//   - a VM using less than its part is capped a little above what it uses
//     (Headroom), and what it leaves goes to the others — work-conserving
//     by redistribution, one tick late; an idle VM keeps IdleProbe of its
//     part, enough to show it wants the device again;
//   - the device's bandwidth, which the caps divide, is its known speed
//     where one is given (Ceiling), else measured: it is the most the VMs
//     moved together in a contended tick (two VMs or more on the device)
//     over the last Window such ticks — what one VM moves alone (a
//     server's lone burst) is not what the device gives several, and the
//     caps after a pause or a return from idle start from the last
//     contended measurement — never above twice it while the caps bind.
//     While every VM that wants more fills its cap, the device could do
//     more and the estimate rises (by Probe, doubling while it keeps
//     rising). While no VM fills its cap and what they move is divided as
//     the shares divide it (over the last splitTicks contended ticks), the
//     device is not what holds them — it would give them equal turns — and
//     the caps are loosened the same way, up to maxLoose times the most
//     moved: VMs whose reads wait on their own computing (a map task, a
//     TCG guest) move 1/(1/cap + 1/cpu), below any cap, and caps planned
//     from what they move would ratchet them down to a fifth of their
//     speed. Once the split departs from the shares (the device dividing
//     itself) or the caps are filled, a loosened estimate halves each tick
//     back to twice the most moved: within splitTicks + 3 ticks of the
//     device dividing itself the ordinary rules hold again. When none
//     wants more, the estimate is back at the most moved; while a VM that
//     wanted more falls short of its cap, it comes down from there by
//     Probe a tick toward what was moved, so the caps bind even where the
//     VMs' rates depend on each other (TCG guests whose bytes cost the
//     CPUs they share). A raise after which the VMs did not move more
//     together, or a VM that wanted more fell short of its raised cap, is
//     undone (where the VMs' rates depend on each other, the ones filling
//     their caps would take the raise from the others), and so is any
//     estimate under which the device divides itself (a VM that wants
//     more short of its cap while the split departs from the shares):
//     the estimate is then what the VMs moved this tick, the window's
//     best ticks are forgotten, and it does not rise for a while. A
//     device limited by a token bucket (nbdkit's rate filter) delivers
//     what it banked on top of its rate, so a raise seems to pay until
//     the bucket is empty; the tick after, the estimate is back at what
//     the device delivers, and a burst is not remembered as its speed.
//     A VM whose I/O comes in bursts shorter than a tick is not capped
//     at its average; a device that slows down is followed within Window
//     ticks.
//   - a VM its cap held back (pressed: where the device's shaper reports
//     holding its traffic, as tc's HTB does) wants more, whatever it moved:
//     a TCP flow that met its cap's queue backs off (a retransmission
//     timeout of 1, 2, 4 s) and moves less than half an idle VM's probe,
//     and judged by what it moved it would be held at the probe for as
//     long as it kept trying (a shuffle's fetch at 0.02 MB/s on a 2 MB/s
//     link, its user's part a fifth of what the bids gave, make e2e run
//     51). A device that cannot say (QEMU's disk throttle) passes none.
//
// The bound it keeps: while every VM wants more than its part, from 10
// ticks after an event (a VM's pause, resume or arrival, a bid change)
// each 10-tick window divides what was moved within 0.05 of the shares,
// on a device that divides itself evenly whether its limit is steady or
// a token bucket (TestThrottleHoldsOnABurstyRateLimitedDevice,
// TestThrottleResumeAfterALoneBurst), and in each such window the
// estimate is above 1.25 times the device's rate in at most one tick (a
// raise that found the limit, undone the next). What real devices showed
// is in docs/PLATFORM.md.
//
// A Throttle is not safe for concurrent use; the enforcer owns one per
// resource and direction.
type Throttle struct {
	// Capacity is the estimate the caps divide (bytes or MB per second,
	// the unit of the moved rates); 0 until the first I/O is seen, and
	// while 0 nothing is capped.
	Capacity float64
	// Ceiling, when positive, is the device's known bandwidth (a link's
	// speed, as the operator states it): the caps divide it, and nothing
	// is estimated. What the VMs move says little of a link: TCP flows
	// back off below their caps, guests short of CPU move less, a shuffle
	// moves in bursts, and an estimate lowered to what they moved, with
	// caps planned from it, holds them there — tick by tick the caps
	// ratchet down to a trickle (0.01 MB/s on a 2 MB/s link, a word
	// count's shuffle stalled for a minute).
	Ceiling float64

	caps    map[string]float64 // the caps planned last
	allowed float64            // what they divided of the capacity (before noInversion)
	want    map[string]bool    // the VMs that wanted more than their part last
	idle    map[string]bool    // the VMs held to their idle probe last
	recent  []float64          // the totals moved in the last Window ticks
	hold    int                // ticks left without raising after an overshoot
	step    float64            // the next relative raise
	raised  bool               // the last tick raised the estimate
	rose    float64            // by how much (relative)
	last    float64            // the total moved in the last tick
	lately  []contendedTick    // the last splitTicks contended ticks
}

// contendedTick is what each VM moved in a contended tick, under which caps.
type contendedTick struct {
	moved, caps map[string]float64
}

// Tuning of the throttle planner.
const (
	// bindAt is the part of its cap a VM must move for the cap to count as
	// what limited it.
	bindAt = 0.9
	// idleAt is the part of its proportional part below which a VM counts
	// as idle on the device.
	idleAt = 0.02
	// uncappedWant is the part of the capacity a VM must move uncapped
	// (alone on the device the tick before, or new) to count as wanting
	// more: a receiver's ACKs are about 2 % of what it receives, and taken
	// as a want they would halve the sender's part whenever they cross
	// the idle bar (make e2e run 53); a VM that moves less uncapped is
	// capped a Headroom above it, and its cap's shaper says if it holds.
	uncappedWant = 0.05
	// IdleProbe is the part of its proportional part an idle VM keeps.
	IdleProbe = 0.1
	// Headroom is how far above its use a VM using less than its part is
	// capped, so that growing use reaches its cap (and so counts as wanting
	// more) within a tick.
	Headroom = 0.25
	// Probe is the relative step the estimate first rises by; each raise
	// in a row doubles it (up to ×2), so a cold start reaches a fast
	// device in a few ticks while a device at its limit is probed gently.
	Probe = 0.05
	// Window is how many ticks the most moved together is remembered as
	// what the device delivers.
	Window = 30
	// maxProbe bounds the estimate: at most this many times the most the
	// VMs moved together in a contended tick of the window.
	maxProbe = 2
	// maxLoose bounds the estimate while the VMs' split follows their
	// shares and they move less than their caps: a reader that computes
	// between its reads moves 1/(1/cap + 1/cpu), so 90 % of its speed
	// needs a cap of 9 times it.
	maxLoose = 10
	// splitTol is how far a VM's part of what was moved may be from its
	// share's part (relative) before the split counts as not following
	// the shares.
	splitTol = 0.1
	// splitTicks is how many contended ticks the split is judged over: a
	// guest's rate is never steady from one tick to the next.
	splitTicks = 3
	// fullAt is the part of its caps a VM must move on average over
	// splitTicks ticks to count as held by them (fullLately): QEMU's
	// throttle is a leaky bucket, so a VM its cap holds moves all of it on
	// average, whatever whole requests each tick let through.
	fullAt = 0.98
	// holdAfterDrop is how many ticks the estimate does not rise after a
	// raise overshot the device, so a device at its limit is overshot one
	// tick in holdAfterDrop+2, not every other one — and the caps change
	// seldom: each change restarts QEMU's leaky bucket, which lets a
	// request through at once.
	holdAfterDrop = 10
)

// Plan takes the rates each VM moved over the last tick (under the caps
// Plan returned last), the VMs the caps held back in that tick (pressed;
// nil where the device cannot tell) and the shares, and returns the new
// caps: one per VM
// with a positive share, or none while the capacity is unknown or at most
// one VM uses the device (then, when Ceiling is set, each VM is capped at
// the Ceiling). The caps add up to the capacity, or more where a VM
// paying more would otherwise be capped below one paying less
// (noInversion).
func (t *Throttle) Plan(shares, moved map[string]float64, pressed map[string]bool) map[string]float64 {
	total := sumInOrder(moved, func(_ string, m float64) float64 {
		if m > 0 && !math.IsInf(m, 0) {
			return m
		}
		return 0
	})
	qsum := sumInOrder(shares, func(_ string, q float64) float64 {
		if q > 0 {
			return q
		}
		return 0
	})
	if t.Ceiling > 0 {
		t.Capacity = t.Ceiling
	} else if t.Capacity <= 0 {
		if total <= 0 || qsum <= 0 {
			return nil // nothing seen yet: nothing to divide
		}
		t.Capacity = total
	}
	// The device was saturated if the VMs moved about all the caps
	// allowed together: then a VM that wanted more and fell short was
	// held back by the device dividing itself (which, not weighing its
	// users, gives each an equal turn), not by its own demand, and still
	// wants more — only capping the others gives it its part.
	allowed := t.allowed
	saturated := allowed > 0 && total >= bindAt*allowed
	if t.Ceiling <= 0 {
		contended := active(shares, moved, qsum, t.Capacity) >= 2
		split := true
		if contended {
			// (moved is the caller's to reuse; the caps are replaced, not
			// changed, by the next Plan.)
			t.lately = append(t.lately, contendedTick{maps.Clone(moved), t.caps})
			if len(t.lately) > splitTicks {
				t.lately = t.lately[len(t.lately)-splitTicks:]
			}
			sum := map[string]float64{}
			for _, tk := range t.lately {
				for vm, x := range tk.moved {
					if x > 0 && !math.IsInf(x, 0) {
						sum[vm] += x / float64(len(t.lately))
					}
				}
			}
			split = follows(shares, sum, qsum, t.Capacity)
		}
		t.learn(moved, total, saturated, contended, split)
	}
	if qsum <= 0 {
		t.caps, t.want, t.idle, t.allowed = nil, nil, nil, 0
		return nil
	}
	// Each VM's demand: unbounded if it filled its cap (or moved
	// uncapped), its use plus headroom if it used less, a probe if idle.
	demand := make(map[string]float64, len(shares))
	want, idle := map[string]bool{}, map[string]bool{}
	using := active(shares, moved, qsum, t.Capacity)
	// A device that delivered about all it can (the estimate) gives each
	// VM that asks at least an equal turn, whatever its cap: a VM that
	// moved that much may have been held to it by the device and still
	// want more; one that moved less did not ask for more.
	full := using > 0 && total >= bindAt*t.Capacity
	turn := bindAt * total / float64(max(using, 1))
	for vm, q := range shares {
		if q <= 0 {
			continue
		}
		part := t.Capacity * q / qsum
		m := max(moved[vm], 0)
		c, capped := t.caps[vm]
		switch {
		case m < idleAt*part && !(capped && pressed[vm]):
			demand[vm] = IdleProbe * part
			idle[vm] = true
		case !capped && m >= uncappedWant*t.Capacity || capped && m >= bindAt*c || pressed[vm] || t.fullLately(vm) || saturated && t.want[vm] || full && m >= turn || t.idle[vm] && m >= c/2:
			// (A VM waking from idle is taken at its word: its probe
			// is a request or two a tick, too coarse to tell filling
			// it from falling short. One its cap held back wants more
			// whatever it moved.)
			demand[vm] = math.Inf(1)
			want[vm] = true
		default:
			demand[vm] = max(m*(1+Headroom), IdleProbe*part)
		}
	}
	if using <= 1 {
		// One VM using the device has nothing to share it with: no caps,
		// so its bursts are not held to its average (and the device's
		// bandwidth is measured uncapped). Caps return as soon as a
		// second VM moves data — a tick late, as every redistribution.
		t.caps, t.want, t.idle, t.allowed = nil, nil, nil, 0
		if t.Ceiling <= 0 {
			return nil
		}
		// Except at the link's speed, when known: a link that is
		// faster than configured (local taps) would otherwise give a
		// lone VM more than the link the shares divide, and more than
		// its part the moment another VM starts.
		caps := map[string]float64{}
		for vm, q := range shares {
			if q > 0 {
				caps[vm] = t.Ceiling
			}
		}
		return caps
	}
	t.caps, t.want, t.idle = fill(t.Capacity, shares, qsum, demand), want, idle
	// What the device was asked for is what fill divided; what
	// noInversion adds is lent, and if the VMs use it they fill their caps.
	t.allowed = sumInOrder(t.caps, func(_ string, c float64) float64 { return c })
	noInversion(t.caps, shares)
	return t.caps
}

// noInversion raises each VM's cap to the largest cap of the VMs with a
// smaller share: a VM using less than its part is capped near its use, and
// the moment it wants more it must not find a cap below that of a VM
// paying less. The caps then add up to more than the capacity, by what
// the VMs raised leave unused; if they use it, they fill their caps and
// the next tick divides the device by the shares.
func noInversion(caps, shares map[string]float64) {
	vms := make([]string, 0, len(caps))
	for vm := range caps {
		vms = append(vms, vm)
	}
	sort.Slice(vms, func(i, j int) bool {
		if shares[vms[i]] != shares[vms[j]] {
			return shares[vms[i]] < shares[vms[j]]
		}
		return vms[i] < vms[j]
	})
	below, group := 0.0, 0.0 // the largest cap of smaller shares, and of this share so far
	for i, vm := range vms {
		if i > 0 && shares[vm] != shares[vms[i-1]] {
			below = max(below, group)
			group = 0
		}
		group = max(group, caps[vm])
		caps[vm] = max(caps[vm], below)
	}
}

// active counts the VMs with a share that used the device in a tick: that
// moved at least idleAt of their part of capacity. Two or more make the
// tick contended — only then does what they moved together say what the
// device gives its VMs when it is shared.
func active(shares, moved map[string]float64, qsum, capacity float64) int {
	n := 0
	for vm, q := range shares {
		if uses(q, moved[vm], qsum, capacity) {
			n++
		}
	}
	return n
}

// uses reports whether a VM with share q of qsum that moved m used the
// device: at least idleAt of its part of capacity.
func uses(q, m, qsum, capacity float64) bool {
	return q > 0 && m > 0 && m >= idleAt*capacity*q/qsum
}

// follows reports whether what the VMs using the device moved is divided
// about as their shares divide it: no VM is behind its part (among those
// using the device) by more than splitTol while another is ahead of its
// own by as much. A device that divides itself against the shares (equal
// turns, above the caps' sum) shows as one behind and one ahead; VMs held
// back by something the shares also divide (their CPUs) do not.
func follows(shares, moved map[string]float64, qsum, capacity float64) bool {
	var q, m float64
	var room [16]string
	for _, vm := range sortedKeys(shares, room[:0]) { // see sumInOrder
		if s := shares[vm]; uses(s, moved[vm], qsum, capacity) {
			q += s
			m += moved[vm]
		}
	}
	if q <= 0 || m <= 0 {
		return true
	}
	behind, ahead := false, false
	for vm, s := range shares {
		if uses(s, moved[vm], qsum, capacity) {
			r := (moved[vm] / m) / (s / q)
			behind = behind || r < 1-splitTol
			ahead = ahead || r > 1+splitTol
		}
	}
	return !(behind && ahead)
}

// fullLately says whether vm moved, on average over the last splitTicks
// contended ticks, all its caps let through (fullAt): a guest reads in
// requests of a megabyte or so, and at a few MB/s a cap that holds it lets
// 1, 1, 2 requests through a tick. Judged tick by tick, such a VM seemed
// to want no more than it moved and was capped near that; caps totalling
// 10 MB/s held CPU-bound jobs on a disk that reads 200 (make e2e, run 30).
// A VM the device holds back moves less than its cap, tick after tick.
func (t *Throttle) fullLately(vm string) bool {
	sum, n := 0.0, 0
	for _, tick := range t.lately {
		if c := tick.caps[vm]; c > 0 {
			sum, n = sum+max(tick.moved[vm], 0)/c, n+1
		}
	}
	return n > 0 && sum/float64(n) >= fullAt
}

// learn updates the capacity estimate from one tick (see Throttle): the
// VMs that wanted more last tick (and were capped at their part) either
// all filled their caps — the device could do more — or some fell short:
// the estimate is back at the most the device delivered lately, or, when
// it was saturated, at what it delivered this tick. Only contended ticks
// teach it: a VM alone on the device is not capped, and what it moves
// alone (a server's lone burst, a cache) is not what the device gives
// several; the estimate is kept through such ticks, so the caps after a
// pause, a VM's return from idle or a new VM start from the last
// contended measurement. It is never above twice the most moved in a
// contended tick of the window: a raise probes, it does not run away.
func (t *Throttle) learn(moved map[string]float64, total float64, saturated, contended, split bool) {
	if !contended {
		t.raised, t.rose, t.last = false, 0, 0
		return
	}
	if len(t.recent) == 0 {
		// The first contended tick: what was seen before was one VM alone.
		t.Capacity = total
	}
	t.recent = append(t.recent, total)
	if len(t.recent) > Window {
		t.recent = t.recent[len(t.recent)-Window:]
	}
	delivered := 0.0
	for _, x := range t.recent {
		delivered = max(delivered, x)
	}
	if t.hold > 0 {
		t.hold--
	}
	if t.step <= 0 {
		t.step = Probe
	}
	filled, short, bound := 0, 0, false
	for vm, c := range t.caps {
		bound = bound || (c > 0 && moved[vm] >= bindAt*c)
	}
	for vm := range t.want {
		c, m := t.caps[vm], max(moved[vm], 0)
		switch {
		case c <= 0:
		case m >= bindAt*c:
			filled++
		case m >= idleAt*c:
			short++
		}
	}
	// The device divided itself this tick when a VM that wanted more fell
	// short of its cap while what the VMs moved departs from the shares
	// (one behind its part, another ahead): the device delivered all it
	// could, whatever the caps allowed, and that is its speed now.
	dividing := short > 0 && !split
	// Whether the VMs that want more fill their caps over the last
	// splitTicks contended ticks (fullLately), for raising the estimate
	// when some fell short on this tick alone.
	allFull := len(t.want) > 0
	for vm := range t.want {
		allFull = allFull && t.fullLately(vm)
	}
	raised, rose := t.raised, t.rose
	t.raised, t.rose = false, 0
	// A raise pays off when the VMs then move more together; where their
	// rates depend on each other (guests whose bytes cost the CPUs they
	// share) the VMs that fill their caps take the raise from the ones
	// that do not, and the total stays where it was.
	paid := !raised || total >= t.last*(1+rose/2)
	t.last = total
	switch {
	case raised && (short > 0 && !allFull || !paid) || dividing:
		// The raise overshot the device (a VM that wanted more fell short
		// of its raised cap, or the VMs did not move more together), or
		// the device is dividing itself: what they moved is what it
		// delivers now, and the window's best ticks are forgotten — they
		// may have been a burst (a rate limiter's bucket emptying after
		// a pause), and raising from one, or coming down from it a Probe
		// a tick, leaves the device to divide itself for many ticks. The
		// estimate then stays a while (holdAfterDrop).
		t.Capacity = total
		t.recent = append(t.recent[:0], total)
		t.hold = holdAfterDrop
		t.step = Probe
		return
	case split && !bound && len(t.caps) > 0:
		// No VM filled its cap, and what they moved is divided as the
		// shares divide it: the device is not what holds them (it would
		// give them equal turns), something the shares also divide is
		// (their CPUs), or the caps are, below their fill. A VM whose
		// reads wait on its own computing moves less than its cap however
		// loose: 1/(1/cap + 1/cpu), half its speed at a cap of its speed.
		// Caps divide nothing scarce here, so they are loosened; if the
		// device turns out to be the limit, it divides itself against the
		// shares and the estimate comes back down.
		t.Capacity = min(max(t.Capacity, delivered)*(1+t.step), maxLoose*delivered)
		t.step = min(2*t.step, 1)
		return
	case t.Capacity > maxProbe*delivered:
		// Loosened (above), and now the split does not follow the shares
		// or the caps are about filled: back toward what the device
		// delivered, by half each tick, so one uneven tick of VMs held by
		// their CPUs does not undo the loosening and a device that
		// divides itself is held again within a few ticks.
		t.Capacity = max(maxProbe*delivered, t.Capacity/2)
		t.step = Probe
		return
	case (filled > 0 && short == 0 || allFull) && paid:
		if t.hold == 0 {
			t.Capacity = max(t.Capacity, delivered) * (1 + t.step)
			t.rose = t.step
			t.step = min(2*t.step, 1)
			t.raised = true
		}
	default:
		c := delivered
		switch {
		case short > 0 && saturated:
			// The device delivered all it could this tick: that is its
			// speed now, not the best tick of the window (a lucky one
			// would leave the shortfall to the VM with the largest cap).
			c = total
		case short > 0 || (len(t.caps) > 0 && !bound):
			// A VM that wants more is short of its cap, or no cap
			// binds at all: where the VMs' rates depend on each other,
			// the ones that still reach their caps take what the short
			// one leaves, and caps that no one reaches divide nothing.
			// The estimate comes down toward what was moved, by Probe
			// a tick (4 Probe while no cap binds), until the caps bind.
			down := Probe
			if short == 0 {
				// No cap binds: nothing holds the VMs to their parts.
				down = 4 * Probe
			}
			c = min(c, max(total, t.Capacity*(1-down)))
		}
		t.Capacity = c
		t.step = Probe
	}
	t.Capacity = min(t.Capacity, maxProbe*delivered)
}

// fill divides capacity by weighted max-min: no VM gets more than its
// demand, the rest is divided in proportion to the shares among those that
// want more; what no one wants is divided in proportion to the shares, so
// the caps add up to capacity.
func fill(capacity float64, shares map[string]float64, qsum float64, demand map[string]float64) map[string]float64 {
	caps := make(map[string]float64, len(demand))
	vms := make([]string, 0, len(demand))
	for vm := range demand {
		vms = append(vms, vm)
	}
	// By demand per unit of share: those below the water level are
	// satisfied first.
	sort.Slice(vms, func(i, j int) bool {
		a, b := demand[vms[i]]/shares[vms[i]], demand[vms[j]]/shares[vms[j]]
		if a != b {
			return a < b
		}
		return vms[i] < vms[j]
	})
	left, wq := capacity, qsum
	for _, vm := range vms {
		q := shares[vm]
		level := left * q / wq
		caps[vm] = min(demand[vm], level)
		left -= caps[vm]
		wq -= q
	}
	if left > 1e-12*capacity {
		for vm := range caps {
			caps[vm] += left * shares[vm] / qsum
		}
	}
	return caps
}

// ThrottleSet is one Throttle per resource fed from cumulative counters,
// as an enforcer reads them: each Plan turns what every VM moved since the
// last call into rates, and how often its cap held it back into whether
// it was pressed, and plans every resource. A VM is planned for a
// resource from the second reading in a row that has its counter (before
// that, or after a reading without it, its counter is not a rate).
type ThrottleSet struct {
	Plans  map[string]*Throttle // by resource
	before map[string]map[string]float64
	held   map[string]map[string]float64
	at     time.Time
}

// Plan takes each VM's I/O so far by resource (MB) and, where the device
// counts them, the times so far its cap held the VM back (held, by VM and
// resource: tc's overlimits and drops; nil where none is counted), both
// read at now, and the shares, and returns the caps by VM and resource
// (MB/s): none on the first call. A held count that went back (its
// shaping was set up again) counts as held since.
func (s *ThrottleSet) Plan(shares map[string]float64, sofar, held map[string]map[string]float64, now time.Time) map[string]map[string]float64 {
	caps := map[string]map[string]float64{}
	if dt := now.Sub(s.at).Seconds(); s.before != nil && dt > 0 {
		for r, th := range s.Plans {
			moved := map[string]float64{}
			for vm, c := range sofar {
				now, read := c[r]
				before, was := s.before[vm][r]
				if read && was { // a counter read only once is not a rate
					moved[vm] = max(now-before, 0) / dt
				}
			}
			var pressed map[string]bool
			for vm, h := range held {
				now, read := h[r]
				before, was := s.held[vm][r]
				if read && was && (now > before || now < before && now > 0) {
					if pressed == nil {
						pressed = map[string]bool{}
					}
					pressed[vm] = true
				}
			}
			for vm, c := range th.Plan(shares, moved, pressed) {
				if caps[vm] == nil {
					caps[vm] = map[string]float64{}
				}
				caps[vm][r] = c
			}
		}
	}
	s.before, s.held, s.at = sofar, held, now
	return caps
}

// Last is when the counters of the last Plan were read.
func (s *ThrottleSet) Last() time.Time { return s.at }
