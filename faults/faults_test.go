package faults

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/pgtest"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/testproc"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// MaxGap is the longest any kind of operation may go unanswered after a
// kill: no operation may fail for more than 5 s.
const MaxGap = 5 * time.Second

// steady is how long the market runs untouched before each fault, and
// window how long after a kill its gaps are measured.
const (
	steady = 3 * time.Second
	window = 15 * time.Second
)

// fault is one kill: what dies, how long it stays down, and how it comes
// back.
type fault struct {
	name  string
	kill  func(t testing.TB) // the kill; returns when the process is gone
	down  time.Duration
	heal  func(t testing.TB) // restart, promote; waits until it serves
	after func(t testing.TB) // waits until the market is whole again
	bound time.Duration      // the longest gap allowed; MaxGap when zero
}

func TestFaults(tt *testing.T) {
	if os.Getenv("MRM_FAULTS") == "" {
		tt.Skip("the fault test takes minutes: run it with `make faults` (MRM_FAULTS=1)")
	}
	t := record(tt)
	c := startCluster(t, 3)
	nc := c.connect(t, "faults-checker")
	c.waitVMs(t, nc)
	w := startWorkload(t, c)

	restart := func(p *testproc.Proc) func(t testing.TB) { return func(t testing.TB) { p.Start(t) } }
	replicated := func(t testing.TB) { c.waitReplicated(t, time.Minute) }
	var faults []fault
	// The node leading the plans bucket first: every spend, cancel and
	// admission writes to it.
	first := c.leaderOf(t, "KV_"+wire.BucketPlans)
	order := []int{first}
	for i := range c.nats {
		if i != first {
			order = append(order, i)
		}
	}
	for k, i := range order {
		p := c.nats[i]
		name := "NATS node " + p.Name
		if k == 0 {
			name += " (plans leader)"
		}
		faults = append(faults, fault{name: name, kill: func(testing.TB) { p.Kill() }, down: 5 * time.Second, heal: restart(p), after: replicated})
	}
	for _, p := range c.brokers {
		faults = append(faults, fault{name: p.Name, kill: func(testing.TB) { p.Kill() }, down: 3 * time.Second, heal: restart(p)})
	}
	for _, p := range c.banks {
		faults = append(faults, fault{name: p.Name, kill: func(testing.TB) { p.Kill() }, down: 3 * time.Second, heal: restart(p)})
	}
	agent := c.agents[1]
	faults = append(faults, fault{name: agent.Name, kill: func(testing.TB) { agent.Kill() }, down: 3 * time.Second, heal: restart(agent)})
	// The database's primary machine is lost; Patroni, not the test,
	// promotes the synchronous standby once the leader key expires. That
	// row's bound is Patroni's own, ttl + loop_wait, plus MaxGap for the
	// market to use the new primary; the lost member then rejoins.
	var lostDB *pgtest.PatroniNode
	var lostAt time.Time
	faults = append(faults, fault{name: "PostgreSQL primary (Patroni promotes)",
		bound: c.pg.TTL + c.pg.LoopWait + MaxGap,
		kill: func(t testing.TB) {
			var err error
			if lostDB, err = c.pg.KillLeader(); err != nil {
				t.Fatal(err)
			}
			lostAt = time.Now()
		},
		heal: func(t testing.TB) {
			if err := c.pg.WaitPromoted(lostDB, 3*(c.pg.TTL+c.pg.LoopWait)); err != nil {
				t.Fatalf("Patroni did not promote the standby: %v", err)
			}
			// Which part of the row's gap is Patroni's, which the market's.
			took := time.Since(lostAt)
			t.Logf("Patroni's new primary took writes %s after the kill", took.Round(10*time.Millisecond))
			if took > c.pg.TTL+c.pg.LoopWait {
				// Past what Patroni's settings promise: its own account of
				// the failover says where the time went.
				if n := c.pg.Leader(); n != nil {
					t.Logf("later than ttl + loop_wait (%s); %s's Patroni log:\n%s", c.pg.TTL+c.pg.LoopWait, n.Name, n.LogTail())
				}
			}
		},
		after: func(t testing.TB) {
			if err := c.pg.Rejoin(lostDB); err != nil {
				t.Fatal(err)
			}
			if err := c.pg.WaitWhole(2 * time.Minute); err != nil {
				t.Fatalf("%s did not rejoin: %v\n%s", lostDB.Name, err, lostDB.LogTail())
			}
		}})

	type row struct {
		name  string
		gaps  map[string]time.Duration
		bound time.Duration
		slow  []string // the workload's operations that waited long after the kill
		from  time.Time
		to    time.Time
	}
	var rows []row
	for _, f := range faults {
		time.Sleep(steady)
		w.check(t)
		w.log.sampleErrors()
		killed := time.Now()
		f.kill(t)
		time.Sleep(f.down)
		f.heal(t)
		if f.after != nil {
			f.after(t)
		}
		if rest := window - time.Since(killed); rest > 0 {
			time.Sleep(rest)
		}
		w.check(t)
		r := row{name: f.name, gaps: map[string]time.Duration{}, bound: cmp.Or(f.bound, MaxGap), from: killed, to: time.Now()}
		for _, k := range kinds {
			r.gaps[k] = w.log.gap(k, killed, time.Now())
		}
		waits := map[string]time.Duration{}
		for _, k := range kinds {
			waits[k] = w.log.longestWait(k, killed, time.Now())
		}
		for _, k := range cliKinds {
			r.gaps[k] = w.log.longestWait(k, killed, time.Now())
		}
		for _, o := range w.log.slowOps(killed, time.Now()) {
			r.slow = append(r.slow, fmt.Sprint(o))
		}
		rows = append(rows, r)
		c.checkLedger(t, nc, f.name)
		t.Logf("%s killed: longest gaps %v; the workload's longest single operations %v; retried: %v", f.name, r.gaps, waits, w.log.sampleErrors())
		for _, o := range r.slow {
			t.Logf("    slow: %s", o)
		}
	}
	w.finish(t)
	c.settle(t, nc, w.log)
	c.checkExactlyOnce(t, nc, w.log)

	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	columns := slices.Concat(kinds, cliKinds)
	fmt.Fprintf(tw, "KILLED\tBOUND\t%s\n", strings.ToUpper(strings.Join(columns, "\t")))
	failed := false
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s", r.name, r.bound)
		for _, k := range columns {
			mark := ""
			if r.gaps[k] > r.bound {
				mark, failed = " !", true
			}
			fmt.Fprintf(tw, "\t%s%s", r.gaps[k].Round(10*time.Millisecond), mark)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	w.log.mu.Lock()
	total := 0
	for _, k := range columns {
		total += len(w.log.answers[k])
	}
	fmt.Fprintf(&b, "%d operations answered (%v retries by id); %d jobs not admitted; 0 lost, 0 applied twice\n", total, w.log.retries, w.log.notAdmitted)
	w.log.mu.Unlock()
	for _, k := range cliKinds {
		fmt.Fprintf(&b, "%s: %d commands, median wait %s\n", k, len(w.log.waits[k]), w.log.medianWait(k).Round(10*time.Millisecond))
	}
	t.Logf("longest time without an answer after each kill, and the CLI user's longest wait for one command:\n%s", b.String())
	if failed {
		// The rows over their bound again with what waited in them, each
		// try of it, last: CI shows a failed run's end.
		var over strings.Builder
		for _, r := range rows {
			if slices.ContainsFunc(columns, func(k string) bool { return r.gaps[k] > r.bound }) {
				fmt.Fprintf(&over, "%s killed, the operations that waited longest:\n", r.name)
				for _, o := range r.slow {
					fmt.Fprintf(&over, "    %s\n", o)
				}
				fmt.Fprintf(&over, "and what the daemons logged meanwhile:\n%s", c.logsBetween(r.from, r.to, 60))
			}
		}
		t.Errorf("an operation went unanswered, or a CLI user waited, longer than its row's bound after a kill (marked !):\n%s%s", b.String(), over.String())
	}
}

// checkLedger asserts the bank's invariant: no violations, granted money
// all in balances and open holds. Its tries are the CLI's `mrmarket
// ledger`'s: each one not answered lengthens the next, up to the time the
// bank gives its handler, so a ledger read that takes longer than a
// workload operation's attempt on a loaded machine still comes. The log
// says how long it took.
func (c *cluster) checkLedger(t testing.TB, nc *nats.Conn, after string) {
	t.Helper()
	var l wire.LedgerReply
	start, tries := time.Now(), 0
	var errs []string
	err := testpoll.Wait(30*time.Second, 100*time.Millisecond, func() (err error) {
		tries++
		ctx, cancel := context.WithTimeout(context.Background(), rpc.Tries.Backoff(tries))
		defer cancel()
		began := time.Now()
		l, err = c.bank(nc).Ledger(ctx)
		if err != nil {
			errs = append(errs, fmt.Sprintf("+%s %s: %v", began.Sub(start).Round(time.Millisecond), time.Since(began).Round(time.Millisecond), err))
		}
		return err
	})
	if err != nil {
		t.Fatalf("after %s: the ledger did not answer in 30 s; its tries:\n%s", after, strings.Join(errs, "\n"))
	}
	t.Logf("after %s: the ledger answered in %s, try %d", after, time.Since(start).Round(time.Millisecond), tries)
	if len(l.Violations) > 0 {
		t.Fatalf("after %s: ledger violations %v", after, l.Violations)
	}
}

// settle cancels every plan still running and waits until no spender's
// money is held.
func (c *cluster) settle(t testing.TB, nc *nats.Conn, log *journal) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // bounds every retry
	defer cancel()
	for _, user := range spenders {
		var plans wire.PlansReply
		if err := log.do(ctx, "final", "", func(ctx context.Context) (err error) {
			plans, err = c.broker(nc).Plans(ctx, &wire.PlansRequest{User: user})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for _, p := range plans.Plans {
			if p.Status != wire.PlanRunning && p.Status != "starting" {
				continue
			}
			req := &wire.CancelRequest{Plan: p.ID, User: user, ID: "final-" + p.ID}
			if err := log.do(ctx, "final", req.ID, func(ctx context.Context) error { _, err := c.broker(nc).Cancel(ctx, req); return err }); err != nil && !strings.Contains(err.Error(), "not running") {
				t.Fatalf("cancelling %s: %v", p.ID, err)
			}
		}
	}
	testpoll.CheckFor(t, 2*time.Minute, 200*time.Millisecond, func() error {
		for _, user := range spenders {
			ctx, cancel := context.WithTimeout(ctx, attempt)
			b, err := c.bank(nc).Balance(ctx, &wire.BalanceRequest{User: user})
			cancel()
			if err != nil {
				return err
			}
			if b.Held != 0 {
				var open []string
				for _, h := range b.Holds {
					open = append(open, fmt.Sprintf("%s (%s left of %s, expires %s)", h.ID, h.Remaining(), h.Amount, h.Expires.Format(time.TimeOnly)))
				}
				log.mu.Lock()
				defer log.mu.Unlock()
				var plans []string
				for plan, hold := range log.plans[user] {
					for _, h := range b.Holds {
						if h.ID == hold {
							plans = append(plans, fmt.Sprintf("%s cancelled=%v", plan, log.cancelled[plan]))
						}
					}
				}
				return fmt.Errorf("%s still has %s held: %v; their plans: %v", user, b.Held, open, plans)
			}
		}
		return nil
	})
}

// checkExactlyOnce asserts every acknowledged operation applied once: the
// payers' balances are their grants plus the acknowledged transfers; each
// spender's plans at the broker are the acknowledged ones, its holds at the
// bank are theirs, each closed with captured + released = amount, and what
// it spent is what they captured.
func (c *cluster) checkExactlyOnce(t testing.TB, nc *nats.Conn, log *journal) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // bounds every retry
	defer cancel()
	call := func(what string, op func(ctx context.Context) error) {
		t.Helper()
		if err := log.do(ctx, "final", "", op); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	log.mu.Lock()
	net := maps.Clone(log.net)
	plansOf := map[string]map[string]string{}
	for u, ps := range log.plans {
		plansOf[u] = maps.Clone(ps)
	}
	log.mu.Unlock()
	for _, u := range payers {
		var b wire.BalanceReply
		call("balance "+u, func(ctx context.Context) (err error) {
			b, err = c.bank(nc).Balance(ctx, &wire.BalanceRequest{User: u})
			return err
		})
		if want := grantEach + net[u]; b.Balance != want {
			t.Errorf("%s has %s, want %s (grant %s, acknowledged transfers %+d micro)", u, b.Balance, want, grantEach, net[u])
		}
	}
	for _, u := range spenders {
		acked := plansOf[u]
		var plans wire.PlansReply
		call("plans "+u, func(ctx context.Context) (err error) {
			plans, err = c.broker(nc).Plans(ctx, &wire.PlansRequest{User: u})
			return err
		})
		atBroker := map[string]bool{}
		for _, p := range plans.Plans {
			if atBroker[p.ID] {
				t.Errorf("%s: plan %s listed twice", u, p.ID)
			}
			atBroker[p.ID] = true
			if _, ok := acked[p.ID]; !ok {
				t.Errorf("%s: plan %s at the broker was never acknowledged", u, p.ID)
			}
		}
		for id := range acked {
			if !atBroker[id] {
				t.Errorf("%s: acknowledged plan %s is not at the broker", u, id)
			}
		}
		var st wire.StatementReply
		call("statement "+u, func(ctx context.Context) (err error) {
			st, err = c.bank(nc).Statement(ctx, &wire.StatementRequest{User: u, Limit: wire.MaxStatement})
			return err
		})
		holdsAtBank := map[string]bool{}
		for _, e := range st.Entries {
			if e.Kind == "hold" {
				id := strings.TrimPrefix(e.Transfer, "hold:")
				if holdsAtBank[id] {
					t.Errorf("%s: hold %s taken twice", u, id)
				}
				holdsAtBank[id] = true
			}
		}
		var ids []string
		for _, h := range acked {
			ids = append(ids, h)
			if !holdsAtBank[h] {
				t.Errorf("%s: the hold %s of an acknowledged plan is not in its statement", u, h)
			}
			delete(holdsAtBank, h)
		}
		if len(holdsAtBank) > 0 {
			t.Errorf("%s: holds no acknowledged plan owns: %v", u, holdsAtBank)
		}
		slices.Sort(ids)
		var captured money.Micro
		for chunk := range slices.Chunk(ids, wire.MaxHoldsRead) {
			var hs wire.HoldsReply
			call("holds "+u, func(ctx context.Context) (err error) {
				hs, err = c.bank(nc).Holds(ctx, &wire.HoldsRequest{IDs: chunk})
				return err
			})
			for _, h := range hs.Holds {
				if h.Status != wire.HoldClosed || h.Captured+h.Released != h.Amount {
					t.Errorf("%s: hold %s %s: captured %s + released %s ≠ amount %s", u, h.ID, h.Status, h.Captured, h.Released, h.Amount)
				}
				captured += h.Captured
			}
		}
		var b wire.BalanceReply
		call("balance "+u, func(ctx context.Context) (err error) {
			b, err = c.bank(nc).Balance(ctx, &wire.BalanceRequest{User: u})
			return err
		})
		if b.Spent != captured || b.Balance != grantEach-captured {
			t.Errorf("%s: spent %s, balance %s; its plans' holds captured %s of a grant of %s", u, b.Spent, b.Balance, captured, grantEach)
		}
		t.Logf("%s: %d plans acknowledged, each once at the broker and the bank; captured %s", u, len(acked), captured)
	}
	c.checkLedger(t, nc, "the end")
}
