package broker

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestBatchesGroupByHostWithinTheirSize: a round's changes go to each host
// in one batch, in the order given, unless their mandates would make the
// batch larger than maxBatchBytes; no change is split or lost. Mutation:
// ignoring the size puts all three large changes to h1 in one batch.
func TestBatchesGroupByHostWithinTheirSize(t *testing.T) {
	change := func(host, plan string, mandateBytes int) bidChange {
		bid := wire.Bid{VM: host + "-vm", Plan: plan}
		if mandateBytes > 0 {
			bid.Mandate = &wire.SignedRequest{Body: []byte(strings.Repeat("x", mandateBytes))}
		}
		return bidChange{host, &wire.BidRequest{Set: []wire.Bid{bid}}}
	}
	big := maxBatchBytes * 3 / 10 // encoded (base64) about 0.4 of a batch: two fit, not three
	changes := []bidChange{
		change("h1", "p1", 0), change("h2", "p1", 0), change("h1", "p2", 0), change("h3", "p2", 0), change("h2", "p3", 0),
		change("h1", "q1", big), change("h1", "q2", big), change("h1", "q3", big),
	}
	got := fmt.Sprint(batches(changes))
	// h1's small changes and two large ones fit; the third starts a batch
	// of its own.
	want := "[[0 2 5 6] [1 4] [3] [7]]"
	if got != want {
		t.Errorf("batches %s, want %s", got, want)
	}
	for _, bs := range batches(changes) {
		size := 0
		for _, i := range bs {
			size += approxBytes(changes[i].req)
		}
		if len(bs) > 1 && size > maxBatchBytes {
			t.Errorf("batch %v of about %d bytes, over %d", bs, size, maxBatchBytes)
		}
	}
}
