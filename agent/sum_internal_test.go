package agent

import "testing"

// TestSumInOrderIsTheSameEveryTime: values whose float sum depends on the
// order they are added in (1e16 + 1 is 1e16) sum to the same, in their
// keys' order, however the map is iterated. Mutation: summing in the
// map's order gives 0, 2 or others from one call to the next.
func TestSumInOrderIsTheSameEveryTime(t *testing.T) {
	m := map[string]float64{"a": 1e16, "b": 1, "c": -1e16, "d": 1, "e": 0.5, "f": 1e16, "g": -1e16}
	// In key order: ((((((1e16 + 1) − 1e16) + 1) + 0.5) + 1e16) − 1e16).
	want := 0.0
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		want += m[k]
	}
	for range 200 {
		if got := sumInOrder(m, func(_ string, v float64) float64 { return v }); got != want {
			t.Fatalf("sum %v, in key order %v", got, want)
		}
	}
}
