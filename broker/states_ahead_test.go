package broker_test

import (
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestStateAheadDoesNotShadowLaterOnes: host-1's own key seals a state
// 110 s ahead (inside the signing window), claiming a time 110 s ahead and
// a price of 10^12; the broker takes it as sealed on arrival, and the
// agent's next real state, sealed after it, replaces it at once instead of
// being ignored for 110 s.
func TestStateAheadDoesNotShadowLaterOnes(t *testing.T) {
	w := newStateWorld(t)
	now := time.Now()
	ahead := *w.agents["host-1"]
	ahead.Now = func() time.Time { return time.Now().Add(110 * time.Second) }
	w.publish(t, &ahead, hostState("host-1", now.Add(110*time.Second), 1e12, "vm-1"))
	w.price(t, "host-1", 1e12)
	w.waitCount(t, "state_ahead", 1)
	real := time.Now()
	w.publish(t, w.agents["host-1"], hostState("host-1", real, 0.5, "vm-1"))
	w.price(t, "host-1", 0.5)
	if p, err := w.b.Price(&wire.PriceRequest{Host: "host-1"}); err != nil || !p.Hosts[0].Updated.Equal(real) {
		t.Fatalf("host-1 after its real state: %+v %v", p, err)
	}
}
