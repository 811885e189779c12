package strategies

import (
	"fmt"
	"math"
	"math/big"
	"sort"

	"github.com/mrmarket/mrmarket/internal/money"
)

// WeightSplit divides total by weights exactly (Sandholm and Lai, Eqs. 8 and 9):
// part i is total·w_i/Σw rounded down, and the micro-credits rounding left
// over go, one each, to the largest remainders (ties to the earlier part).
// The parts sum to total; each is within one micro-credit of its exact
// value. The products are computed in big rationals, so no weight is lost
// to float rounding.
func WeightSplit(total money.Micro, weights []float64) ([]money.Micro, error) {
	if len(weights) == 0 || total < 0 {
		return nil, ErrWeights
	}
	sum := new(big.Rat)
	ws := make([]*big.Rat, len(weights))
	for i, w := range weights {
		if w < 0 || math.IsNaN(w) || math.IsInf(w, 0) {
			return nil, fmt.Errorf("%w: weight %d is %v", ErrWeights, i, w)
		}
		ws[i] = new(big.Rat).SetFloat64(w)
		sum.Add(sum, ws[i])
	}
	if sum.Sign() == 0 {
		return nil, ErrWeights
	}
	parts := make([]money.Micro, len(weights))
	rems := make([]*big.Rat, len(weights))
	var given money.Micro
	t := new(big.Rat).SetInt64(int64(total))
	for i := range ws {
		exact := new(big.Rat).Mul(t, ws[i])
		exact.Quo(exact, sum)
		q := new(big.Int).Quo(exact.Num(), exact.Denom())
		parts[i] = money.Micro(q.Int64())
		given += parts[i]
		rems[i] = new(big.Rat).Sub(exact, new(big.Rat).SetInt(q))
	}
	order := make([]int, len(parts))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return rems[order[a]].Cmp(rems[order[b]]) > 0 })
	for k := 0; given < total; k++ {
		parts[order[k%len(order)]]++
		given++
	}
	return parts, nil
}
