//go:build !race

package attack

// forgedFloodRate is the forgeries a second of 17-forged-flood: the flood
// that had alice refused busy when forgeries were queued before they were
// checked.
const forgedFloodRate = 5_000
