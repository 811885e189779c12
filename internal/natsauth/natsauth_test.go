package natsauth_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/natsauth"
	"github.com/mrmarket/mrmarket/internal/natstest"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

func tables() natsauth.Tables {
	return natsauth.Tables{Bank: bank.Endpoints(nil).List(), Broker: broker.Endpoints(nil).List(), Agent: agent.Endpoints(nil).List()}
}

// world is a secured server with one principal of every role.
func world(t *testing.T) *natstest.Secured {
	t.Helper()
	s := natstest.SecureServer(t, tables())
	s.Add(t, wire.RoleBank, "bank")
	s.Add(t, wire.RoleBroker, "broker")
	s.Add(t, wire.RoleAgent, "host-1")
	s.Add(t, wire.RoleAgent, "host-2")
	s.Add(t, wire.RoleUser, "alice")
	s.Add(t, wire.RoleUser, "bob")
	return s
}

// watched connects as (role, name) with an error handler that collects
// the server's asynchronous errors (permission violations).
func watched(t *testing.T, s *natstest.Secured, role, name string) (*nats.Conn, <-chan error) {
	t.Helper()
	nc := s.Connect(t, role, name)
	errs := make(chan error, 64)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	})
	return nc, errs
}

// refused runs do as (role, name) and waits for the server to refuse it
// with a permission violation naming subject.
func refused(t *testing.T, s *natstest.Secured, role, name, subject string, do func(nc *nats.Conn) error) {
	t.Helper()
	nc, errs := watched(t, s, role, name)
	if err := do(nc); err != nil && !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(err.Error(), "Permissions Violation") {
		t.Fatalf("%s %s on %s: %v", role, name, subject, err)
	}
	_ = nc.Flush()
	testpoll.CheckFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		select {
		case err := <-errs:
			if strings.Contains(err.Error(), "Permissions Violation") && strings.Contains(err.Error(), subject) {
				return nil
			}
			return fmt.Errorf("%s %s: another error: %v", role, name, err)
		default:
		}
		if err := nc.LastError(); err != nil && strings.Contains(err.Error(), "Permissions Violation") && strings.Contains(err.Error(), subject) {
			return nil
		}
		return fmt.Errorf("%s %s on %s: not refused by the server", role, name, subject)
	})
}

