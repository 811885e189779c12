package bank_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

func TestTransferAndStatement(t *testing.T) { eachStore(t, testTransferAndStatement) }

func testTransferAndStatement(t *testing.T, target string) {
	ctx := context.Background()
	b, clock := openBank(t, target)
	grant(t, b, "g-a", "alice", 100)
	grant(t, b, "g-b", "bob", 10)
	*clock = clock.Add(time.Second)
	req := &wire.TransferRequest{ID: "t1", From: "alice", To: "bob", Amount: 30, Memo: "lunch"}
	if r, err := b.Transfer(ctx, req); err != nil || r.Balance != 70 || r.Replayed {
		t.Fatalf("transfer: %+v %v", r, err)
	}
	if r, err := b.Transfer(ctx, req); err != nil || r.Balance != 70 || !r.Replayed {
		t.Fatalf("replayed transfer: %+v %v", r, err)
	}
	if _, err := b.Transfer(ctx, &wire.TransferRequest{ID: "t1", From: "alice", To: "bob", Amount: 31}); !errors.Is(err, wire.ErrConflict) {
		t.Fatalf("transfer id reused: %v", err)
	}
	*clock = clock.Add(time.Second)
	hold(t, b, "h", "bob", 40, t0.Add(time.Hour))
	st, err := b.Statement(ctx, &wire.StatementRequest{User: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Balance != 0 || len(st.Entries) != 3 {
		t.Fatalf("bob's statement: %+v", st)
	}
	want := map[string]money.Micro{"grant:g-b": 10, "transfer:t1": 30, "hold:h": -40}
	for _, e := range st.Entries {
		if want[e.Transfer] != e.Amount {
			t.Errorf("%s: %s, want %s", e.Transfer, e.Amount, want[e.Transfer])
		}
	}
	if st.Entries[0].Transfer != "hold:h" || st.Entries[0].Counterparty != bank.EscrowAccount {
		t.Errorf("newest first: %+v", st.Entries[0])
	}
	if _, err := b.Statement(ctx, &wire.StatementRequest{Account: "provider:nowhere"}); !errors.Is(err, wire.ErrNotFound) {
		t.Fatalf("statement of an unknown account: %v", err)
	}
	mustLedger(t, b)
}

// TestIncomeOncePerPeriod: income is granted once per period however many
// ticks run, by however many bank instances on the same store.
func TestIncomeOncePerPeriod(t *testing.T) { eachStore(t, testIncomeOncePerPeriod) }

func testIncomeOncePerPeriod(t *testing.T, target string) {
	ctx := context.Background()
	clock := t0
	now := func() time.Time { return clock }
	var banks []*bank.Bank
	for range 2 {
		b, err := bank.Open(target, bank.Options{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		banks = append(banks, b)
	}
	grant(t, banks[0], "g-c", "carol", 1) // carol exists: she shares the fair income
	if _, err := banks[0].SetIncome(ctx, &wire.IncomeSetRequest{User: "alice", Amount: 100, Every: wire.Duration(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := banks[1].SetIncome(ctx, &wire.IncomeSetRequest{User: wire.FairShareUser, Amount: 1001, Every: wire.Duration(24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// Two days and a bit, ticked every 10 minutes by both banks at once.
	for clock = t0; !clock.After(t0.Add(49 * time.Hour)); clock = clock.Add(10 * time.Minute) {
		var wg sync.WaitGroup
		for _, b := range banks {
			wg.Go(func() {
				if _, err := b.Tick(ctx, clock); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	// alice: 50 hourly periods (0…49) of 100. Fair share: 3 days (0, 1, 2)
	// of 1001 split among the users that exist at each payment.
	a, err := banks[0].Balance(ctx, &wire.BalanceRequest{User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := banks[0].Balance(ctx, &wire.BalanceRequest{User: "carol"})
	if err != nil {
		t.Fatal(err)
	}
	l := mustLedger(t, banks[0])
	if l.Granted != 1+50*100+3*1001 {
		t.Fatalf("granted %s, want %d", l.Granted, 1+50*100+3*1001)
	}
	// At the first tick the fair share ("*" sorts first) is paid before
	// alice's first hourly income opens her account: carol gets all of day
	// 0; days 1 and 2 split 1001 as 501 (alice) and 500 (carol).
	if a.Granted != 50*100+2*501 || c.Granted != 1+1001+2*500 {
		t.Fatalf("alice %s, carol %s", a.Granted, c.Granted)
	}
	// Removing a schedule stops it.
	if _, err := banks[0].SetIncome(ctx, &wire.IncomeSetRequest{User: "alice"}); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(3 * time.Hour)
	if _, err := banks[0].Tick(ctx, clock); err != nil {
		t.Fatal(err)
	}
	if l2 := mustLedger(t, banks[0]); l2.Granted != l.Granted {
		t.Fatalf("after removal and a 3h gap within the day: granted %s → %s", l.Granted, l2.Granted)
	}
}

// TestHoldBeneficiaries: only the hosts a hold names may capture from it.
func TestHoldBeneficiaries(t *testing.T) { eachStore(t, testHoldBeneficiaries) }

func testHoldBeneficiaries(t *testing.T, target string) {
	ctx := context.Background()
	b, _ := openBank(t, target)
	grant(t, b, "g", "alice", 100)
	if _, err := b.Hold(ctx, &wire.HoldRequest{ID: "h", User: "alice", Amount: 50, Expires: t0.Add(time.Hour), Hosts: []string{"host-2", "host-1"}}); err != nil {
		t.Fatal(err)
	}
	for host, ok := range map[string]bool{"host-1": true, "host-2": true, "host-3": false} {
		rep, err := b.Capture(ctx, &wire.CaptureBatch{Host: host, Tick: 1, Legs: []wire.CaptureLeg{{ID: "h/" + host + "/v/1", Hold: "h", VM: "v", Cumulative: 5}}})
		if err != nil {
			t.Fatal(err)
		}
		if got := rep.Legs[0].Error == nil; got != ok {
			t.Errorf("%s capturing: %+v", host, rep.Legs[0])
		}
	}
	mustLedger(t, b)
}

func TestExtendHold(t *testing.T) { eachStore(t, testExtendHold) }

func testExtendHold(t *testing.T, target string) {
	ctx := context.Background()
	b, _ := openBank(t, target)
	grant(t, b, "g", "alice", 100)
	hold(t, b, "h", "alice", 10, t0.Add(time.Hour))
	req := &wire.ExtendRequest{ID: "e1", Hold: "h", User: "alice", Amount: 15}
	for range 2 { // the second is a replay
		r, err := b.Extend(ctx, req)
		if err != nil || r.Hold.Amount != 25 || r.Balance != 75 {
			t.Fatalf("extend: %+v %v", r, err)
		}
	}
	if _, err := b.Extend(ctx, &wire.ExtendRequest{ID: "e2", Hold: "h", User: "bob", Amount: 1}); !errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("bob extending alice's hold: %v", err)
	}
	if _, err := b.Extend(ctx, &wire.ExtendRequest{ID: "e3", Hold: "h", User: "alice", Amount: 1000}); !errors.Is(err, wire.ErrInsufficient) {
		t.Fatalf("extend beyond balance: %v", err)
	}
	mustLedger(t, b)
}
