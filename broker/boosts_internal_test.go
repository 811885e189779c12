package broker

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// TestBoostSumFollowsThePlans changes plans at random — new ones, status
// changes, other strategies, other boosts, forged ones — and checks after
// each change that the store's sum is the counted boosts of its plans as
// they are now, summed exactly, and that a store given the same plans in
// another order has the same sum to the bit. Mutation: set not taking a
// plan's former boost out of the sum (a cancelled plan would still shrink
// everyone's boost; broker/testdata/bottleneck.txt fails on it too).
func TestBoostSumFollowsThePlans(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	statuses := []string{planStarting, wire.PlanRunning, wire.PlanDone, wire.PlanCancelled, wire.PlanFailed}
	names := []string{wire.StrategyBottleneck, wire.StrategyFair, wire.StrategyStage, "no-such-strategy"}
	boosts := []float64{0, 0.1, 0.3, 0.45, 0.9, 0.999, 1, -0.5, math.NaN(), math.Inf(1), 1e-300}
	s := newMemStore()
	revs := map[string]uint64{}
	for step := range 3000 {
		id := fmt.Sprintf("p%d", rng.IntN(60))
		rec := &planRecord{Plan: wire.Plan{ID: id, User: "u", Status: statuses[rng.IntN(len(statuses))],
			Strategy: names[rng.IntN(len(names))], Boost: boosts[rng.IntN(len(boosts))]}}
		var err error
		if rev, ok := revs[id]; ok {
			revs[id], err = s.update(ctx, rec, rev)
		} else {
			revs[id], err = s.create(ctx, rec)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got, want := s.boostTotal(), exactBoostSum(s); got != want {
			t.Fatalf("step %d: the store's sum is %v, its plans' %v", step, got, want)
		}
	}
	// The same plans, stored in reverse order of their ids.
	again := newMemStore()
	all := s.list()
	for i := len(all) - 1; i >= 0; i-- {
		if _, err := again.create(ctx, all[i].rec); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := s.boostTotal(), again.boostTotal(); a != b {
		t.Fatalf("the same plans in another order sum to %v, not %v", b, a)
	}
}

// exactBoostSum sums the counted boosts of s's plans from scratch.
func exactBoostSum(s *memStore) float64 {
	sum := new(big.Float).SetPrec(boostSumPrec)
	s.each(func(rec *planRecord, _ uint64) {
		sum.Add(sum, new(big.Float).SetFloat64(countedBoost(&rec.Plan)))
	})
	f, _ := sum.Float64()
	return f
}

// BenchmarkBoostView is what a spend of a bottleneck plan reads of the
// others' boosts, with n bottleneck plans running: "sum" the store's sum
// and the scale (boostScale), "scan" what it did before — every running
// plan's boost read and capped (the former cappedBoosts), O(plans) per
// spend.
func BenchmarkBoostView(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{100, 1_000, 10_000} {
		s := newMemStore()
		for i := range n {
			if _, err := s.create(ctx, &planRecord{Plan: wire.Plan{ID: fmt.Sprintf("p%d", i), User: "u", Status: wire.PlanRunning,
				Strategy: wire.StrategyBottleneck, Boost: 0.5}}); err != nil {
				b.Fatal(err)
			}
		}
		br := &Broker{store: s, cfg: Config{MaxBoost: 0.9}}
		p := &wire.Plan{ID: "p0", User: "u", Status: wire.PlanRunning, Strategy: wire.StrategyBottleneck, Boost: 0.5}
		var sink float64
		b.Run(fmt.Sprintf("plans=%d/path=sum", n), func(b *testing.B) {
			for b.Loop() {
				sink += countedBoost(p) * br.boostScale()
			}
		})
		b.Run(fmt.Sprintf("plans=%d/path=scan", n), func(b *testing.B) {
			for b.Loop() {
				sink += scannedBoosts(s, br.cfg.MaxBoost)[refOf(p)]
			}
		})
		if sink == 0 {
			b.Fatal("no boost read")
		}
	}
}

// scannedBoosts is the former cappedBoosts: every running plan's boost
// whose strategy reads one, capped together.
func scannedBoosts(s planStore, limit float64) map[planRef]float64 {
	var refs []planRef
	var boosts []float64
	s.each(func(rec *planRecord, _ uint64) {
		p := &rec.Plan
		if p.Status != wire.PlanRunning && p.Status != planStarting {
			return
		}
		if st, err := strategies.ByName(p.Strategy); err == nil && st.Reads()&strategies.ReadsBoost != 0 {
			refs = append(refs, refOf(p))
			boosts = append(boosts, p.Boost)
		}
	})
	capped := strategies.CapBoosts(boosts, limit)
	out := make(map[planRef]float64, len(refs))
	for i, ref := range refs {
		out[ref] = capped[i]
	}
	return out
}
