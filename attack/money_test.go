package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// ---- 07: forged and spoofed replies ----

func forgedReplyClass() class {
	return class{name: "07-forged-reply", ticks: true, attacks: []attack{
		{"alice-publishes-into-bobs-inbox", func(t *testing.T, e *env) {
			before := e.snapshot()
			inbox := "_INBOX." + e.bob.Public() + ".spoofed"
			var got atomic.Int64
			sub, err := e.bobNC.Subscribe(inbox, func(*nats.Msg) { got.Add(1) })
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = sub.Unsubscribe() }()
			if err := e.bobNC.Flush(); err != nil {
				t.Fatal(err)
			}
			fake := wire.EncodeReply(wire.GrantReply{Transfer: "t-forged", User: "bob", Amount: credits(1000)}, nil)
			if err := pubRefused(e.aliceNC, inbox, nil, fake); err != nil {
				t.Errorf("NATS: %v", err)
			}
			_ = e.bobNC.Flush()
			if n := got.Load(); n > 0 {
				t.Errorf("bob received %d replies alice forged", n)
			}
			e.unchanged(t, before)
		}},
		{"alice-answers-admins-grants-in-the-bank-queue", func(t *testing.T, e *env) {
			// The admin grants bob 1 credit 10 times; every grant that
			// reports success must be in bob's balance.
			forge := func(m *nats.Msg) {
				var g wire.GrantRequest
				_ = json.Unmarshal(m.Data, &g)
				_ = m.Respond(wire.EncodeReply(wire.GrantReply{Transfer: "t-" + g.ID, User: g.User, Amount: g.Amount}, nil))
			}
			admin := bank.Client{NC: e.adminNC.Conn, Signer: e.admin}
			reported := e.balance("bob").Balance
			traffic := func() {
				for i := range 10 {
					if _, err := admin.Grant(e.ctx, &wire.GrantRequest{ID: fmt.Sprintf("g-bob-%d", i), User: "bob", Amount: credits(1)}); err == nil {
						reported += credits(1)
					}
				}
			}
			if err := subRefused(e.aliceNC, wire.BankGrant, wire.QueueBank, forge, traffic); err != nil {
				t.Errorf("NATS: %v", err)
			}
			if got := e.balance("bob").Balance; got != reported {
				t.Errorf("the admin was told bob has %s, the bank has %s: forged replies said granted", reported, got)
			}
		}},
		{"alice-answers-agents-captures-with-errors", func(t *testing.T, e *env) {
			forge := func(m *nats.Msg) {
				var b wire.CaptureBatch
				if json.Unmarshal(m.Data, &b) != nil {
					return
				}
				rep := wire.CaptureReply{}
				for _, l := range b.Legs {
					rep.Legs = append(rep.Legs, wire.LegResult{ID: l.ID, Hold: l.Hold, VM: l.VM, Exhausted: true,
						Error: &wire.Error{Code: "not_found", Message: "hold closed"}})
				}
				_ = m.Respond(wire.EncodeReply(rep, nil))
			}
			traffic := func() { e.tickAgents(tick) } // the agents capture
			if err := subRefused(e.aliceNC, wire.BankCapture, "", forge, traffic); err != nil {
				t.Errorf("NATS: %v", err)
			}
			// Whatever reached the agents, they keep their bids and the
			// next rounds capture as the plans say.
			for _, a := range e.m.Agents {
				for _, v := range a.State().VMs {
					if len(v.Bids) == 0 || v.Rate == 0 {
						t.Errorf("%s: %s's VM %s lost its bid to a forged capture reply", a.Host(), v.Owner, v.VM)
					}
				}
			}
			e.advance(tick)
			e.bidsOnOwnHolds(t)
			if b := e.balance("alice"); b.Spent == 0 {
				t.Errorf("alice's plan captured nothing after the forged replies: %+v", b)
			}
		}},
	}}
}

// ---- 08: replay ----

