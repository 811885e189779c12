package broker_test

import (
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/obs"
)

// TestGaugesShowAStaleHost: a host whose agent stopped publishing keeps
// its last state, and its age at the broker's clock grows, while a host
// that goes on publishing stays fresh.
func TestGaugesShowAStaleHost(t *testing.T) {
	f := newFixture(t, []string{"host-1", "host-2"}, nil)
	st1, st2 := f.agents["host-1"].State(), f.agents["host-2"].State()
	f.b.Observe(st1)
	f.b.Observe(st2)
	*f.clock = st1.Time.Add(40 * time.Second)
	st2.Time = *f.clock
	f.b.Observe(st2)
	g := f.b.Gauges()
	want := []obs.HostAge{{Host: "host-1", Age: 40 * time.Second}, {Host: "host-2", Age: 0}}
	if len(g.Hosts) != 2 || g.Hosts[0] != want[0] || g.Hosts[1] != want[1] || g.LateJobs != 0 {
		t.Fatalf("gauges %+v, want hosts %+v and no late job", g, want)
	}
}
