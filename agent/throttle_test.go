package agent_test

import (
	"math"
	"testing"

	"github.com/mrmarket/mrmarket/agent"
)

// TestThrottlesFollowTheSharesOfTheBusy: caps divide the device by the
// shares among the busy VMs; an idle VM keeps a tenth of its part, and
// what it leaves goes to the busy ones; with none busy each has its part.
func TestThrottlesFollowTheSharesOfTheBusy(t *testing.T) {
	shares := map[string]float64{"a": 0.125, "b": 0.25, "c": 0.625, "none": 0}
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	all := agent.Throttles(800, shares, map[string]bool{"a": true, "b": true, "c": true})
	if !near(all["a"], 100) || !near(all["b"], 200) || !near(all["c"], 500) || all["none"] != 0 {
		t.Fatalf("all busy, 1:2:5 of 800: %v", all)
	}
	idleC := agent.Throttles(800, shares, map[string]bool{"a": true, "b": true})
	// c keeps 0.1 × 500 = 50; a and b share 750 as 1:2.
	if !near(idleC["c"], 50) || !near(idleC["a"], 250) || !near(idleC["b"], 500) {
		t.Fatalf("c idle: %v", idleC)
	}
	quiet := agent.Throttles(800, shares, nil)
	if !near(quiet["a"], 100) || !near(quiet["c"], 500) {
		t.Fatalf("none busy: %v", quiet)
	}
	if got := agent.Throttles(0, shares, nil); len(got) != 0 {
		t.Fatalf("no capacity: %v", got)
	}
}

// TestBandwidthSettlesAtTheDevice: a device delivering 1,000 MB/s, caps
// starting from a guess of 500: the estimate rises while the caps bind,
// and then stays within a probe of what the device delivers; when the
// VMs want less the estimate follows them down, and back up when they
// want more again.
func TestBandwidthSettlesAtTheDevice(t *testing.T) {
	const device = 1000.0
	b := agent.Bandwidth{Value: 500}
	want := math.Inf(1) // what the busy VMs would move without caps
	tick := func() float64 {
		allowed := b.Value
		return b.Observe(min(allowed, device, want), allowed)
	}
	for range 10 {
		tick()
	}
	for i := range 20 {
		if v := tick(); v < device || v > 1.1*device+1e-9 {
			t.Fatalf("tick %d at the device: estimate %.1f, want in [1000, 1100]", i, v)
		}
	}
	want = 300
	tick()
	if v := tick(); v > 330+1e-9 {
		t.Fatalf("VMs moving 300: estimate %.1f", v)
	}
	want = math.Inf(1)
	n := 0
	for b.Value < device && n < 20 {
		tick()
		n++
	}
	if n >= 20 {
		t.Fatalf("the estimate did not come back to the device in 20 ticks: %.1f", b.Value)
	}
	t.Logf("back at the device in %d ticks", n)
	if v := b.Observe(0, 0); v != b.Value {
		t.Fatal("an idle tick changed the estimate")
	}
}
