package bank_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// BenchmarkCapture measures captured legs per second and the p99 of a
// batch's latency. agents=1 is one agent sending batches of 1, 100 or
// 1,000 legs one after another, as an agent's tick does, each raising
// every leg's cumulative total; the legs capture from a hold of the old
// rule (no terms, a bank without identities), or with hold=terms from a
// hold with its mandate's terms, each leg checked against its placement
// and schedule (the bound never bites: the cost of the check alone). A
// lone batch is a group of one, so these rows have one path.
//
// agents>1 is that many agents (hosts) sending their batches at once, each
// as soon as its last was answered, their legs spread over ten users'
// holds, side by side on two paths in one run: path=group is the bank
// (concurrent batches committed as one transaction, group.go) and
// path=alone commits every batch in a transaction of its own, as the bank
// did before. legs/s counts the legs of batches answered; failed-% is the
// share of batches answered unavailable (the store gave up retrying its
// serialization failures), whose legs the agent's next batch carries.
func BenchmarkCapture(b *testing.B) {
	for _, s := range stores {
		for _, terms := range []bool{false, true} {
			for _, n := range []int{1, 100, 1000} {
				name := fmt.Sprintf("store=%s/legs=%d/agents=1", s.name, n)
				if terms {
					name += "/hold=terms"
				}
				b.Run(name, func(b *testing.B) { benchCapture(b, s.new(b), n, terms) })
			}
		}
		for _, c := range []struct{ agents, legs int }{{100, 1}, {100, 10}, {10, 100}, {10, 1000}} {
			for _, path := range []string{"alone", "group"} {
				b.Run(fmt.Sprintf("store=%s/legs=%d/agents=%d/path=%s", s.name, c.legs, c.agents, path), func(b *testing.B) {
					benchCaptureAgents(b, s.new(b), c.agents, c.legs, path == "group")
				})
			}
		}
	}
}

func benchCapture(b *testing.B, target string, n int, terms bool) {
	ctx := context.Background()
	clock := t0
	opts := bank.Options{Now: func() time.Time { return clock }}
	var alice, admin *signing.Signer
	if terms {
		alice, admin = newSigner(b), newSigner(b)
		opts.AdminKey = admin.Public()
	}
	bk, err := bank.Open(target, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer bk.Close()
	hold := &wire.HoldRequest{ID: "h", User: "alice", Amount: 1_000_000_000_000, Expires: t0.Add(24 * time.Hour)}
	if terms {
		if _, err := bk.AddPrincipal(ctx, &wire.PrincipalRequest{Key: alice.Public(), Name: "alice", Role: wire.RoleUser,
			Cert: signing.SealPrincipal(admin, alice.Public(), "alice", wire.RoleUser)}); err != nil {
			b.Fatal(err)
		}
		spend := &wire.SpendRequest{ID: "p", User: "alice", Budget: hold.Amount, Duration: wire.Duration(20 * time.Hour), Strategy: wire.StrategyFair}
		for i := range n {
			spend.VMs = append(spend.VMs, fmt.Sprintf("vm%d", i))
			hold.Placement = append(hold.Placement, wire.Placed{VM: spend.VMs[i], Host: "host-1"})
		}
		if hold.Mandate, err = mandate.Sign(alice, wire.BrokerSpend, spend); err != nil {
			b.Fatal(err)
		}
		hold.ID, hold.Hosts, hold.Expires = mandate.HoldIDFor("alice", "p"), []string{"host-1"}, t0.Add(20*time.Hour)
	}
	if _, err := bk.Grant(ctx, &wire.GrantRequest{ID: "g", User: "alice", Amount: 1_000_000_000_000}); err != nil {
		b.Fatal(err)
	}
	if _, err := bk.Hold(ctx, hold); err != nil {
		b.Fatal(err)
	}
	round := int64(0)
	var lat []time.Duration
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		round++
		batch := &wire.CaptureBatch{Host: "host-1", Tick: round, Legs: make([]wire.CaptureLeg, n)}
		for i := range batch.Legs {
			batch.Legs[i] = wire.CaptureLeg{ID: fmt.Sprintf("h/host-1/vm%d/%d", i, round), Hold: hold.ID, VM: fmt.Sprintf("vm%d", i), Cumulative: money.Micro(round)}
		}
		sent := time.Now()
		rep, err := bk.Capture(ctx, batch)
		lat = append(lat, time.Since(sent))
		if err != nil || rep.Applied != money.Micro(n) {
			b.Fatalf("round %d: %+v %v", round, rep.Applied, err)
		}
	}
	reportCapture(b, float64(round)*float64(n)/time.Since(start).Seconds(), lat)
}

