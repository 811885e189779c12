package daemon_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/daemon"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/stop"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestDaemonsShareOneLifecycle: the three daemons built on one stopper run
// their loops as its tasks, the broker hears the agent's host, and one
// Stop ends every loop and closes every connection.
func TestDaemonsShareOneLifecycle(t *testing.T) {
	ctx := context.Background()
	ns := natstest.Server(t)
	s := stop.New()
	defer s.Stop()
	var conns []*nats.Conn
	natstest.Assets(t, natstest.Connect(t, ns)) // the admin's part: the daemons only open them
	env := daemon.Env{Stopper: s, AssetsWait: 10 * time.Second, Connect: func(name string, _ *signing.Signer) (*nats.Conn, error) {
		nc, err := nats.Connect(ns.ClientURL(), nats.Name(name))
		if err == nil {
			conns = append(conns, nc)
		}
		return nc, err
	}}
	signer := func() *signing.Signer {
		k, err := signing.NewUserSigner()
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	bankKey, brokerKey, agentKey := signer(), signer(), signer()

	b, err := daemon.OpenBank(daemon.BankConfig{Env: env, Store: filepath.Join(t.TempDir(), "bank.db"), Signer: bankKey, Tick: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		key        *signing.Signer
		role, name string
	}{{bankKey, wire.RoleBank, "bank"}, {brokerKey, wire.RoleBroker, "broker"}, {agentKey, wire.RoleAgent, "host-1"}} {
		if _, err := b.AddPrincipal(ctx, &wire.PrincipalRequest{Key: p.key.Public(), Name: p.name, Role: p.role}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Serve(ctx, bankKey); err != nil {
		t.Fatal(err)
	}
	br, err := daemon.StartBroker(ctx, daemon.BrokerConfig{Env: env, Signer: brokerKey, Tick: 10 * time.Millisecond, Replica: "broker-1"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := daemon.StartAgent(ctx, daemon.AgentConfig{Env: env, Host: "host-1", Signer: agentKey, Tick: 10 * time.Millisecond,
		Enforcer: agent.NewSimEnforcer(nil, 1, agent.VM{ID: "vm-1", Owner: "alice"})})
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []func(context.Context) error{b.Run, br.Run, a.Run} {
		if err := run(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Running(); !slices.Equal(got, []string{"agent host-1", "bank", "broker"}) {
		t.Fatalf("tasks %v, want the three loops", got)
	}
	testpoll.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		vms := br.VMs(&wire.VMsRequest{})
		if len(vms.VMs) != 1 || vms.VMs[0].Host != "host-1" {
			return fmt.Errorf("the broker did not hear host-1's agent within 10s: %+v", vms)
		}
		return nil
	})

	s.Stop()
	if got := s.Running(); len(got) != 0 {
		t.Fatalf("tasks still running after Stop: %v", got)
	}
	if len(conns) != 3 {
		t.Fatalf("%d connections, want one per daemon", len(conns))
	}
	for _, nc := range conns {
		if !nc.IsClosed() {
			t.Errorf("connection %s still open after Stop", nc.Opts.Name)
		}
	}
	if err := b.Run(ctx); err == nil {
		t.Error("a loop started after Stop")
	}
}
