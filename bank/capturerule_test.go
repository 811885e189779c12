package bank_test

import (
	"testing"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/money"
)

// TestCaptureLeg: a leg moves what its cumulative adds over the total, cut
// to what the hold has left; a replay moves nothing; the leg that takes the
// last of a hold reports it exhausted, and one asking more afterwards is
// refused. A bound (a mandate's schedule) cuts it too, saying what it
// withheld, and exhausts nothing.
func TestCaptureLeg(t *testing.T) {
	for _, c := range []struct {
		name                    string
		total, cumulative, left money.Micro
		want                    bank.LegCapture
		bound                   money.Micro
	}{
		{"cut to the bound", 100, 500, 1000, bank.LegCapture{Applied: 50, Total: 150, Cut: 350}, 150},
		{"at the bound already", 150, 500, 1000, bank.LegCapture{Total: 150, Cut: 350}, 150},
		{"bound below the total", 150, 500, 1000, bank.LegCapture{Total: 150, Cut: 350}, 120},
		{"within the bound", 100, 140, 1000, bank.LegCapture{Applied: 40, Total: 140}, 150},
		{"the hold cuts first", 100, 500, 30, bank.LegCapture{Applied: 30, Total: 130, Exhausted: true}, 400},
		{"both cut", 100, 500, 80, bank.LegCapture{Applied: 50, Total: 150, Cut: 30}, 150},
		{"exhausted, bound or not", 130, 200, 0, bank.LegCapture{Total: 130, Exhausted: true, Refused: true}, 130},
		{"adds", 100, 150, 1000, bank.LegCapture{Applied: 50, Total: 150}, 0},
		{"replay", 150, 150, 1000, bank.LegCapture{Total: 150}, 0},
		{"older leg", 150, 120, 1000, bank.LegCapture{Total: 150}, 0},
		{"cut to the hold", 100, 500, 30, bank.LegCapture{Applied: 30, Total: 130, Exhausted: true}, 0},
		{"takes exactly the rest", 100, 130, 30, bank.LegCapture{Applied: 30, Total: 130, Exhausted: true}, 0},
		{"exhausted, asks more", 130, 200, 0, bank.LegCapture{Total: 130, Exhausted: true, Refused: true}, 0},
		{"exhausted, replay", 130, 130, 0, bank.LegCapture{Total: 130, Exhausted: true}, 0},
	} {
		if c.bound == 0 {
			c.bound = bank.NoBound
		}
		if got := bank.CaptureLeg(c.total, c.cumulative, c.left, c.bound); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
