package bank_test

import (
	"testing"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/money"
)

// TestCaptureLeg: a leg moves what its cumulative adds over the total, cut
// to what the hold has left; a replay moves nothing; the leg that takes the
// last of a hold reports it exhausted, and one asking more afterwards is
// refused.
func TestCaptureLeg(t *testing.T) {
	for _, c := range []struct {
		name                    string
		total, cumulative, left money.Micro
		want                    bank.LegCapture
	}{
		{"adds", 100, 150, 1000, bank.LegCapture{Applied: 50, Total: 150}},
		{"replay", 150, 150, 1000, bank.LegCapture{Total: 150}},
		{"older leg", 150, 120, 1000, bank.LegCapture{Total: 150}},
		{"cut to the hold", 100, 500, 30, bank.LegCapture{Applied: 30, Total: 130, Exhausted: true}},
		{"takes exactly the rest", 100, 130, 30, bank.LegCapture{Applied: 30, Total: 130, Exhausted: true}},
		{"exhausted, asks more", 130, 200, 0, bank.LegCapture{Total: 130, Exhausted: true, Refused: true}},
		{"exhausted, replay", 130, 130, 0, bank.LegCapture{Total: 130, Exhausted: true}},
	} {
		if got := bank.CaptureLeg(c.total, c.cumulative, c.left); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
