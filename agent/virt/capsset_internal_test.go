package virt

import (
	"slices"
	"testing"
)

// TestCapsToSetCatchesDriftThatAddsUp: each cap is re-set only on a 10 %
// move, so that QEMU's bucket is not restarted every tick, but moves
// below that which together leave the caps in force more than driftAt of
// the device away from the plan are set. Mutation: judging each VM's move
// alone (10 % each) leaves caps of 8.8 / 17.5 / 43.9 in force where the
// plan is 8 / 16 / 40, and the high bidder held to 0.59 of its 0.625 on a
// saturated device (the nbdkit test at 1:2:5).
func TestCapsToSetCatchesDriftThatAddsUp(t *testing.T) {
	const disk = "disk"
	set := map[string]map[string]float64{"k1": {disk: 8.8}, "k2": {disk: 17.5}, "k3": {disk: 43.9}}
	for _, tc := range []struct {
		what    string
		planned map[string]map[string]float64
		want    []string
	}{
		{"every cap 9 % down: 9 % of the device", map[string]map[string]float64{"k1": {disk: 8}, "k2": {disk: 16}, "k3": {disk: 40}}, []string{"k1", "k2", "k3"}},
		{"one small cap 9 % down: 1 % of the device", map[string]map[string]float64{"k1": {disk: 8}, "k2": {disk: 17.5}, "k3": {disk: 43.9}}, nil},
		{"one cap 12 % down", map[string]map[string]float64{"k1": {disk: 8.8}, "k2": {disk: 15.4}, "k3": {disk: 43.9}}, []string{"k2"}},
		{"a cap lifted", map[string]map[string]float64{"k1": {disk: 8.8}, "k2": {disk: 17.5}, "k3": {disk: 0}}, []string{"k3"}},
		{"a VM not set before", map[string]map[string]float64{"k1": {disk: 8.8}, "k2": {disk: 17.5}, "k3": {disk: 43.9}, "k4": {disk: 5}}, []string{"k4"}},
		{"nothing moved", map[string]map[string]float64{"k1": {disk: 8.8}, "k2": {disk: 17.5}, "k3": {disk: 43.9}}, nil},
	} {
		if got := capsToSet(set, tc.planned); !slices.Equal(got, tc.want) {
			t.Errorf("%s: set %v, want %v", tc.what, got, tc.want)
		}
	}
}
