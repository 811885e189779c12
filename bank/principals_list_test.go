package bank_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestPrincipalsListedAndHeard: every principal added is heard by
// OnPrincipal after it is stored, and Principals lists them all.
func TestPrincipalsListedAndHeard(t *testing.T) {
	var heard []wire.Principal
	var b *bank.Bank
	b, err := bank.Open(filepath.Join(t.TempDir(), "bank.db"), bank.Options{OnPrincipal: func(p wire.Principal) {
		ps, err := b.Principals(context.Background())
		if err != nil || len(ps) != len(heard)+1 {
			t.Errorf("OnPrincipal(%s) before the principal is listed: %v %v", p.Name, ps, err)
		}
		heard = append(heard, p)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, name := range []string{"alice", "bob"} {
		s, err := signing.NewUserSigner()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.AddPrincipal(context.Background(), &wire.PrincipalRequest{Key: s.Public(), Name: name, Role: wire.RoleUser}); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := b.Principals(context.Background())
	if err != nil || len(ps) != 2 || len(heard) != 2 {
		t.Fatalf("listed %v (%v), heard %v", ps, err, heard)
	}
}