// replica starts another broker replica on the market's NATS, with the
// broker's key and the market's plan bucket, as a second broker daemon
// would run; stop stops it (a restart is stop and replica again).
func (e *env) replica(t *testing.T, name string) (stop func()) {
	t.Helper()
	nc := e.dial(e.broker, name)
	js, err := jetstream.New(nc.Conn)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(e.ctx, wire.BucketPlans)
	if err != nil {
		t.Fatal(err)
	}
	cfg := broker.Config{NC: nc.Conn, Bank: bank.Client{NC: nc.Conn, Signer: e.broker}, Signer: e.broker,
		Identities: bank.Client{NC: nc.Conn}, Now: e.now, Tick: tick, Plans: kv, Replica: name, AdminKey: e.admin.Public()}
	b, err := broker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range e.m.Agents {
		b.Observe(a.State())
	}
	stopServe, err := broker.Serve(nc.Conn, b)
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() { once.Do(func() { stopServe(); b.Close(); nc.Close() }) }
	t.Cleanup(stop)
	return stop
}

// replayed sends alice's signed spend again, n times, from bob's
// connection (whoever saw it go by), and fails t for each one taken.
func (e *env) replayed(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		rep, err := rpc.Request[wire.SpendReply](e.ctx, e.bobNC.Conn, e.aliceSpend.Subject, nil, rpc.Verbatim(copyMsg(e.aliceSpend)))
		if !refused(err) {
			t.Errorf("replay %d of alice's spend: got %v (plan %s), want forbidden", i+1, err, rep.Plan.ID)
		} else if i == 0 {
			t.Logf("refused: %v", err)
		}
	}
	if b := e.balance("alice"); b.Held != e.alicePlan.Budget {
		t.Errorf("alice has %s held after the replays, want her one plan's %s", b.Held, e.alicePlan.Budget)
	}
}

func replayClass() class {
	return class{name: "08-replay", attacks: []attack{
		{"spend-to-the-same-broker", func(t *testing.T, e *env) { e.replayed(t, 1) }},
		{"spend-to-a-second-replica", func(t *testing.T, e *env) {
			e.replica(t, "broker-2")
			e.replayed(t, 8) // the queue group spreads them over both replicas
		}},
		{"spend-after-a-broker-restart", func(t *testing.T, e *env) {
			e.replica(t, "broker-2")() // ran, then stopped
			e.replica(t, "broker-2")   // restarted, its memory empty
			e.replayed(t, 8)
		}},
	}}
}

// ---- 09: bids pointing at another user's hold ----

func foreignHoldClass() class {
	// bid places alice's VM a1 on bob's hold, signed by s.
	bid := func(e *env, s *signing.Signer, mandate bool) error {
		b := wire.Bid{VM: "a1", Owner: "alice", Plan: e.alicePlan.ID, Hold: e.bobPlan.Hold, Budget: credits(10), Duration: wire.Duration(planLength)}
		if mandate { // alice's own signed spend, as the broker carries it once bids carry mandates
			m, _ := signing.SignedRequestOf(e.aliceSpend.Subject, e.aliceSpend.Header, e.aliceSpend.Data)
			b.Mandate = &m

		}
		nc := e.aliceNC
		if s == e.broker {
			nc = e.dial(e.broker, "broker-compromised")
		}
		return callBid(e.ctx, nc, s, "host-1", &wire.BidRequest{Set: []wire.Bid{b}})
	}
	isRefused := func(do func(e *env) error) func(t *testing.T, e *env) {
		return func(t *testing.T, e *env) {
			before := e.snapshot()
			if err := do(e); !refused(err) {
				t.Errorf("got %v, want forbidden", err)
			} else {
				t.Logf("refused: %v", err)
			}
			e.unchanged(t, before)
			e.advance(tick)
			e.bidsOnOwnHolds(t)
			e.spentWithin(t, "bob", e.bobPlan.Budget)
		}
	}
	return class{name: "09-foreign-hold", ticks: true, attacks: []attack{
		{"alice-bids-her-vm-on-bobs-hold", isRefused(func(e *env) error { return bid(e, e.alice, false) })},
		{"alice-captures-from-bobs-hold", isRefused(func(e *env) error {
			return call(e.ctx, e.aliceNC, e.alice, wire.BankCapture, &wire.CaptureBatch{Versioned: wire.Versioned{V: wire.Version}, Host: "host-1", Tick: 1 << 30,
				Legs: []wire.CaptureLeg{{ID: "forged-leg", Hold: e.bobPlan.Hold, VM: "a1", Cumulative: credits(5)}}}, nil)
		})},
		{"alice-releases-bobs-hold", isRefused(func(e *env) error {
			return call(e.ctx, e.aliceNC, e.alice, wire.BankRelease, &wire.ReleaseRequest{Versioned: wire.Versioned{V: wire.Version}, Hold: e.bobPlan.Hold, User: "bob"}, nil)
		})},
		// A compromised broker host: its key may place bids, but not for a
		// VM on a hold its owner did not sign for.
		{"broker-key-bids-alices-vm-on-bobs-hold-with-her-mandate", isRefused(func(e *env) error { return bid(e, e.broker, true) })},
		{"broker-key-bids-alices-vm-on-bobs-hold", isRefused(func(e *env) error { return bid(e, e.broker, false) })},
	}}
}

