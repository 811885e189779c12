package natsauth_test

import (
	"fmt"
	"testing"

	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// BenchmarkReloadUsers: what adding a principal costs the embedded server
// (Users regenerated, ReloadOptions) with 1,000 agents connected: the
// server re-authorizes every connection on a reload.
func BenchmarkReloadUsers(b *testing.B) {
	s := natstest.SecureServer(b, tables())
	hosts := make([]string, 1000)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("host-%d", i)
	}
	for _, signer := range s.AddMany(b, wire.RoleAgent, hosts...) {
		if _, err := s.ConnectAs(b, signer); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		s.Add(b, wire.RoleUser, fmt.Sprintf("u%d", i))
	}
}