// allowed fails when the server reported a permission violation on nc.
func allowed(t *testing.T, nc *nats.Conn, errs <-chan error, what string) {
	t.Helper()
	if err := nc.Flush(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	// A round trip after the flush: a violation would be reported before
	// the PONG of this second flush.
	if err := nc.Flush(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	select {
	case err := <-errs:
		t.Fatalf("%s: %v", what, err)
	default:
	}
	if err := nc.LastError(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func sub(subject string) func(nc *nats.Conn) error {
	return func(nc *nats.Conn) error { _, err := nc.SubscribeSync(subject); return err }
}

func queue(subject, q string) func(nc *nats.Conn) error {
	return func(nc *nats.Conn) error { _, err := nc.QueueSubscribeSync(subject, q); return err }
}

func pub(subject string) func(nc *nats.Conn) error {
	return func(nc *nats.Conn) error { return nc.Publish(subject, []byte("{}")) }
}

func TestNobodyConnectsAnonymously(t *testing.T) {
	s := world(t)
	if nc, err := nats.Connect(s.URL, nats.RootCAs(s.CAFile)); err == nil {
		nc.Close()
		t.Fatal("an anonymous connection was accepted")
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("anonymous connection: want an authorization violation, got %v", err)
	}
	stranger, err := signing.NewUserSigner()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ConnectAs(t, stranger); err == nil {
		t.Fatal("an unregistered key was accepted")
	}
	// A registered key without TLS: the server requires TLS.
	alice := s.Signer(t, wire.RoleUser, "alice")
	if nc, err := natsutil.ConnectWith(s.URL, natsutil.ConnectOptions{Signer: alice}); err == nil {
		nc.Close()
		t.Fatal("a connection that does not verify the server's certificate was accepted")
	}
	if _, err := s.ConnectAs(t, alice); err != nil {
		t.Fatalf("alice: %v", err)
	}
}

func TestPrincipalAddedAtRunTimeConnects(t *testing.T) {
	s := world(t)
	before := s.Server.NumClients()
	held := s.Connect(t, wire.RoleUser, "alice") // a connection across the reload
	carol, err := signing.NewUserSigner()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ConnectAs(t, carol); err == nil {
		t.Fatal("carol connected before she was registered")
	}
	s.AddPrincipal(t, wire.Principal{Key: carol.Public(), Name: "carol", Role: wire.RoleUser})
	nc, err := s.ConnectAs(t, carol)
	if err != nil {
		t.Fatalf("carol, registered at run time: %v", err)
	}
	if !nc.IsConnected() || !held.IsConnected() || s.Server.NumClients() != before+2 {
		t.Fatalf("after the reload: carol %v, alice %v, clients %d (before %d)", nc.Status(), held.Status(), s.Server.NumClients(), before)
	}
}

func TestUserPermissions(t *testing.T) {
	s := world(t)
	bob := s.Signer(t, wire.RoleUser, "bob")
	for _, c := range []struct {
		subject string
		do      func(*nats.Conn) error
	}{
		{">", sub(">")},
		{"mrm.v1.>", sub("mrm.v1.>")},
		{wire.InboxPrefix(bob.Public()) + ".>", sub(wire.InboxPrefix(bob.Public()) + ".>")},
		{"_INBOX.>", sub("_INBOX.>")},
		{wire.BankWhois, queue(wire.BankWhois, wire.QueueBank)},
		{wire.BankCapture, queue(wire.BankCapture, wire.QueueBank)},
		{wire.AllHostStates, sub(wire.AllHostStates)},
		{"$KV.MRM_PLANS.x", pub("$KV.MRM_PLANS.x")},
		{"$JS.API.STREAM.INFO.KV_MRM_PLANS", pub("$JS.API.STREAM.INFO.KV_MRM_PLANS")},
		{"$JS.API.STREAM.DELETE.KV_MRM_PLANS", pub("$JS.API.STREAM.DELETE.KV_MRM_PLANS")},
		{"$JS.API.STREAM.PURGE.MRM_EVENTS", pub("$JS.API.STREAM.PURGE.MRM_EVENTS")},
		{wire.BankGrant, pub(wire.BankGrant)},
		{wire.BankCapture, pub(wire.BankCapture)},
		{wire.HostStateSubject("host-1"), pub(wire.HostStateSubject("host-1"))},
		{wire.AgentBidSubject("host-1"), pub(wire.AgentBidSubject("host-1"))},
		{"_INBOX.x", pub("_INBOX.x")},
		// Every VM's owner and bids: the broker's vms shows a user its own.
		{wire.AgentStateSubject("host-1"), pub(wire.AgentStateSubject("host-1"))},
		{"$JS.API.DIRECT.GET.KV_MRM_HOSTS", pub("$JS.API.DIRECT.GET.KV_MRM_HOSTS")},
		{"$JS.API.CONSUMER.CREATE.MRM_EVENTS", pub("$JS.API.CONSUMER.CREATE.MRM_EVENTS")},
		{"mrm.v1.events.>", sub("mrm.v1.events.>")},
	} {
		refused(t, s, wire.RoleUser, "alice", c.subject, c.do)
	}
}

func TestUserRequestsAndReplies(t *testing.T) {
	s := world(t)
	bankNC, bankErrs := watched(t, s, wire.RoleBank, "bank")
	// The bank serves whois in its queue group and answers through
	// allow_responses.
	sub, err := bankNC.QueueSubscribe(wire.BankBalance, wire.QueueBank, func(m *nats.Msg) { _ = m.Respond([]byte("ok")) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	allowed(t, bankNC, bankErrs, "bank serves balance")
	alice, aliceErrs := watched(t, s, wire.RoleUser, "alice")
	rep, err := alice.Request(wire.BankBalance, []byte("{}"), 5*time.Second)
	if err != nil || string(rep.Data) != "ok" {
		t.Fatalf("alice asks her balance: %v %v", rep, err)
	}
	if !strings.HasPrefix(rep.Subject, wire.InboxPrefix(s.Signer(t, wire.RoleUser, "alice").Public())+".") {
		t.Fatalf("alice's reply came to %s, not her own inbox", rep.Subject)
	}
	allowed(t, alice, aliceErrs, "alice's request")
	allowed(t, bankNC, bankErrs, "bank's reply")
	// A service may answer a request, not publish into anyone's inbox —
	// but the bank, whose answer to a registration follows the reload that
	// forgot the pending responses (its replies are signed instead).
	refused(t, s, wire.RoleBroker, "broker", "_INBOX.", pub(wire.InboxPrefix(s.Signer(t, wire.RoleUser, "alice").Public())+".x"))
	refused(t, s, wire.RoleAgent, "host-1", "_INBOX.", pub(wire.InboxPrefix(s.Signer(t, wire.RoleUser, "alice").Public())+".x"))
}

// assets are the JetStream assets, made by the admin (no service may).
func assets(t *testing.T, s *natstest.Secured) *natsutil.Assets {
	t.Helper()
	a, err := natsutil.EnsureAssets(context.Background(), s.Connect(t, wire.RoleAdmin, "admin"))
	if err != nil {
		t.Fatalf("the admin creates the assets: %v", err)
	}
	return a
}

func TestAgentPermissions(t *testing.T) {
	s := world(t)
	ctx := context.Background()
	assets(t, s)
	nc, errs := watched(t, s, wire.RoleAgent, "host-1")
	assets, err := natsutil.OpenHosts(ctx, nc, 5*time.Second)
	if err != nil {
		t.Fatalf("host-1 opens MRM_HOSTS: %v", err)
	}
	if _, err := assets.Hosts.Put(ctx, "host-1", []byte("{}")); err != nil {
		t.Fatalf("host-1 stores its own state: %v", err)
	}
	if err := nc.Publish(wire.HostStateSubject("host-1"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.SubscribeSync(wire.AgentBidSubject("host-1")); err != nil {
		t.Fatal(err)
	}
	allowed(t, nc, errs, "host-1's own state, key and bids")
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond) // refused: no ack comes
	defer cancel()
	if _, err := assets.Hosts.Put(short, "host-2", []byte("{}")); err == nil {
		t.Fatal("host-1 stored host-2's state")
	}
	for _, c := range []struct {
		subject string
		do      func(*nats.Conn) error
	}{
		{wire.HostStateSubject("host-2"), pub(wire.HostStateSubject("host-2"))},
		{"$KV.MRM_HOSTS.host-2", pub("$KV.MRM_HOSTS.host-2")},
		{wire.AgentBidSubject("host-2"), sub(wire.AgentBidSubject("host-2"))},
		{"mrm.v1.agent.*.bid", sub("mrm.v1.agent.*.bid")},
		{wire.BankCapture, queue(wire.BankCapture, wire.QueueBank)},
		{"$KV.MRM_PLANS.x", pub("$KV.MRM_PLANS.x")},
		{"$JS.API.STREAM.DELETE.KV_MRM_HOSTS", pub("$JS.API.STREAM.DELETE.KV_MRM_HOSTS")},
		{wire.AgentBidSubject("host-2"), pub(wire.AgentBidSubject("host-2"))},
		// Other hosts' VMs, owners and bids: the agent knows its own.
		{wire.AgentStateSubject("host-2"), pub(wire.AgentStateSubject("host-2"))},
		{wire.BrokerVMs, pub(wire.BrokerVMs)},
		{wire.AllHostStates, sub(wire.AllHostStates)},
		{"$JS.API.DIRECT.GET.KV_MRM_HOSTS.$KV.MRM_HOSTS.host-2", pub("$JS.API.DIRECT.GET.KV_MRM_HOSTS.$KV.MRM_HOSTS.host-2")},
		{"$JS.API.CONSUMER.CREATE.MRM_EVENTS", pub("$JS.API.CONSUMER.CREATE.MRM_EVENTS")},
	} {
		refused(t, s, wire.RoleAgent, "host-1", c.subject, c.do)
	}
}

func TestBrokerPermissions(t *testing.T) {
	s := world(t)
	ctx := context.Background()
	assets(t, s)
	agentNC := s.Connect(t, wire.RoleAgent, "host-1")
	hosts, err := natsutil.OpenHosts(ctx, agentNC, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hosts.Hosts.Put(ctx, "host-1", []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	nc, errs := watched(t, s, wire.RoleBroker, "broker")
	assets, err := natsutil.OpenBrokerAssets(ctx, nc, 5*time.Second)
	if err != nil {
		t.Fatalf("the broker opens MRM_PLANS and MRM_NONCES: %v", err)
	}
	if assets.Hosts == nil {
		t.Fatal("the broker does not see MRM_HOSTS")
	}
	// Read the hosts bucket the way catch-up does: list and get.
	keys, err := assets.Hosts.ListKeys(ctx)
	if err != nil {
		t.Fatalf("broker lists MRM_HOSTS: %v", err)
	}
	var n int
	for range keys.Keys() {
		n++
	}
	if e, err := assets.Hosts.Get(ctx, "host-1"); err != nil || n != 1 || string(e.Value()) != `{"v":1}` {
		t.Fatalf("broker reads MRM_HOSTS: %d keys, %v", n, err)
	}
	// Plans: create, update, watch, as the plan store does.
	rev, err := assets.Plans.Create(ctx, "plan.x", []byte("1"))
	if err != nil {
		t.Fatalf("broker writes a plan: %v", err)
	}
	if _, err := assets.Plans.Update(ctx, "plan.x", []byte("2"), rev); err != nil {
		t.Fatal(err)
	}
	w, err := assets.Plans.WatchAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for e := range w.Updates() {
		if e == nil {
			break
		}
	}
	_ = w.Stop()
	if _, err := nc.QueueSubscribeSync(wire.BrokerSpend, wire.QueueBroker); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.SubscribeSync(wire.AllHostStates); err != nil {
		t.Fatal(err)
	}
	allowed(t, nc, errs, "the broker's plans, host states and queue group")
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond) // refused: no answer comes
	defer cancel()
	if _, err := assets.Hosts.Put(short, "host-1", []byte("{}")); err == nil {
		t.Fatal("the broker wrote a host's state")
	}
	js, _ := jetstream.New(nc)
	if err := js.DeleteKeyValue(short, wire.BucketPlans); err == nil {
		t.Fatal("the broker deleted MRM_PLANS")
	}
	for _, c := range []struct {
		subject string
		do      func(*nats.Conn) error
	}{
		{"mrm.v1.bank.>", sub("mrm.v1.bank.>")},
		{wire.BankHold, queue(wire.BankHold, wire.QueueBank)},
		{wire.BrokerSpend, queue(wire.BrokerSpend, "other")},
		{wire.BrokerSpend, sub(wire.BrokerSpend)},
		{"$JS.API.STREAM.PURGE.KV_MRM_PLANS", pub("$JS.API.STREAM.PURGE.KV_MRM_PLANS")},
		{"$JS.API.STREAM.DELETE.KV_MRM_PLANS", pub("$JS.API.STREAM.DELETE.KV_MRM_PLANS")},
		{"$KV.MRM_HOSTS.host-1", pub("$KV.MRM_HOSTS.host-1")},
		{wire.HostStateSubject("host-1"), pub(wire.HostStateSubject("host-1"))},
		{wire.BankGrant, pub(wire.BankGrant)},
	} {
		refused(t, s, wire.RoleBroker, "broker", c.subject, c.do)
	}
}

func TestBankPermissions(t *testing.T) {
	s := world(t)
	nc, errs := watched(t, s, wire.RoleBank, "bank")
	for _, e := range bank.Endpoints(nil).List() {
		if _, err := nc.QueueSubscribeSync(e.Subject, wire.QueueBank); err != nil {
			t.Fatal(err)
		}
	}
	allowed(t, nc, errs, "the bank serves its subjects in mrm-bank")
	for _, c := range []struct {
		subject string
		do      func(*nats.Conn) error
	}{
		{wire.BankGrant, sub(wire.BankGrant)},
		{wire.BrokerSpend, queue(wire.BrokerSpend, wire.QueueBroker)},
		{"$KV.MRM_PLANS.x", pub("$KV.MRM_PLANS.x")},
		{"$JS.API.STREAM.DELETE.MRM_EVENTS", pub("$JS.API.STREAM.DELETE.MRM_EVENTS")},
	} {
		refused(t, s, wire.RoleBank, "bank", c.subject, c.do)
	}
}

func TestAdminAdministers(t *testing.T) {
	s := world(t)
	ctx := context.Background()
	nc, errs := watched(t, s, wire.RoleAdmin, "admin")
	if _, err := natsutil.EnsureAssets(ctx, nc); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.SubscribeSync(">"); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, wire.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctx); err != nil {
		t.Fatalf("admin purges the events stream: %v", err)
	}
	if err := js.DeleteKeyValue(ctx, wire.BucketPlans); err != nil {
		t.Fatalf("admin deletes a bucket: %v", err)
	}
	allowed(t, nc, errs, "admin")
}
