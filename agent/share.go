package agent

import "slices"

// FloorShare is the share of the host a VM without a funded bid keeps, so
// that it can still boot and answer; all floors together never exceed
// maxFloorTotal of the host.
const FloorShare = 0.0002

// maxFloorTotal caps the host fraction the floors of unfunded VMs take.
const maxFloorTotal = 0.1

// Shares divides a host among vms by the share rule: a VM with a positive
// rate gets q_i = r_i / Σ_j r_j of what the floors leave, a VM without one
// gets only the floor, and with no positive rate at all every VM gets an
// equal share. The shares sum to 1 (for a non-empty vms).
func Shares(vms []string, rates map[string]float64) map[string]float64 {
	shares := make(map[string]float64, len(vms))
	if len(vms) == 0 {
		return shares
	}
	var total float64
	unfunded := 0
	for _, vm := range vms {
		if r := rates[vm]; r > 0 {
			total += r
		} else {
			unfunded++
		}
	}
	if total <= 0 {
		for _, vm := range vms {
			shares[vm] = 1 / float64(len(vms))
		}
		return shares
	}
	floor := 0.0
	if unfunded > 0 {
		floor = min(FloorShare, maxFloorTotal/float64(unfunded))
	}
	rest := 1 - floor*float64(unfunded)
	for _, vm := range vms {
		if r := rates[vm]; r > 0 {
			shares[vm] = rest * r / total
		} else {
			shares[vm] = floor
		}
	}
	return shares
}

// sumInOrder sums f over m in its keys' order. Float addition is not
// associative and Go's map order changes from run to run: summed in it,
// the same inputs gave sums an ulp or so apart, which a simulation then
// carried into its results, so that one seed did not always give the same
// numbers. f returns 0 for what it leaves out.
func sumInOrder[V any](m map[string]V, f func(k string, v V) float64) float64 {
	var room [16]string // a host's VMs, most often: no slice on the heap
	var sum float64
	for _, k := range sortedKeys(m, room[:0]) {
		sum += f(k, m[k])
	}
	return sum
}

// sortedKeys appends m's keys to buf, sorted.
func sortedKeys[V any](m map[string]V, buf []string) []string {
	for k := range m {
		buf = append(buf, k)
	}
	slices.Sort(buf)
	return buf
}
