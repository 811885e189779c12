package strategies

import (
	"math"
	"sort"
)

// HostPrice is what best response knows of a host: y, the sum of the other
// users' rates on it, and w, how much the user values a whole host.
type HostPrice struct {
	Host   string
	Price  float64 // y_j ≥ 0
	Weight float64 // w_j ≥ 0
}

// BestResponse spreads a spending rate X over hosts to maximise the user's
// utility Σ_j w_j·x_j/(x_j + y_j) given the others' rates y_j (Sandholm
// and Lai §5.4; Feldman, Lai and Zhang 2005).
//
// Derivation. With the Lagrangian L = Σ w_j x_j/(x_j+y_j) − λ(Σ x_j − X),
// ∂L/∂x_j = w_j y_j/(x_j+y_j)² − λ = 0, so x_j + y_j = sqrt(w_j y_j / λ).
// Summing over the hosts kept, X + Σ y_k = Σ sqrt(w_k y_k)/sqrt(λ), hence
//
//	x_j = sqrt(w_j y_j) / Σ_k sqrt(w_k y_k) · (X + Σ_k y_k) − y_j.
//
// The objective is concave, so this stationary point is the optimum on the
// hosts kept; a host whose x_j comes out ≤ 0 is worth less than its price
// at the margin (KKT: x_j = 0), so it is dropped and the rest recomputed —
// dropping the host with the smallest sqrt(w_j/y_j) first, which is the
// order in which the KKT conditions exclude hosts.
//
// Hosts nobody else pays for (y_j = 0) are the degenerate case: any ε > 0
// buys all of such a host. They get Epsilon of the rate each (if the user
// values them) and the optimisation runs on the rest with what remains.
type BestResponse struct{}

// Epsilon is the share of the rate best response puts on a free host.
const Epsilon = 1e-6

// Name is "best-response".
func (BestResponse) Name() string { return "best-response" }

// Reads the plan's VMs, its hosts' prices and its own rates there.
func (BestResponse) Reads() Reads { return ReadsVMs | ReadsPrices }

// Allocate spreads the rate s.Remaining/s.Left over the plan's hosts
// against the others' rates there (a host's price less the plan's own
// rates on it), each host's part split evenly over the plan's VMs on it.
func (br BestResponse) Allocate(s Snapshot) Decision {
	if !s.spendable() {
		return s.nothing()
	}
	// Each host's price less the plan's own rates there: the others' rates.
	others, perHost := map[string]float64{}, map[string]int{}
	for _, v := range s.VMs {
		if _, ok := others[v.Host]; !ok {
			others[v.Host] = s.Prices[v.Host]
		}
		if r, ok := s.OwnRates[v.Name]; ok {
			others[v.Host] -= r
		}
		perHost[v.Host]++
	}
	hosts := make([]HostPrice, 0, len(others))
	for h, y := range others {
		w := 1.0
		if hw, ok := s.HostWeights[h]; ok {
			w = hw
		}
		hosts = append(hosts, HostPrice{Host: h, Price: max(y, 0), Weight: w})
	}
	sort.Slice(hosts, func(i, j int) bool { return hosts[i].Host < hosts[j].Host })
	x, err := br.Rates(float64(s.Remaining)/s.Left.Seconds(), hosts)
	if err != nil {
		return s.nothing()
	}
	// What remains, split over the VMs by their rates exactly: rounding each
	// VM's budget down left up to a micro-credit a VM unassigned.
	weights := make([]float64, len(s.VMs))
	for i, v := range s.VMs {
		weights[i] = x[v.Host] / float64(perHost[v.Host])
	}
	parts, err := WeightSplit(s.Remaining, weights)
	if err != nil {
		return s.nothing()
	}
	out := make([]Allocation, 0, len(s.VMs))
	for i, v := range s.VMs {
		if parts[i] > 0 {
			out = append(out, Allocation{VM: v.Name, Host: v.Host, Budget: parts[i], Duration: s.Left})
		}
	}
	return Decision{Allocs: out, Stage: s.Stage}
}

// Rates returns x_j for every host (0 for hosts dropped).
func (BestResponse) Rates(rate float64, hosts []HostPrice) (map[string]float64, error) {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return nil, ErrBestResponse
	}
	out := make(map[string]float64, len(hosts))
	var priced []HostPrice
	free := 0
	for _, h := range hosts {
		if h.Price < 0 || h.Weight < 0 || math.IsNaN(h.Price) || math.IsNaN(h.Weight) || math.IsInf(h.Price, 0) || math.IsInf(h.Weight, 0) {
			return nil, ErrBestResponse
		}
		out[h.Host] = 0
		switch {
		case h.Weight == 0:
		case h.Price == 0:
			free++
		default:
			priced = append(priced, h)
		}
	}
	budget := rate
	if free > 0 {
		each := rate * Epsilon
		if len(priced) == 0 {
			each = rate / float64(free)
		}
		for _, h := range hosts {
			if h.Weight > 0 && h.Price == 0 {
				out[h.Host] = each
				budget -= each
			}
		}
	}
	// Most valuable per unit of price first; drop from the end.
	sort.Slice(priced, func(i, j int) bool {
		return priced[i].Weight/priced[i].Price > priced[j].Weight/priced[j].Price
	})
	for k := len(priced); k > 0; k-- {
		kept := priced[:k]
		var sumSqrt, sumY float64
		for _, h := range kept {
			sumSqrt += math.Sqrt(h.Weight * h.Price)
			sumY += h.Price
		}
		last := kept[k-1]
		if math.Sqrt(last.Weight*last.Price)/sumSqrt*(budget+sumY)-last.Price > 0 {
			for _, h := range kept {
				out[h.Host] = math.Sqrt(h.Weight*h.Price)/sumSqrt*(budget+sumY) - h.Price
			}
			return out, nil
		}
	}
	return out, nil
}

// Utility is Σ w_j x_j/(x_j + y_j), the objective best response maximises.
func Utility(x map[string]float64, hosts []HostPrice) float64 {
	var u float64
	for _, h := range hosts {
		if xj := x[h.Host]; xj > 0 {
			u += h.Weight * xj / (xj + h.Price)
		}
	}
	return u
}
