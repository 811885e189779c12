package bank

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestWithConnectTimeout(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"postgres://u@h1:5432/db?sslmode=disable", "postgres://u@h1:5432/db?sslmode=disable"},
		{"postgres://u@h1:5432,h2:5432/db", "postgres://u@h1:5432,h2:5432/db?connect_timeout=2"},
		{"postgresql://u:p,w@h1,h2/db?target_session_attrs=read-write", "postgresql://u:p,w@h1,h2/db?target_session_attrs=read-write&connect_timeout=2"},
		{"postgres://h1,h2/db?connect_timeout=9", "postgres://h1,h2/db?connect_timeout=9"},
		{"postgres://u:a,b@h1/db", "postgres://u:a,b@h1/db"}, // a comma in the password is not a host list
	} {
		if got := withConnectTimeout(c.in); got != c.want {
			t.Errorf("withConnectTimeout(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// A connection lost inside a transaction (here ECONNRESET, as a peer that
// died resets it) is unavailable, so clients retry by id — not handed back
// as if it were the bank's refusal because syscall.Errno has an Is method.
func TestLostConnectionIsUnavailable(t *testing.T) {
	s, err := openStore("sqlite:" + filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.db.Close()
	lost := fmt.Errorf("failed to receive message: %w",
		&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)})
	err = s.run(context.Background(), func(tx) error { return lost })
	if !IsUnavailable(err) {
		t.Fatalf("a lost connection gave %v, want unavailable", err)
	}
	err = s.run(context.Background(), func(tx) error { return ErrInsufficient })
	if IsUnavailable(err) || err != ErrInsufficient {
		t.Fatalf("a refusal gave %v, want it unchanged", err)
	}
}
