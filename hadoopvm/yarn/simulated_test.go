package yarn_test

import (
	"context"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/hadoopvm/sim"
	"github.com/mrmarket/mrmarket/hadoopvm/yarn"
)

// TestMonitorOnASimulatedCluster: the simulator drives the emulator and
// the monitor follows a three-stage workflow through it — the active stage
// and its progress, busy and idle VMs, and each finished stage's profile.
func TestMonitorOnASimulatedCluster(t *testing.T) {
	ctx := context.Background()
	c, m := newCluster(t, "vm1", "vm2", "vm3", "vm4")
	s, err := sim.New(sim.Config{Seed: 3, Start: t0}, []sim.HostSpec{{ID: "h1", Cores: 4}, {ID: "h2", Cores: 4}},
		[]sim.VMSpec{{ID: "vm1", Owner: "alice", Host: "h1", Slots: 2}, {ID: "vm2", Owner: "alice", Host: "h1", Slots: 2},
			{ID: "vm3", Owner: "alice", Host: "h2", Slots: 2}, {ID: "vm4", Owner: "alice", Host: "h2", Slots: 2}})
	if err != nil {
		t.Fatal(err)
	}
	drv := c.Driver()
	s.Observe(drv)
	stages := []sim.JobSpec{
		{ID: "join", Name: "digg:join", User: "alice", VMs: []string{"vm1", "vm2", "vm3", "vm4"}, Maps: 8, Reduces: 2, Map: sim.Dist{Mean: 20}, Reduce: sim.Dist{Mean: 10}},
		{ID: "dist", Name: "digg:dist", User: "alice", VMs: []string{"vm1", "vm2"}, After: []string{"join"}, Maps: 8, Map: sim.Dist{Mean: 40}},
		{ID: "pearson", Name: "digg:pearson", User: "alice", VMs: []string{"vm3", "vm4"}, After: []string{"dist"}, Maps: 4, Map: sim.Dist{Mean: 30}},
	}
	for _, j := range stages {
		if err := s.Submit(j); err != nil {
			t.Fatal(err)
		}
	}
	// join: 8 maps on 8 slots (20 s) + 2 reduces (10 s) = 30 s; dist then
	// runs 8 maps on vm1 and vm2's 4 slots: two waves of 40 s.
	if err := s.RunUntil(t0.Add(50 * time.Second)); err != nil {
		t.Fatal(err)
	}
	snap, err := m.Snapshot(ctx)
	if err != nil || drv.Err() != nil {
		t.Fatal(err, drv.Err())
	}
	w := snap.Workflows[0]
	if w.Name != "digg" || len(w.Stages) != 2 || w.Active != 1 || w.Stages[1].Progress != 0 {
		t.Fatalf("mid-run: %+v", snap.Workflows)
	}
	for _, n := range snap.Nodes {
		busy := n.Node == "vm1" || n.Node == "vm2"
		if n.Idle == busy || busy && n.Running != 2 {
			t.Errorf("mid-run node %+v", n)
		}
	}
	if _, err := s.Run(time.Hour); err != nil {
		t.Fatal(err)
	}
	snap, err = m.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if w := snap.Workflows[0]; len(w.Stages) != 3 || w.Active != 3 {
		t.Fatalf("at the end: %+v", w)
	}
	apps, _ := m.Apps(ctx)
	for _, a := range apps {
		p, err := m.ProfileJob(ctx, yarn.JobID(a.ID))
		if err != nil {
			t.Fatal(err)
		}
		if a.Name == "digg:dist" && (p.Maps != 8 || p.MapAvg != 40) {
			t.Fatalf("dist's profile: %+v", p)
		}
	}
}
