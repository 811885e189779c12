//go:build race

package bank

// raceEnabled: the race detector slows serving some tenfold.
const raceEnabled = true
