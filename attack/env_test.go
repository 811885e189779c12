package attack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

// The market every attack runs against: two hosts, each with one VM of
// alice and one of bob, on a virtual clock the tests advance.
var (
	t0    = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	hosts = []market.HostSpec{
		{ID: "host-1", CPUs: 1, VMs: []agent.VM{{ID: "a1", Owner: "alice"}, {ID: "b1", Owner: "bob"}}},
		{ID: "host-2", CPUs: 1, VMs: []agent.VM{{ID: "a2", Owner: "alice"}, {ID: "b2", Owner: "bob"}}},
	}
)

const (
	tick        = 5 * time.Second
	planLength  = 10 * time.Minute
	refuseWait  = 1 * time.Second        // how long a refusal the server sends asynchronously may take
	attackerTTL = 750 * time.Millisecond // an attacker's request that gets no answer
)

func credits(n int64) money.Micro { return money.Micro(n * 1_000_000) }

// env is a running market, its principals' keys and connections, and the
// plans alice (20 credits on a1, a2) and bob (10 on b1, b2) run in it.
type env struct {
	t     testing.TB
	ctx   context.Context
	m     *market.Market
	dir   string
	clock time.Time
	mu    sync.Mutex // guards clock

	admin, alice, bob, broker *signing.Signer
	agents                    map[string]*signing.Signer // by host

	adminNC, aliceNC, bobNC *conn

	alicePlan, bobPlan wire.Plan
	aliceSpend         *nats.Msg // alice's signed spend, as she sent it
}

type setup struct {
	noPlans    bool // grant, but start no plans
	hosts      []market.HostSpec
	users      []string // registered besides the VMs' owners (market.Config.Users)
	agentState bool     // agents keep their bid books in files (a restarted agent charges on)
}

// start starts the market, grants alice and bob 100 credits each and, unless
// s.noPlans, starts their plans.
func start(t *testing.T, s setup) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), dir: t.TempDir(), clock: t0, agents: map[string]*signing.Signer{}}
	hs := s.hosts
	if hs == nil {
		hs = hosts
	}
	m, err := market.Start(e.ctx, market.Config{
		Dir: e.dir, NATSHost: "127.0.0.1", NATSPort: -1, Now: e.now, TickPeriod: tick, Hosts: hs, Users: s.users, AgentState: s.agentState,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	e.m = m
	e.admin = e.key(wire.RoleAdmin, "admin")
	e.broker = e.key(wire.RoleBroker, "broker")
	e.alice = e.key(wire.RoleUser, "alice")
	e.bob = e.key(wire.RoleUser, "bob")
	for _, h := range hs {
		e.agents[h.ID] = e.key(wire.RoleAgent, h.ID)
	}
	e.adminNC = e.dial(e.admin, "admin")
	e.aliceNC = e.dial(e.alice, "alice")
	e.bobNC = e.dial(e.bob, "bob")
	for _, u := range []string{"alice", "bob"} {
		if _, err := rpc.Request[wire.GrantReply](e.ctx, e.adminNC.Conn, wire.BankGrant, &wire.GrantRequest{ID: "g-" + u, User: u, Amount: credits(100)}, rpc.SignedBy(e.admin)); err != nil {
			t.Fatalf("granting %s: %v", u, err)
		}
	}
	if s.noPlans {
		return e
	}
	var rep wire.SpendReply
	e.aliceSpend, rep = e.spend(e.alice, e.aliceNC, &wire.SpendRequest{ID: "p-alice", User: "alice", Budget: credits(20),
		Duration: wire.Duration(planLength), VMs: []string{"a1", "a2"}, Strategy: wire.StrategyFair})
	e.alicePlan = rep.Plan
	_, rep = e.spend(e.bob, e.bobNC, &wire.SpendRequest{ID: "p-bob", User: "bob", Budget: credits(10),
		Duration: wire.Duration(planLength), VMs: []string{"b1", "b2"}, Strategy: wire.StrategyFair})
	e.bobPlan = rep.Plan
	return e
}

func (e *env) now() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.clock
}

// step moves the virtual clock by d.
func (e *env) step(d time.Duration) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.clock = e.clock.Add(d)
	return e.clock
}

