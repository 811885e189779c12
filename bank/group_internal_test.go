package bank

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/pgtest"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestCaptureGroupAnswersAsAlone: batches committed as one group are
// answered, and leave the ledger, exactly as the same batches committed one
// by one in the group's order — a leg refused, a replay of a batch of the
// same group, a hold exhausted by an earlier batch of another host — and a
// batch that fails as a whole (its provider account would overflow) fails
// alone while the rest of its group commits.
func TestCaptureGroupAnswersAsAlone(t *testing.T) {
	stores := map[string]func(t *testing.T) (string, string){
		"sqlite": func(t *testing.T) (string, string) {
			return "sqlite:" + filepath.Join(t.TempDir(), "grouped.db"), "sqlite:" + filepath.Join(t.TempDir(), "alone.db")
		},
		"postgres": func(t *testing.T) (string, string) {
			c := pgtest.Start(t)
			return c.DSN(t, "grouped"), c.DSN(t, "alone")
		},
	}
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			groupedAt, aloneAt := stores[kind](t)
			grouped, alone := groupBank(t, groupedAt), groupBank(t, aloneAt)
			leg := func(id, hold, vm string, cum money.Micro) wire.CaptureLeg {
				return wire.CaptureLeg{ID: id, Hold: hold, VM: vm, Cumulative: cum}
			}
			a := &wire.CaptureBatch{Host: "host-1", Tick: 1, Legs: []wire.CaptureLeg{leg("a1", "h0", "vm1", 10), leg("a2", "h0", "vm2", 10)}}
			first := []*wire.CaptureBatch{
				a,
				{Host: "host-2", Tick: 1, Legs: []wire.CaptureLeg{leg("b1", "nope", "vm1", 5), leg("b2", "h1", "vm1", 3)}},
				a, // a retry that joined the group of its first try
				{Host: "host-3", Tick: 1, Legs: []wire.CaptureLeg{leg("d1", "h1", "vm1", 4), leg("d2", "h0", "vm1", 1)}},
			}
			second := []*wire.CaptureBatch{
				{Host: "host-1", Tick: 2, Legs: []wire.CaptureLeg{leg("a3", "h0", "vm1", 12)}},
				{Host: "host-4", Tick: 1, Legs: []wire.CaptureLeg{leg("e1", "h0", "vm1", 7)}},
				{Host: "host-5", Tick: 1, Legs: []wire.CaptureLeg{leg("f1", "h0", "vm1", 1), leg("f2", "h1", "vm1", 9)}},
			}
			ctx := context.Background()
			calls := func(batches []*wire.CaptureBatch) []*captureCall {
				var cs []*captureCall
				for _, batch := range batches {
					cs = append(cs, &captureCall{ctx: ctx, batch: batch, done: make(chan struct{})})
				}
				return cs
			}
			answer := func(rep wire.CaptureReply, err error) string { return fmt.Sprintf("%+v %v", rep, err) }
			var want []string
			for _, batch := range append(first, second...) {
				want = append(want, answer(alone.CaptureAlone(ctx, batch)))
			}
			reps, err := grouped.commitCaptureTx(ctx, calls(first))
			if err != nil {
				t.Fatalf("the first group, in one transaction: %v", err)
			}
			var got []string
			for _, rep := range reps {
				got = append(got, answer(rep, nil))
			}
			group := calls(second)
			grouped.commitGroup(group)
			for _, c := range group {
				<-c.done
				got = append(got, answer(c.rep, c.err))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("batch %d:\n grouped %s\n   alone %s", i, got[i], want[i])
				}
			}
			if !reflect.DeepEqual(ledger(t, grouped), ledger(t, alone)) {
				t.Errorf("ledgers differ:\n grouped %+v\n   alone %+v", ledger(t, grouped), ledger(t, alone))
			}
		})
	}
}

// groupBank is a bank where u0 holds h0 (100 µ-credits), u1 holds h1 (5),
// and host-4's provider account is 3 below the most an account may hold.
func groupBank(t *testing.T, target string) *Bank {
	t.Helper()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b, err := Open(target, Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	for u, amount := range []money.Micro{100, 5} {
		user := fmt.Sprintf("u%d", u)
		if _, err := b.Grant(ctx, &wire.GrantRequest{ID: "g-" + user, User: user, Amount: 1000}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Hold(ctx, &wire.HoldRequest{ID: fmt.Sprintf("h%d", u), User: user, Amount: amount, Expires: t0.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.st.run(ctx, func(t tx) error {
		_, err := t.exec(ctx, `INSERT INTO accounts (id, kind, balance, created) VALUES (?, ?, ?, 0)`,
			ProviderAccount("host-4"), wire.AccountProvider, int64(maxBalance-3))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return b
}

func ledger(t *testing.T, b *Bank) wire.LedgerReply {
	t.Helper()
	l, err := b.Ledger(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return l
}