// reportCapture reports legs/s and the p99 of lat in milliseconds.
func reportCapture(b *testing.B, legsPerSecond float64, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(legsPerSecond, "legs/s")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// captureHolds is how many users' holds the agents' legs are spread over.
const captureHolds = 10

// openCaptureBank is a bank with captureHolds holds, "h0" of user "u0" and
// so on, each with money for any benchmark.
func openCaptureBank(b *testing.B, target string) *bank.Bank {
	ctx := context.Background()
	bk, err := bank.Open(target, bank.Options{Now: func() time.Time { return t0 }})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bk.Close() })
	for u := range captureHolds {
		user := fmt.Sprintf("u%d", u)
		if _, err := bk.Grant(ctx, &wire.GrantRequest{ID: "g-" + user, User: user, Amount: 1_000_000_000_000}); err != nil {
			b.Fatal(err)
		}
		if _, err := bk.Hold(ctx, &wire.HoldRequest{ID: fmt.Sprintf("h%d", u), User: user, Amount: 1_000_000_000_000, Expires: t0.Add(24 * time.Hour)}); err != nil {
			b.Fatal(err)
		}
	}
	return bk
}

// captureBatch is host's batch of round: n legs, VM i's on hold (host+i) mod
// captureHolds, each raising its cumulative total to round.
func captureBatch(host, round int64, n int) *wire.CaptureBatch {
	name := fmt.Sprintf("host-%d", host)
	batch := &wire.CaptureBatch{Host: name, Tick: round, Legs: make([]wire.CaptureLeg, n)}
	for i := range batch.Legs {
		batch.Legs[i] = wire.CaptureLeg{ID: fmt.Sprintf("%s/vm%d/%d", name, i, round), Hold: fmt.Sprintf("h%d", (host+int64(i))%captureHolds),
			VM: fmt.Sprintf("vm%d", i), Cumulative: money.Micro(round)}
	}
	return batch
}

// capturer is how a benchmark sends a batch: the bank's Capture, or
// CaptureAlone.
func capturer(bk *bank.Bank, group bool) func(context.Context, *wire.CaptureBatch) (wire.CaptureReply, error) {
	if group {
		return bk.Capture
	}
	return bk.CaptureAlone
}

func benchCaptureAgents(b *testing.B, target string, agents, n int, group bool) {
	bk := openCaptureBank(b, target)
	capture := capturer(bk, group)
	ctx := context.Background()
	lats := make([][]time.Duration, agents)
	var wg sync.WaitGroup
	var answered, failed atomic.Int64
	b.ResetTimer()
	start := time.Now()
	for a := range agents {
		wg.Go(func() {
			for round := range int64(b.N) {
				sent := time.Now()
				_, err := capture(ctx, captureBatch(int64(a), round+1, n))
				lats[a] = append(lats[a], time.Since(sent))
				switch {
				case err == nil:
					answered.Add(int64(n))
				case bank.IsUnavailable(err): // the next round's cumulative totals take it up, as an agent's would
					failed.Add(1)
				default:
					b.Errorf("agent %d, round %d: %v", a, round+1, err)
					return
				}
			}
		})
	}
	wg.Wait()
	reportCapture(b, float64(answered.Load())/time.Since(start).Seconds(), slices.Concat(lats...))
	b.ReportMetric(100*float64(failed.Load())/float64(agents*b.N), "failed-%")
}

// BenchmarkCaptureLoad offers the capture load of hosts agents, each
// sending a batch of 10 legs a second (spread evenly over the second), for
// b.N seconds, whatever the bank answers: an open loop, as agents' ticks
// are. It reports the legs/s committed, the p99 latency of every batch
// (one the bank did not answer within its deadline counted at the
// deadline) and the share of batches not answered in time, on both paths
// side by side (see BenchmarkCapture). The deadline is 10 s, longer than
// an agent's 1 s, so that the tail is measured rather than cut.
func BenchmarkCaptureLoad(b *testing.B) {
	for _, s := range stores {
		for _, hosts := range []int{1000, 3000, 10000} {
			for _, path := range []string{"alone", "group"} {
				b.Run(fmt.Sprintf("store=%s/hosts=%d/path=%s", s.name, hosts, path), func(b *testing.B) {
					benchCaptureLoad(b, s.new(b), hosts, path == "group")
				})
			}
		}
	}
}

