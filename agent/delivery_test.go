package agent_test

import (
	"context"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestShortfallsAreReported: the agent checks that it delivers the shares
// it sets. alice's VM a and bob's b bid 3:1 on one CPU. While a wants 0.2
// of the CPU and b the rest, and then while both want all of it (a gets
// 0.75, b 0.25), nothing is short. Then processes outside the market
// take half the CPU: each VM waits for more and gets half its entitlement,
// and 5 s on, each is reported short — in its state, once in the log, and
// in the shortfall metric, which shows it from the first tick. Once the
// CPU is free again they are delivered again. Then both read the disk at
// the same rate, an equal turn each: with the disk's bandwidth to spare
// neither is short (they want no more of it); on a disk they fill, a,
// paying three times b's rate, is short of it (0.5 of 0.75), and b is not.
// Mutations: a check that never reports, or reports at once, or counts a
// VM that wants no more (of the CPU, or of a disk with room to spare),
// fails this test.
func TestShortfallsAreReported(t *testing.T) {
	h := newHost(t, agent.VM{ID: "a", Owner: "alice"}, agent.VM{ID: "b", Owner: "bob"})
	records := make(chan slog.Record, 256)
	reg := prometheus.NewRegistry()
	a := must(agent.New(agent.Config{Host: "host-1", Enforcer: h.sim, Capturer: h.bank, Now: func() time.Time { return *h.clock },
		Metrics: obs.NewMetrics(reg), Logger: slog.New(recordHandler{records})}))
	h.fund(t, "alice", "ha", 3*3600)
	h.fund(t, "bob", "hb", 3600)
	if _, err := a.SetBids(context.Background(), bidReq(hourBid("a", "alice", "pa", "ha", 3*3600), hourBid("b", "bob", "pb", "hb", 3600))); err != nil {
		t.Fatal(err)
	}
	shortfall := func(vm, resource string) float64 {
		return metricValue(t, reg, "mrm_vm_share_shortfall", map[string]string{"host": "host-1", "vm": vm, "resource": resource})
	}
	sec := 0
	tick := func() wire.HostState {
		t.Helper()
		sec++
		*h.clock = t0.Add(time.Duration(sec) * time.Second)
		st, err := a.Tick(context.Background(), *h.clock)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	warned := func() map[string]int {
		out := map[string]int{}
		for _, r := range drain(records) {
			if r.Message == "agent: share not delivered: the VM wanted more than it got, and got less than its share" {
				r.Attrs(func(at slog.Attr) bool {
					if at.Key == "vm" {
						out[at.Value.String()]++
					}
					return true
				})
			}
		}
		return out
	}

	for _, aWants := range []float64{0.2, 1} { // a wants less than its share, then all of the CPU
		h.sim.SetDemand("a", aWants)
		for range 8 {
			for _, v := range tick().VMs {
				if len(v.Short) > 0 {
					t.Fatalf("second %d, a wanting %.1f CPU: %s short while it gets its share or wants no more: %+v", sec, aWants, v.VM, v.Short)
				}
			}
		}
	}
	h.sim.SetForeignLoad(0.5)
	start := sec + 1
	for range 8 {
		st := tick()
		for _, v := range st.VMs {
			reported := sec-start >= 5
			if (len(v.Short) > 0) != reported {
				t.Fatalf("second %d, %d s into the outside load: %s short %+v", sec, sec-start, v.VM, v.Short)
			}
			if got := shortfall(v.VM, wire.ResourceCPU); math.Abs(got-v.Share/2) > 0.02 {
				t.Errorf("second %d: %s's shortfall metric %.3f, want half its share %.3f", sec, v.VM, got, v.Share/2)
			}
			if reported && (v.Short[0].Resource != wire.ResourceCPU || math.Abs(v.Short[0].Delivered-v.Share/2) > 0.02 ||
				math.Abs(v.Short[0].Entitled-v.Share) > 0.02 || !v.Short[0].Since.Equal(t0.Add(time.Duration(start)*time.Second))) {
				t.Errorf("second %d: %s short %+v, want the CPU, half of %.3f since second %d", sec, v.VM, v.Short[0], v.Share, start)
			}
		}
	}
	if w := warned(); w["a"] != 1 || w["b"] != 1 {
		t.Errorf("warnings of a shortfall: %v, want one for each VM", w)
	}
	h.sim.SetForeignLoad(0)
	for range 3 {
		for _, v := range tick().VMs {
			if len(v.Short) > 0 || shortfall(v.VM, wire.ResourceCPU) != 0 {
				t.Fatalf("second %d, the CPU free again: %s short %+v", sec, v.VM, v.Short)
			}
		}
	}

	// The disk: an equal turn each, though a pays three times b's rate —
	// on a disk with room to spare (they want no more of it), then on
	// one they fill.
	h.sim.SetDemand("a", 0)
	h.sim.SetDemand("b", 0)
	h.sim.SetIOCapacity(agent.IOUse{Disk: 200})
	h.sim.SetIO("a", agent.IOUse{Disk: 30})
	h.sim.SetIO("b", agent.IOUse{Disk: 30})
	for range 8 {
		for _, v := range tick().VMs {
			if len(v.Short) > 0 {
				t.Fatalf("second %d, 60 MB/s moved of a 200 MB/s disk: %s short %+v", sec, v.VM, v.Short)
			}
		}
	}
	h.sim.SetIOCapacity(agent.IOUse{Disk: 60})
	start = sec + 1
	for range 7 {
		st := tick()
		if sec-start < 5 {
			continue
		}
		short := map[string][]wire.Shortfall{}
		for _, v := range st.VMs {
			short[v.VM] = v.Short
		}
		if len(short["b"]) != 0 || len(short["a"]) != 1 || short["a"][0].Resource != wire.ResourceDisk ||
			math.Abs(short["a"][0].Delivered-0.5) > 0.01 || math.Abs(short["a"][0].Entitled-0.75) > 0.01 {
			t.Fatalf("second %d, an equal turn of the disk each: short %v, want a's disk alone, 0.5 of 0.75", sec, short)
		}
	}
	if w := warned(); w["a"] != 1 || w["b"] != 0 {
		t.Errorf("warnings of a disk shortfall: %v, want one for a", w)
	}
}