// tickAgents moves the clock by d and ticks the agents only: they charge,
// capture and publish their states (unlike advance, it does not wait for
// the broker to hear them).
func (e *env) tickAgents(d time.Duration) {
	e.t.Helper()
	now := e.step(d)
	for _, a := range e.m.Agents {
		if _, err := a.Tick(e.ctx, now); err != nil {
			e.t.Errorf("agent %s at %s: %v", a.Host(), now.Format(time.TimeOnly), err)
		}
	}
}

// advance moves the virtual clock by d and runs one market round at it.
func (e *env) advance(d time.Duration) {
	e.t.Helper()
	now := e.step(d)
	if err := e.m.Tick(e.ctx, now); err != nil {
		e.t.Fatalf("market round at %s: %v", now.Format(time.TimeOnly), err)
	}
}

// key is the credentials of (role, name) in the market's creds directory.
func (e *env) key(role, name string) *signing.Signer {
	e.t.Helper()
	s, err := e.m.Keys().Signer(role, name)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// spend sends req signed by s on nc, as a user's CLI would (signing the
// pace and VM share of its strategy), and returns the signed message and
// the reply.
func (e *env) spend(s *signing.Signer, nc *conn, req *wire.SpendRequest) (*nats.Msg, wire.SpendReply) {
	e.t.Helper()
	if err := mandate.SignCaps(req); err != nil {
		e.t.Fatal(err)
	}
	req.V = wire.Version
	body, err := json.Marshal(req)
	if err != nil {
		e.t.Fatal(err)
	}
	msg, err := s.Sign(wire.BrokerSpend, body)
	if err != nil {
		e.t.Fatal(err)
	}
	rep, err := rpc.Request[wire.SpendReply](e.ctx, nc.Conn, msg.Subject, nil, rpc.Verbatim(copyMsg(msg)))
	if err != nil {
		e.t.Fatalf("%s's spend %s: %v", req.User, req.ID, err)
	}
	return msg, rep
}

// copyMsg is a fresh message with m's subject, headers and body: the same
// signed request, sendable again (a replay).
func copyMsg(m *nats.Msg) *nats.Msg {
	c := nats.NewMsg(m.Subject)
	for k, v := range m.Header {
		c.Header[k] = append([]string(nil), v...)
	}
	c.Data = append([]byte(nil), m.Data...)
	return c
}

// ---- the attacker's connection ----

// caFile is the CA of the market's NATS TLS, "" when it has none.
func (e *env) caFile() string {
	ca := filepath.Join(e.dir, "tls", "ca.pem")
	if _, err := os.Stat(ca); err != nil {
		return ""
	}
	return ca
}

// conn is a raw NATS connection that records the errors the server sends
// asynchronously (permissions violations).
type conn struct {
	*nats.Conn
	mu   sync.Mutex
	errs []error
}

func (c *conn) onError(_ *nats.Conn, _ *nats.Subscription, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, err)
}

// violation is the permissions violation the server reported for op
// ("Subscription" or "Publish") on subject, nil if none.
func (c *conn) violation(op, subject string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, err := range c.errs {
		s := err.Error()
		if strings.Contains(strings.ToLower(s), "permissions violation") && strings.Contains(s, op) && strings.Contains(s, `"`+subject+`"`) {
			return err
		}
	}
	return nil
}

// connectOpts are the options of a connection as s (nil: no credentials),
// the way nats.go is used directly: the NKey from the principal's seed,
// its own inbox prefix, the market's CA when it has one.
func (e *env) connectOpts(s *signing.Signer, name string, c *conn, nkey, tls bool) []nats.Option {
	opts := []nats.Option{nats.Name("attack-" + name), nats.ErrorHandler(c.onError), nats.MaxReconnects(0), nats.Timeout(2 * time.Second)}
	if ca := e.caFile(); tls && ca != "" {
		opts = append(opts, nats.RootCAs(ca))
	}
	if s != nil {
		opts = append(opts, nats.CustomInboxPrefix("_INBOX."+s.Public()))
		if nkey {
			opts = append(opts, nats.Nkey(s.Public(), signNonce(e.t, s)))
		}
	}
	return opts
}