func benchCaptureLoad(b *testing.B, target string, hosts int, group bool) {
	const (
		legs     = 10
		deadline = 10 * time.Second
		slot     = 10 * time.Millisecond // batches are sent every slot
	)
	bk := openCaptureBank(b, target)
	capture := capturer(bk, group)
	var (
		mu        sync.Mutex
		lat       []time.Duration
		committed atomic.Int64
		late      atomic.Int64
		wg        sync.WaitGroup
	)
	perSlot := hosts * int(slot) / int(time.Second)
	b.ResetTimer()
	start := time.Now()
	for k := range b.N * hosts / perSlot {
		time.Sleep(time.Until(start.Add(time.Duration(k) * slot)))
		for j := range perSlot {
			host := int64((k*perSlot + j) % hosts)
			round := int64((k*perSlot+j)/hosts) + 1
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				defer cancel()
				sent := time.Now()
				_, err := capture(ctx, captureBatch(host, round, legs))
				took := time.Since(sent)
				switch {
				case err == nil:
					committed.Add(legs) // what it moved depends on the order its host's rounds landed in
				case bank.IsUnavailable(err):
					late.Add(1)
					took = max(took, deadline)
				default:
					b.Errorf("host %d, round %d: %v", host, round, err)
				}
				mu.Lock()
				lat = append(lat, took)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	reportCapture(b, float64(committed.Load())/time.Since(start).Seconds(), lat)
	b.ReportMetric(100*float64(late.Load())/float64(len(lat)), "late-%")
}

// BenchmarkSignedHold is the round trip of a signed hold over NATS (sign,
// verify, authorise, nonce, transaction, reply), with p50 and p99.
func BenchmarkSignedHold(b *testing.B) {
	for _, s := range stores {
		b.Run("store="+s.name, func(b *testing.B) {
			srv := serveBank(b, s.new(b))
			ctx := context.Background()
			c := bank.Client{NC: srv.nc, Keys: srv.keys}
			if _, err := c.Grant(ctx, &wire.GrantRequest{ID: "g", User: "alice", Amount: 1_000_000_000_000}); err != nil {
				b.Fatal(err)
			}
			var lat []time.Duration
			i := 0
			b.ResetTimer()
			for b.Loop() {
				i++
				t0 := time.Now()
				if _, err := c.Hold(ctx, &wire.HoldRequest{ID: fmt.Sprintf("h%d", i), User: "alice", Amount: 1, Expires: time.Now().Add(time.Hour)}); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkCaptureReplicas is the market's load on two bank replicas
// sharing one database, as deploy/ runs them: hosts agents, each with
// vmsPerHost VMs each funded by its own plan's hold, send their tick's
// capture batch every 200 ms to either replica (NATS's queue group picks),
// waiting for its answer at most an agent's attempt (1 s), while spends
// and cancels place and release other holds on both. It runs b.N seconds
// and reports the legs/s committed, the p50 and p99 of a batch's wait,
// the share of batches not answered within the attempt, and how many
// times a capture transaction began on average (each beyond the first a
// serialization failure).
func BenchmarkCaptureReplicas(b *testing.B) {
	for _, s := range stores {
		for _, hosts := range []int{3, 30} {
			b.Run(fmt.Sprintf("store=%s/hosts=%d", s.name, hosts), func(b *testing.B) { benchCaptureReplicas(b, s.new(b), hosts) })
		}
	}
}

func benchCaptureReplicas(b *testing.B, target string, hosts int) {
	const (
		vmsPerHost = 20
		tick       = 200 * time.Millisecond
		attempt    = time.Second
		churnEvery = 20 * time.Millisecond
	)
	ctx := context.Background()
	var replicas []*bank.Bank
	for range 2 {
		bk, err := bank.Open(target, bank.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { bk.Close() })
		replicas = append(replicas, bk)
	}
	for u := range captureHolds {
		if _, err := replicas[0].Grant(ctx, &wire.GrantRequest{ID: fmt.Sprintf("g-u%d", u), User: fmt.Sprintf("u%d", u), Amount: 1_000_000_000_000}); err != nil {
			b.Fatal(err)
		}
	}
	holdOf := func(host, vm int) string { return fmt.Sprintf("plan-%d-%d", host, vm) }
	for h := range hosts {
		for v := range vmsPerHost {
			if _, err := replicas[0].Hold(ctx, &wire.HoldRequest{ID: holdOf(h, v), User: fmt.Sprintf("u%d", (h+v)%captureHolds),
				Amount: 1_000_000_000, Expires: time.Now().Add(time.Hour)}); err != nil {
				b.Fatal(err)
			}
		}
	}
	var (
		mu        sync.Mutex
		lat       []time.Duration
		committed atomic.Int64
		late      atomic.Int64
		wg        sync.WaitGroup
	)
	stop := make(chan struct{})
	b.ResetTimer()
	start := time.Now()
	for h := range hosts {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(h), 1))
			next := start.Add(time.Duration(rng.Int64N(int64(tick))))
			for round := int64(1); ; round++ {
				select {
				case <-stop:
					return
				case <-time.After(time.Until(next)):
				}
				next = next.Add(tick)
				name := fmt.Sprintf("host-%d", h)
				batch := &wire.CaptureBatch{Host: name, Tick: round, Legs: make([]wire.CaptureLeg, vmsPerHost)}
				for v := range batch.Legs {
					batch.Legs[v] = wire.CaptureLeg{ID: fmt.Sprintf("%s/vm%d/%d", name, v, round), Hold: holdOf(h, v), VM: fmt.Sprintf("vm%d", v), Cumulative: money.Micro(round)}
				}
				actx, cancel := context.WithTimeout(ctx, attempt)
				sent := time.Now()
				_, err := replicas[rng.IntN(2)].Capture(actx, batch)
				took := time.Since(sent)
				cancel()
				switch {
				case err == nil:
					committed.Add(vmsPerHost)
				case bank.IsUnavailable(err):
					late.Add(1)
					took = max(took, attempt)
				default:
					b.Errorf("%s round %d: %v", name, round, err)
					return
				}
				mu.Lock()
				lat = append(lat, took)
				mu.Unlock()
			}
		})
	}
	for r := range replicas {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-time.After(churnEvery):
				}
				id, user := fmt.Sprintf("churn-%d-%d", r, n), fmt.Sprintf("u%d", n%captureHolds)
				if _, err := replicas[r].Hold(ctx, &wire.HoldRequest{ID: id, User: user, Amount: 10_000, Expires: time.Now().Add(time.Hour)}); err != nil {
					continue
				}
				_, _ = replicas[1-r].Release(ctx, &wire.ReleaseRequest{Hold: id, User: user})
			}
		})
	}
	time.Sleep(time.Duration(b.N) * time.Second)
	close(stop)
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	reportCapture(b, float64(committed.Load())/elapsed.Seconds(), lat)
	b.ReportMetric(100*float64(late.Load())/float64(max(1, len(lat))), "late-%")
	var txs, tries int64
	for _, r := range replicas {
		t, n := r.CaptureTries()
		txs, tries = txs+t, tries+n
	}
	b.ReportMetric(float64(tries)/float64(max(1, txs)), "begins/tx")
}

