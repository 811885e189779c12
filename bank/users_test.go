package bank_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestMoneyOnlyForRegisteredUsers: a bank that knows its principals grants,
// pays income and transfers only to registered users; a name nobody holds
// (or an agent's) is refused not_found and nothing changes.
func TestMoneyOnlyForRegisteredUsers(t *testing.T) {
	eachStore(t, func(t *testing.T, target string) {
		ctx := context.Background()
		admin, alice, agent := newSigner(t), newSigner(t), newSigner(t)
		b, err := bank.Open(target, bank.Options{AdminKey: admin.Public()})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		for _, p := range []struct {
			s          *wire.Signer
			name, role string
		}{{alice, "alice", wire.RoleUser}, {agent, "host-1", wire.RoleAgent}} {
			if _, err := b.AddPrincipal(ctx, &wire.PrincipalRequest{Key: p.s.Public(), Name: p.name, Role: p.role,
				Cert: wire.SealPrincipal(admin, p.s.Public(), p.name, p.role)}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.Grant(ctx, &wire.GrantRequest{ID: "g1", User: "alice", Amount: 100}); err != nil {
			t.Fatal(err)
		}
		before := mustLedger(t, b)
		for name, err := range map[string]error{
			"grant to zed":      grantErr(b, "zed"),
			"grant to an agent": grantErr(b, "host-1"),
			"transfer to zed": func() error {
				_, err := b.Transfer(ctx, &wire.TransferRequest{ID: "t1", From: "alice", To: "zed", Amount: 1})
				return err
			}(),
			"income for zed":    incomeErr(b, "zed"),
			"income for host-1": incomeErr(b, "host-1"),
			"transfer to host-1": func() error {
				_, err := b.Transfer(ctx, &wire.TransferRequest{ID: "t2", From: "alice", To: "host-1", Amount: 1})
				return err
			}(),
		} {
			if !errors.Is(err, bank.ErrUnknownUser) || !errors.Is(err, wire.ErrNotFound) {
				t.Errorf("%s: %v, want %v", name, err, bank.ErrUnknownUser)
			}
		}
		if after := mustLedger(t, b); !sameJSON(t, before, after) {
			t.Fatalf("refused grants changed the ledger: %+v → %+v", before, after)
		}
		if sch, err := b.SetIncome(ctx, &wire.IncomeSetRequest{User: wire.FairShareUser, Amount: 10, Every: wire.Duration(time.Hour)}); err != nil || len(sch.Schedules) != 1 {
			t.Fatalf("fair-share income: %+v %v", sch, err)
		}
	})
}

func grantErr(b *bank.Bank, user string) error {
	_, err := b.Grant(context.Background(), &wire.GrantRequest{ID: "g-" + user, User: user, Amount: 5})
	return err
}

func incomeErr(b *bank.Bank, user string) error {
	_, err := b.SetIncome(context.Background(), &wire.IncomeSetRequest{User: user, Amount: 5, Every: wire.Duration(time.Hour)})
	return err
}
