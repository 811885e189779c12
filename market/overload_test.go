package market_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

// TestCancelAndPlansAnsweredWhileSpendsFlood: sixteen users each keep four
// spends in flight, more than the broker's workers (those that wait past
// their time are answered unavailable, as overload allows); meanwhile alice lists
// her plans and cancels one, again and again, each asked again while it is
// answered unavailable, as the CLI asks. New spends wait behind every
// other request (service.Endpoint.Bulk), so her plans and cancels are
// answered in well under the time the flood's spends take, measured in the
// same run.
func TestCancelAndPlansAnsweredWhileSpendsFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("a flood of spends")
	}
	users := []string{"alice"}
	for i := range 16 {
		users = append(users, fmt.Sprintf("u%d", i))
	}
	layout, err := market.Layout(2, len(users), users)
	if err != nil {
		t.Fatal(err)
	}
	_, _, bc, brc := startAt(t, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), market.Config{TickPeriod: 5 * time.Second, Hosts: layout})
	ctx := context.Background()
	vmOf := map[string]string{}
	for _, h := range layout {
		for _, v := range h.VMs {
			vmOf[v.Owner] = v.ID
		}
	}
	for _, u := range users {
		if _, err := bc.Grant(ctx, &wire.GrantRequest{ID: "g-" + u, User: u, Amount: credits(t, "1000")}); err != nil {
			t.Fatal(err)
		}
	}
	spend := func(user, id string) (time.Duration, error) {
		start := time.Now()
		_, err := brc.Spend(ctx, &wire.SpendRequest{ID: id, User: user, Budget: credits(t, "0.01"), Duration: wire.Duration(time.Hour),
			VMs: []string{vmOf[user]}, Strategy: wire.StrategyFair})
		return time.Since(start), err
	}
	var (
		mu     sync.Mutex
		spends []time.Duration
		failed error
		shed   int
		wg     sync.WaitGroup
	)
	done := make(chan struct{})
	for _, u := range users[1:] {
		for k := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-done:
						return
					default:
					}
					took, err := spend(u, fmt.Sprintf("flood-%d-%d", k, i))
					mu.Lock()
					spends = append(spends, took)
					switch {
					case errors.Is(err, wire.ErrUnavailable):
						shed++ // overload: asked again by a client
					case err != nil && failed == nil:
						failed = err
					}
					mu.Unlock()
				}
			})
		}
	}
	var plans, cancels []time.Duration
	for i := range 20 {
		id := fmt.Sprintf("mine-%d", i)
		if _, err := spend("alice", id); err != nil {
			t.Fatal(err)
		}
		plans = append(plans, answered(t, func(ctx context.Context) error {
			_, err := brc.Plans(ctx, &wire.PlansRequest{User: "alice"})
			return err
		}))
		var p wire.Plan
		cancels = append(cancels, answered(t, func(ctx context.Context) (err error) {
			p, err = brc.Cancel(ctx, &wire.CancelRequest{Plan: id, User: "alice"})
			return err
		}))
		if p.Status != wire.PlanCancelled {
			t.Fatalf("cancel while spends flood: %s", p.Status)
		}
	}
	close(done)
	wg.Wait()
	if failed != nil {
		t.Fatalf("a spend of the flood: %v", failed)
	}
	median := func(d []time.Duration) time.Duration { d = slices.Clone(d); slices.Sort(d); return d[len(d)/2] }
	t.Logf("medians while %d spends flowed (%d unavailable): spend %v, plans %v, cancel %v", len(spends), shed, median(spends), median(plans), median(cancels))
	if median(plans) > median(spends)/2 || median(cancels) > median(spends)/2 {
		t.Fatalf("plans (median %v) and cancel (%v) wait as long as the flood's spends (%v)", median(plans), median(cancels), median(spends))
	}
}