// ---- 11: flood ----

const (
	floodRequests = 20_000
	floodFor      = 15 * time.Second // the flood stops here whatever it sent
	legitCalls    = 10
)

// floodResult is what alice saw during bob's flood.
type floodResult struct {
	lat []time.Duration // her requests' round trips, sorted
	err error           // the first of her requests that failed
	// reads are her balance reads during the flood, each with bob's
	// backlog when she sent it and what waiting behind it would have cost.
	reads []floodRead
	// quiet are her balance reads' round trips before the flood.
	quiet []time.Duration
}

// floodRead is one of alice's balance reads during the flood.
type floodRead struct {
	lat     time.Duration
	backlog int64         // bob's requests sent and not yet answered when she sent hers
	behind  time.Duration // backlog at the rate bob's requests were answered: a FIFO queue's wait
}

// flood floods the bank with bob's requests and meanwhile makes alice's:
// her balance, then a spend. It stops at her first failure.
func flood(t *testing.T, e *env) floodResult {
	var r floodResult
	for range 20 {
		start := time.Now()
		if _, err := rpc.Request[wire.BalanceReply](e.ctx, e.aliceNC.Conn, wire.BankBalance, &wire.BalanceRequest{User: "alice"}, rpc.SignedBy(e.alice)); err != nil {
			t.Fatal(err)
		}
		r.quiet = append(r.quiet, time.Since(start))
	}
	flooder := e.dial(e.bob, "bob-flooder")
	sink := "_INBOX." + e.bob.Public() + ".flood"
	var answered atomic.Int64
	sub, err := flooder.Subscribe(sink, func(*nats.Msg) { answered.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// Bob's own signed reads, half of them on the endpoint alice's balance
	// uses: signed beforehand, so they go out in a burst.
	ledger, _ := json.Marshal(&wire.LedgerRequest{Versioned: wire.Versioned{V: wire.Version}})
	balance, _ := json.Marshal(&wire.BalanceRequest{Versioned: wire.Versioned{V: wire.Version}, User: "bob"})
	msgs := make([]*nats.Msg, floodRequests)
	for i := range msgs {
		if i >= floodDistinct {
			msgs[i] = msgs[i%floodDistinct]
			continue
		}
		subject, body := wire.BankBalance, balance
		if i%2 == 1 {
			subject, body = wire.BankLedger, ledger
		}
		m, err := e.bob.Sign(subject, body)
		if err != nil {
			t.Fatal(err)
		}
		m.Reply = sink
		msgs[i] = m
	}
	var sent atomic.Int64
	floodStart := time.Now()
	ctx, cancel := context.WithTimeout(e.ctx, floodFor)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, m := range msgs {
			if ctx.Err() != nil || flooder.PublishMsg(m) != nil {
				return
			}
			sent.Add(1)
		}
		_ = flooder.Flush()
	}()
	testpoll.CheckFor(t, floodFor, time.Millisecond, func() error {
		if sent.Load() < floodRequests/2 {
			return fmt.Errorf("the flood has sent only %d requests", sent.Load())
		}
		return nil
	})
	for i := range legitCalls + 1 {
		start := time.Now()
		backlog := sent.Load() - answered.Load()
		var err error
		if i < legitCalls {
			_, err = rpc.Request[wire.BalanceReply](e.ctx, e.aliceNC.Conn, wire.BankBalance, &wire.BalanceRequest{User: "alice"}, rpc.SignedBy(e.alice))
			lat := time.Since(start)
			rate := float64(answered.Load()) / time.Since(floodStart).Seconds() // bob's answers a second so far
			r.reads = append(r.reads, floodRead{lat: lat, backlog: backlog, behind: time.Duration(float64(backlog) / max(rate, 1) * float64(time.Second))})
		} else {
			_, err = rpc.Request[wire.SpendReply](e.ctx, e.aliceNC.Conn, wire.BrokerSpend, &wire.SpendRequest{ID: "p-alice-flood", User: "alice",
				Budget: credits(1), Duration: wire.Duration(planLength), VMs: []string{"a1"}, Strategy: wire.StrategyFair}, rpc.SignedBy(e.alice))
		}
		r.lat = append(r.lat, time.Since(start))
		if err != nil {
			r.err = fmt.Errorf("alice's request %d during the flood (%d sent, %d answered): %w", i+1, sent.Load(), answered.Load(), err)
			break
		}
	}
	cancel()
	<-done
	slices.Sort(r.lat)
	t.Logf("flood: %d requests sent, %d answered by now; alice's %d requests: p50 %v, max %v",
		sent.Load(), answered.Load(), len(r.lat), r.lat[len(r.lat)/2], r.lat[len(r.lat)-1])
	return r
}

func floodClass() class {
	var r *floodResult
	return class{name: "11-flood", ticks: true, attacks: []attack{
		{"bob-sends-20k-requests-alice-answered-within-the-default-timeout", func(t *testing.T, e *env) {
			res := flood(t, e)
			r = &res
			if r.err != nil {
				t.Error(r.err)
			}
		}},
		// Fair queuing: alice does not wait behind bob's backlog. Compared
		// with what the same run measured, not with a wall-clock figure:
		// waiting behind bob's backlog at the rate his requests were answered
		// (a FIFO queue's wait) is what she would pay without fair queuing.
		// Her median read takes less than a quarter of the median such wait
		// (or no more than five times her own p99 before the flood, when his
		// backlog was short), and no read of hers waits the whole backlog.
		// (Her first read may wait a little behind the burst still in
		// transit to the bank's subscription, which no queue of the bank's
		// can reorder: hence the median.) The mutation it catches: every
		// request in one queue (fairKey returning one key for all), where
		// alice is refused busy or waits behind bob's backlog.
		{"alice-not-behind-bobs-backlog-during-the-flood", func(t *testing.T, e *env) {
			if r == nil {
				t.Fatal("no flood ran")
			}
			if r.err != nil {
				t.Fatal(r.err)
			}
			quiet := p99(r.quiet)
			var lat, behind []time.Duration
			for i, rd := range r.reads {
				lat, behind = append(lat, rd.lat), append(behind, rd.behind)
				if rd.lat >= rd.behind && rd.lat > 5*quiet {
					t.Errorf("alice's read %d took %v, the whole wait behind bob's %d requests (%v at his rate)", i+1, rd.lat, rd.backlog, rd.behind)
				}
			}
			slices.Sort(lat)
			slices.Sort(behind)
			med, medBehind := lat[len(lat)/2], behind[len(behind)/2]
			if bound := max(medBehind/4, 5*quiet); med > bound {
				t.Errorf("alice's median read %v during the flood, above %v (a quarter of the median wait behind bob's backlog %v, or 5× her p99 alone %v)",
					med, bound, medBehind, quiet)
			}
			t.Logf("alice's reads: p99 %v alone; during the flood median %v, the median wait behind bob's backlog %v", quiet, med, medBehind)
		}},
	}}
}
