package e2e

import (
	"maps"
	"testing"
)

// TestParseSchedWeights: each domain's group entity weight on each CPU,
// in units of a nice-0 task, and nothing of its vCPU and emulator groups
// or of other groups. Mutation: keeping the "qemu-<id>-" prefix in the
// name leaves every domain unmatched.
func TestParseSchedWeights(t *testing.T) {
	raw := `cfs_rq[0]:/machine/qemu-54-e2a1-worker-0.libvirt-qemu/vcpu0
  .se->load.weight               : 1048576
cfs_rq[0]:/machine/qemu-54-e2a1-worker-0.libvirt-qemu
  .load                          : 1048576
  .se->load.weight               : 5914624
cfs_rq[0]:/autogroup-13150
  .se->load.weight               : 702095
cfs_rq[1]:/machine/qemu-54-e2a1-worker-0.libvirt-qemu
  .se->load.weight               : 2956984
cfs_rq[0]:/machine/qemu-56-e2b1-worker-0.libvirt-qemu
  .se->load.weight               : 2086666
`
	want := map[string]string{"e2a1-worker-0": "c0 5.64 c1 2.82", "e2b1-worker-0": "c0 1.99"}
	if got := parseSchedWeights(raw); !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
