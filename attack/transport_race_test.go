//go:build race

package attack

// forgedFloodRate is the forgeries a second of 17-forged-flood: the race
// detector makes a signature check many times dearer, so the flood is a
// tenth of the rate without it (what the service can check, not what the
// detector can).
const forgedFloodRate = 500
