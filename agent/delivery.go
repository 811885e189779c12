package agent

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// The agent checks that it delivers the shares it sets (see the package
// doc, "Delivered shares"): a VM that wanted more of a resource than it
// got, and got less than its part by more than shortfallBar for
// shortfallAfter, is short, and says so.
const (
	shortfallBar   = 0.05
	shortfallAfter = 5 * time.Second
)

// took is what one VM took of one resource in a tick: its part of the
// resource, the part its share entitles it to, and whether it wanted
// more than it took.
type took struct {
	delivered, entitled float64
	wanted              bool
}

// shortfall is a VM's part of a resource delivered short of its
// entitlement, since when, and whether it has been reported.
type shortfall struct {
	since               time.Time
	entitled, delivered float64
	reported            bool
}

// cpuTook is each VM's CPU in a tick, filled into out (empty): ran is the
// CPUs it used, entitled its entitlement (CPUs), waited the CPUs' worth
// its vCPUs waited for a host CPU (negative: unknown). It wanted more when
// it waited half a CPU or more, as for idleness.
func cpuTook(out map[string]took, capacity float64, ran, entitled, waited map[string]float64) map[string]took {
	for vm, r := range ran {
		out[vm] = took{delivered: r / capacity, entitled: entitled[vm] / capacity, wanted: waited[vm] >= starvedWait}
	}
	return out
}

// ioTook is each VM's part of one device in a tick, among the VMs that
// moved data on it (moved, MB/s): its part of what they moved against its
// share's part of theirs. A VM wanted more when it filled its cap (caps,
// MB/s; none where the resource is not throttled) or, on a device about
// full (the VMs moved bindAt of capacity, MB/s, or more), moved at least
// an equal turn of it, which a device that is the bottleneck gives each
// reader whatever its cap. (On a device with room to spare, VMs that move
// alike are held by something else, their CPUs: they want no more of the
// device.) A lone VM has the device to itself: nothing to compare.
func ioTook(shares, moved, caps map[string]float64, capacity float64) map[string]took {
	total := sumInOrder(moved, func(_ string, m float64) float64 { return max(m, 0) })
	var movers []string
	for vm, m := range moved {
		if total > 0 && m > idleAt*total {
			movers = append(movers, vm)
		}
	}
	slices.Sort(movers)
	qsum := 0.0
	for _, vm := range movers {
		qsum += shares[vm]
	}
	if len(movers) < 2 || qsum <= 0 {
		return nil
	}
	moverTotal := 0.0
	for _, vm := range movers {
		moverTotal += moved[vm]
	}
	turn := math.Inf(1)
	if capacity > 0 && total >= bindAt*capacity {
		turn = bindAt * moverTotal / float64(len(movers))
	}
	out := make(map[string]took, len(movers))
	for _, vm := range movers {
		m := moved[vm]
		c, capped := caps[vm]
		out[vm] = took{delivered: m / moverTotal, entitled: shares[vm] / qsum,
			wanted: capped && c > 0 && m >= bindAt*c || m >= turn}
	}
	return out
}

// checkDelivery updates each VM's shortfall on resource from what the VMs
// took this tick at now, and logs a shortfall once it has lasted
// shortfallAfter and once it ends; under mu.
func (a *Agent) checkDelivery(now time.Time, resource string, tick map[string]took) {
	for vm, t := range tick {
		key := [2]string{vm, resource}
		s := a.short[key]
		if !t.wanted || t.entitled-t.delivered <= shortfallBar {
			a.endShortfall(key, now)
			continue
		}
		if s == nil {
			s = &shortfall{since: now}
			a.short[key] = s
		}
		s.entitled, s.delivered = t.entitled, t.delivered
		if !s.reported && now.Sub(s.since) >= shortfallAfter {
			s.reported = true
			a.cfg.Logger.Warn("agent: share not delivered: the VM wanted more than it got, and got less than its share",
				"host", a.cfg.Host, "vm", vm, "resource", resource, "entitled", round3(t.entitled), "delivered", round3(t.delivered),
				"for", now.Sub(s.since).Round(time.Second).String())
		}
	}
	// A VM that took nothing of the resource this tick is not short of it.
	for key := range a.short {
		if _, ok := tick[key[0]]; key[1] == resource && !ok {
			a.endShortfall(key, now)
		}
	}
}

// endShortfall ends key's (vm, resource) shortfall at now, if it has one,
// logging the end of one that was reported; under mu.
func (a *Agent) endShortfall(key [2]string, now time.Time) {
	s := a.short[key]
	if s == nil {
		return
	}
	if s.reported {
		a.cfg.Logger.Info("agent: share delivered again", "host", a.cfg.Host, "vm", key[0], "resource", key[1],
			"short_for", now.Sub(s.since).Round(time.Second).String())
	}
	delete(a.short, key)
}

// shortfalls are vm's reported shortfalls, by resource, for its state.
func (a *Agent) shortfalls(vm string) []wire.Shortfall {
	var out []wire.Shortfall
	for key, s := range a.short {
		if key[0] == vm && s.reported {
			out = append(out, wire.Shortfall{Resource: key[1], Entitled: s.entitled, Delivered: s.delivered, Since: s.since})
		}
	}
	slices.SortFunc(out, func(x, y wire.Shortfall) int { return strings.Compare(x.Resource, y.Resource) })
	return out
}

// shortBy is the shortfall the metric shows for vm's resource now: its
// entitled part less its delivered part while it lasts (reported or
// not), 0 when it gets its share or did not want more.
func (a *Agent) shortBy(vm, resource string) float64 {
	if s := a.short[[2]string{vm, resource}]; s != nil {
		return s.entitled - s.delivered
	}
	return 0
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

// governedIO are the I/O resources whose shares the enforcer delivers
// (disk; net, either direction): all of them where it does not say.
func governedIO(e Enforcer) []string {
	r, ok := e.(ModeReporter)
	if !ok {
		return []string{wire.ResourceDisk, wire.ResourceNet}
	}
	var out []string
	for _, m := range r.Modes() {
		res := m.Resource
		if res == wire.ResourceNetIn || res == wire.ResourceNetOut {
			res = wire.ResourceNet
		}
		if m.Mode != wire.ModeNone && (res == wire.ResourceDisk || res == wire.ResourceNet) && !slices.Contains(out, res) {
			out = append(out, res)
		}
	}
	return out
}

// capsOf are the VMs' caps on resource (MB/s): a VM's net cap is its
// caps into and out of it together, as the meter counts its traffic.
func (a *Agent) capsOf(resource string) map[string]float64 {
	if len(a.caps) == 0 {
		return nil // no throttle: read as no caps, without a map a tick
	}
	out := map[string]float64{}
	for vm, c := range a.caps {
		switch resource {
		case wire.ResourceNet:
			in, okIn := c[wire.ResourceNetIn]
			o, okOut := c[wire.ResourceNetOut]
			if n, ok := c[wire.ResourceNet]; ok {
				out[vm] = n
			} else if okIn && okOut {
				out[vm] = in + o
			}
		default:
			if x, ok := c[resource]; ok {
				out[vm] = x
			}
		}
	}
	return out
}