// connect connects as s (nil: anonymously). On a server that does not do
// NKey authentication at all (as the market once ran) the key is left
// out: there, anyone connects as anyone.
func (e *env) connect(s *signing.Signer, name string) (*conn, error) {
	c := &conn{}
	nc, err := nats.Connect(e.m.URL, e.connectOpts(s, name, c, s != nil, true)...)
	if errors.Is(err, nats.ErrNkeysNotSupported) {
		nc, err = nats.Connect(e.m.URL, e.connectOpts(s, name, c, false, true)...)
	}
	if err != nil {
		return nil, err
	}
	c.Conn = nc
	e.t.Cleanup(nc.Close)
	return c, nil
}

// dial is connect that must succeed.
func (e *env) dial(s *signing.Signer, name string) *conn {
	e.t.Helper()
	c, err := e.connect(s, name)
	if err != nil {
		e.t.Fatalf("connecting as %s: %v", name, err)
	}
	return c
}

// signNonce signs the server's nonce with s's seed (what nats.Nkey needs).
func signNonce(t testing.TB, s *signing.Signer) nats.SignatureHandler {
	seed, err := s.Seed()
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	return kp.Sign
}

// newKey is a fresh key nobody registered.
func newKey(t testing.TB) *signing.Signer {
	t.Helper()
	s, err := signing.NewUserSigner()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// subRefused subscribes c to subject (in queue when set), lets traffic
// happen, and reports nil when the server refused the subscription, an
// error naming what was read when it was not.
func subRefused(c *conn, subject, queue string, handler func(*nats.Msg), traffic func()) error {
	var mu sync.Mutex
	var read []string
	sub, err := c.QueueSubscribe(subject, queue, func(m *nats.Msg) {
		mu.Lock()
		read = append(read, m.Subject)
		mu.Unlock()
		if handler != nil {
			handler(m)
		}
	})
	if err != nil {
		return nil // refused by the client library already
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = c.Flush()
	if traffic != nil {
		traffic()
	}
	_ = testpoll.Wait(refuseWait, 5*time.Millisecond, func() error {
		if c.violation("Subscription", subject) != nil {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if len(read) > 0 {
			return nil
		}
		return errors.New("waiting")
	})
	if c.violation("Subscription", subject) != nil {
		return nil
	}
	mu.Lock()
	defer mu.Unlock()
	if len(read) > 0 {
		return fmt.Errorf("subscribed to %q (queue %q) and read %d messages, e.g. %s", subject, queue, len(read), read[0])
	}
	return fmt.Errorf("subscribed to %q (queue %q): the server did not refuse it", subject, queue)
}

// pubRefused publishes data on subject from c and reports nil when the
// server refused it.
func pubRefused(c *conn, subject string, header nats.Header, data []byte) error {
	m := nats.NewMsg(subject)
	m.Header, m.Data = header, data
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	if err := c.PublishMsg(m); err != nil {
		return nil
	}
	_ = c.Flush()
	if testpoll.Wait(refuseWait, 5*time.Millisecond, func() error {
		if c.violation("Publish", subject) != nil {
			return nil
		}
		return errors.New("waiting")
	}) == nil {
		return nil
	}
	return fmt.Errorf("published on %q: the server did not refuse it", subject)
}

// errRefusedByNATS is a request the NATS server refused to carry (a
// permissions violation on its subject).
var errRefusedByNATS = errors.New("refused by the NATS server")

// refused reports whether err is a refusal: a forbidden reply, or the
// server refusing the request.
func refused(err error) bool {
	return errors.Is(err, wire.ErrForbidden) || errors.Is(err, errRefusedByNATS)
}

// call sends req on subject from c, signed by s (nil: unsigned), and
// decodes the reply into res; a request the server refuses to carry ends
// at once with errRefusedByNATS, not at the time-out.
func call(ctx context.Context, c *conn, s *signing.Signer, subject string, req wire.Message, res any) error {
	ctx, cancel := context.WithTimeout(ctx, rpc.DefaultTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		reply, err := rpc.Request[json.RawMessage](ctx, c.Conn, subject, req, rpc.SignedBy(s))
		if err == nil && res != nil {
			err = json.Unmarshal(reply, res)
		}
		done <- err
	}()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			if v := c.violation("Publish", subject); v != nil {
				return fmt.Errorf("%w: %v", errRefusedByNATS, v)
			}
		}
	}
}

// callBid sends host's agent one bid change signed by s (call), and gives
// the request's error or the change's.
func callBid(ctx context.Context, c *conn, s *signing.Signer, host string, req *wire.BidRequest) error {
	var res wire.BidResults
	if err := call(ctx, c, s, wire.AgentBidSubject(host), wire.OneBid(req), &res); err != nil {
		return err
	}
	return res.Err(0)
}

// jsRefused sends a JetStream API or KV request from c; nil when it is
// refused (a permissions violation, no answer, or an error answer), an
// error saying what JetStream did when it was carried out.
func jsRefused(c *conn, subject string, header nats.Header, data []byte) error {
	m := nats.NewMsg(subject)
	if header != nil {
		m.Header = header
	}
	m.Data = data
	ctx, cancel := context.WithTimeout(context.Background(), attackerTTL)
	defer cancel()
	type answer struct {
		rep *nats.Msg
		err error
	}
	done := make(chan answer, 1)
	go func() {
		rep, err := c.RequestMsgWithContext(ctx, m)
		done <- answer{rep, err}
	}()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case a := <-done:
			if a.err != nil {
				return nil
			}
			var r struct {
				Error *struct {
					Code        int    `json:"code"`
					Description string `json:"description"`
				} `json:"error"`
			}
			if json.Unmarshal(a.rep.Data, &r) == nil && r.Error != nil {
				return nil
			}
			return fmt.Errorf("%s carried out: %.300s", subject, a.rep.Data)
		case <-tick.C:
			if c.violation("Publish", subject) != nil {
				return nil
			}
		}
	}
}

