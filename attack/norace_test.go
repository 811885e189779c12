//go:build !race

package attack

// floodDistinct is how many distinct requests the flood signs: all of them.
const floodDistinct = floodRequests
