package dashboard

import (
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// A VM its agent found short of its share carries a "short" badge in the
// VMs section: the resource, what it got of what its share entitles it
// to, and for how long.
func TestShortVMsAreMarked(t *testing.T) {
	at := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	s := Snapshot{At: at, VMs: wire.VMsReply{VMs: []wire.HostVM{
		{Host: "host-1", Updated: at, VMState: wire.VMState{VM: "a1", Owner: "alice", Share: 0.75,
			Short: []wire.Shortfall{{Resource: wire.ResourceDisk, Entitled: 0.75, Delivered: 0.5, Since: at.Add(-27 * time.Second)}}}},
		{Host: "host-1", Updated: at, VMState: wire.VMState{VM: "b1", Owner: "alice", Share: 0.25}}}}}
	vms := string(renderSections(s, &history{window: time.Hour, period: 10 * time.Second}, nil)["vms"])
	if n := strings.Count(vms, "short: disk 50.0% of 75.0% for 27s"); n != 1 {
		t.Fatalf("the VMs section marks %d short disk shares, want a1's:\n%s", n, vms)
	}
}