// ---- what must not change ----

// snapshot is the ledger dump and the plan set, as JSON.
func (e *env) snapshot() string {
	e.t.Helper()
	l, err := e.m.Bank.Ledger(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(l.Violations) > 0 {
		e.t.Fatalf("ledger invariant violated: %v", l.Violations)
	}
	b, err := json.Marshal(struct {
		Ledger wire.LedgerReply
		Plans  wire.PlansReply
	}{l, e.m.Broker.Plans(&wire.PlansRequest{})})
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

// unchanged fails t if the ledger or the plans differ from before.
func (e *env) unchanged(t *testing.T, before string) {
	t.Helper()
	if after := e.snapshot(); after != before {
		t.Errorf("the attack changed the ledger or the plans:\nbefore %s\nafter  %s", before, after)
	}
}

// serving fails t unless alice's signed requests still get answers: her
// balance from the bank and her plans from the broker.
func (e *env) serving(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, rpc.DefaultTimeout)
	defer cancel()
	if _, err := rpc.Request[wire.BalanceReply](ctx, e.aliceNC.Conn, wire.BankBalance, &wire.BalanceRequest{User: "alice"}, rpc.SignedBy(e.alice)); err != nil {
		t.Errorf("the market no longer serves alice's balance: %v", err)
	}
	if _, err := rpc.Request[wire.PlansReply](ctx, e.aliceNC.Conn, wire.BrokerPlans, &wire.PlansRequest{User: "alice"}, rpc.SignedBy(e.alice)); err != nil {
		t.Errorf("the market no longer serves alice's plans: %v", err)
	}
}

// balance is user's account as the bank has it.
func (e *env) balance(user string) wire.BalanceReply {
	e.t.Helper()
	b, err := e.m.Bank.Balance(e.ctx, &wire.BalanceRequest{User: user})
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// bidsOnOwnHolds fails t if a VM's bid on an agent charges a hold other
// than its owner's plan's.
func (e *env) bidsOnOwnHolds(t *testing.T) {
	t.Helper()
	holds := map[string]string{"alice": e.alicePlan.Hold, "bob": e.bobPlan.Hold}
	for _, a := range e.m.Agents {
		for _, v := range a.State().VMs {
			for _, b := range v.Bids {
				if b.Hold != holds[v.Owner] {
					t.Errorf("%s: %s's VM %s charges hold %s (plan %s), not %s's hold %s", a.Host(), v.Owner, v.VM, b.Hold, b.Plan, v.Owner, holds[v.Owner])
				}
			}
		}
	}
}
