//go:build race

package attack

// floodDistinct is how many distinct requests the flood signs: under the
// race detector a signature costs a millisecond, so the flood sends each of
// fewer requests several times (the rest are replays, as costly to refuse).
const floodDistinct = 2_000
