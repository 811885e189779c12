package bank

import "github.com/mrmarket/mrmarket/internal/money"

// LegCapture is what the capture rule decides for one leg.
type LegCapture struct {
	// Applied is what the leg moves from the hold.
	Applied money.Micro
	// Total is the (hold, host, vm) total captured after the leg.
	Total money.Micro
	// Exhausted: nothing is left on the hold after the leg.
	Exhausted bool
	// Refused: the hold was exhausted before the leg and the leg asked for
	// more; the bank answers ErrHoldExhausted and moves nothing.
	Refused bool
	// Cut is what the leg asked that the hold would have paid but bound
	// withheld: not moved now, left for a later leg once it is allowed.
	Cut money.Micro
}

// CaptureLeg is the capture rule, the one place it is written: the bank
// applies it to every leg of a batch and the simulator's ledger charges
// through it. A leg names the cumulative amount it wants captured for
// (hold, host, vm), whose total captured so far is total; it moves only what
// its cumulative adds over that total (so a replayed or reordered leg moves
// nothing twice), cut to left, what the hold has not yet paid, and to
// bound, the most the total may reach now by the hold's mandate (its pace
// and VM share, see terms.go; NoBound for a hold without terms), reporting
// what bound withheld. The hold is exhausted when nothing is left.
// CaptureLeg is pure: the caller reads the total, the hold and its bound,
// and keeps the results.
func CaptureLeg(total, cumulative, left, bound money.Micro) LegCapture {
	left = max(left, 0)
	if left == 0 && cumulative > total {
		return LegCapture{Total: total, Exhausted: true, Refused: true}
	}
	payable := min(max(cumulative-total, 0), left)
	applied := min(payable, max(bound-total, 0))
	return LegCapture{Applied: applied, Total: total + applied, Exhausted: left == applied, Cut: payable - applied}
}