// BenchmarkLedger is an admin's ledger read (every account, the grants'
// sum, each hold against its captures) on a bank that has taken 16,000
// capture legs, alone (load=none) or while 8 agents go on capturing
// batches of 10 legs in a closed loop (load=captures). The fault test read
// the ledger in 1.3–8.6 s on PostgreSQL under its workload.
func BenchmarkLedger(b *testing.B) {
	const agents, legs, history = 8, 10, 200
	for _, s := range stores {
		for _, load := range []string{"none", "captures"} {
			b.Run(fmt.Sprintf("store=%s/load=%s", s.name, load), func(b *testing.B) {
				bk := openCaptureBank(b, s.new(b))
				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				defer wg.Wait()
				defer cancel()
				for a := range agents {
					wg.Go(func() {
						for round := int64(1); ctx.Err() == nil; round++ {
							_, err := bk.Capture(ctx, captureBatch(int64(a), round, legs))
							if err != nil && ctx.Err() == nil && !bank.IsUnavailable(err) {
								b.Errorf("agent %d, round %d: %v", a, round, err)
								return
							}
							if round == history && load == "none" {
								return
							}
						}
					})
				}
				if load == "none" {
					wg.Wait()
				} else {
					time.Sleep(5 * time.Second)
				}
				b.ResetTimer()
				for b.Loop() {
					rep, err := bk.Ledger(context.Background())
					if err != nil || len(rep.Violations) > 0 {
						b.Fatalf("ledger: %v %v", rep.Violations, err)
					}
				}
			})
		}
	}
}
