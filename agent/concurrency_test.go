package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// waitLimit bounds every wait of these tests: far beyond what any step
// needs, so only a real wait-behind (a deadlock) reaches it.
const waitLimit = 20 * time.Second

// gatedBank passes batches on to next, except that once armed it holds
// the next batch until released, as a slow bank would. It records every
// batch's round, to check that no two batches share one.
type gatedBank struct {
	next agent.Capturer

	mu            sync.Mutex
	armed         bool
	held, release chan struct{}
	rounds        map[int64]int
}

func newGatedBank(next agent.Capturer) *gatedBank {
	return &gatedBank{next: next, rounds: map[int64]int{}}
}

// arm makes the next batch wait at the bank until release is closed; held
// is closed when it arrives.
func (g *gatedBank) arm() (held, release chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.held, g.release = true, make(chan struct{}), make(chan struct{})
	return g.held, g.release
}

func (g *gatedBank) Capture(ctx context.Context, b *wire.CaptureBatch) (wire.CaptureReply, error) {
	g.mu.Lock()
	wait, held, release := g.armed, g.held, g.release
	g.armed = false
	g.rounds[b.Tick]++
	g.mu.Unlock()
	if wait {
		close(held)
		select {
		case <-release:
		case <-ctx.Done():
			return wire.CaptureReply{}, ctx.Err()
		}
	}
	return g.next.Capture(ctx, b)
}

// sharedRounds are the rounds more than one batch carried.
func (g *gatedBank) sharedRounds() []int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []int64
	for r, n := range g.rounds {
		if n > 1 {
			out = append(out, r)
		}
	}
	return out
}

// within waits for ch, failing the test with what if waitLimit passes first.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("waited %s for this in vain: %s", waitLimit, what)
		panic("unreachable")
	}
}

func shareRatio(t *testing.T, sim *agent.SimEnforcer, num, den string) float64 {
	t.Helper()
	applied := must(sim.Applied(context.Background()))
	return applied[num] / applied[den]
}

// TestSetBidsDoesNotWaitForATicksCapture: while a tick waits on a slow bank
// a bid change is taken, captured, saved and enforced; the tick, finishing
// later, does not put back the shares or the state file from before the
// change; every batch has its own round and the charges stay exact.
func TestSetBidsDoesNotWaitForATicksCapture(t *testing.T) {
	ctx := context.Background()
	h := newHost(t, agent.VM{ID: "a", Owner: "alice"}, agent.VM{ID: "b", Owner: "bob"})
	h.fund(t, "alice", "ha", 3600)
	h.fund(t, "bob", "hb", 7200)
	gate := newGatedBank(h.bank)
	now := func() time.Time { return *h.clock }
	cfg := agent.Config{Host: "host-1", Enforcer: h.sim, Capturer: gate, Now: now,
		StateFile: filepath.Join(t.TempDir(), "agent.json")}
	a := must(agent.New(cfg))
	if _, err := a.SetBids(ctx, bidReq(wire.Bid{VM: "a", Owner: "alice", Plan: "pa", Hold: "ha", Budget: 3600, Duration: wire.Duration(time.Hour)})); err != nil {
		t.Fatal(err)
	}
	*h.clock = t0.Add(10 * time.Minute)
	held, release := gate.arm()
	ticked := make(chan error, 1)
	go func() {
		_, err := a.Tick(ctx, now())
		ticked <- err
	}()
	within(t, held, "the tick reached the bank")

	bid := make(chan error, 1)
	go func() {
		_, err := a.SetBids(ctx, bidReq(wire.Bid{VM: "b", Owner: "bob", Plan: "pb", Hold: "hb", Budget: 7200, Duration: wire.Duration(time.Hour)}))
		bid <- err
	}()
	if err := within(t, bid, "SetBids finished while a tick waited on the bank"); err != nil {
		t.Fatal(err)
	}
	if r := shareRatio(t, h.sim, "b", "a"); math.Abs(r-2) > 1e-9 {
		t.Fatalf("bob's bid, twice alice's rate, is not in force while the tick waits: b/a = %v", r)
	}
	close(release)
	if err := within(t, ticked, "the tick finished once the bank answered"); err != nil {
		t.Fatal(err)
	}
	if r := shareRatio(t, h.sim, "b", "a"); math.Abs(r-2) > 1e-9 {
		t.Fatalf("the tick put back shares from before the bid change: b/a = %v", r)
	}

	// The state file has the change: a restart enforces both bids at once
	// and ends both plans having charged exactly their budgets.
	h.sim.Tamper("a", 0.5)
	h.sim.Tamper("b", 0.5)
	a = must(agent.New(cfg))
	if r := shareRatio(t, h.sim, "b", "a"); math.Abs(r-2) > 1e-9 {
		t.Fatalf("after a restart from the state file: b/a = %v, want 2", r)
	}
	*h.clock = t0.Add(70 * time.Minute)
	if _, err := a.Tick(ctx, now()); err != nil {
		t.Fatal(err)
	}
	for u, want := range map[string]money.Micro{"alice": 3600, "bob": 7200} {
		if bal := must(h.bank.Balance(ctx, &wire.BalanceRequest{User: u})); bal.Spent != want {
			t.Errorf("%s spent %s, want %s", u, bal.Spent, want)
		}
	}
	h.captured(t, "") // the ledger's invariant holds
	if r := gate.sharedRounds(); len(r) > 0 {
		t.Fatalf("batches shared rounds %v", r)
	}
}

// TestConcurrentBidsAndTicksStayConsistent: bid changes on every VM racing
// ticks leave, once all is quiet, the newest shares in force and the newest
// book in the state file; no two batches share a round; the ledger holds.
func TestConcurrentBidsAndTicksStayConsistent(t *testing.T) {
	ctx := context.Background()
	const nVMs, changes = 4, 12
	var vms []agent.VM
	for i := range nVMs {
		vms = append(vms, agent.VM{ID: fmt.Sprintf("v%d", i), Owner: "alice"})
	}
	h := newHost(t, vms...)
	var elapsed atomic.Int64
	now := func() time.Time { return t0.Add(time.Duration(elapsed.Load())) }
	gate := newGatedBank(h.bank)
	cfg := agent.Config{Host: "host-1", Enforcer: h.sim, Capturer: gate, Now: now,
		StateFile: filepath.Join(t.TempDir(), "agent.json")}
	a := must(agent.New(cfg))
	for _, vm := range vms {
		h.fund(t, "alice", "h"+vm.ID, 1_000_000_000)
	}
	var wg sync.WaitGroup
	for i, vm := range vms {
		wg.Go(func() {
			for j := range changes {
				elapsed.Add(int64(time.Second))
				b := wire.Bid{VM: vm.ID, Owner: "alice", Plan: "p" + vm.ID, Hold: "h" + vm.ID,
					Budget: money.Micro(3600 * (1 + (i*changes+j)%7)), Duration: wire.Duration(time.Hour)}
				if _, err := a.SetBids(ctx, bidReq(b)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Go(func() {
		for range changes {
			elapsed.Add(int64(time.Second))
			if _, err := a.Tick(ctx, now()); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()

	st := a.State()
	applied := must(h.sim.Applied(ctx))
	rates := map[string]float64{}
	var ids []string
	for _, v := range st.VMs {
		ids, rates[v.VM] = append(ids, v.VM), v.Rate
		if len(v.Bids) == 0 || math.Abs(applied[v.VM]-v.Share) > 1e-12 {
			t.Errorf("%s: in force %v, the book says %+v", v.VM, applied[v.VM], v)
		}
	}
	for vm, q := range agent.Shares(ids, rates) {
		if math.Abs(applied[vm]-q) > 1e-12 {
			t.Errorf("%s: in force %v, the share rule gives %v", vm, applied[vm], q)
		}
	}
	restarted := must(agent.New(cfg)).State()
	for i, v := range st.VMs {
		r := restarted.VMs[i]
		if r.VM != v.VM || len(r.Bids) != len(v.Bids) || len(r.Bids) == 1 && (r.Bids[0].Plan != v.Bids[0].Plan || r.Bids[0].Hold != v.Bids[0].Hold ||
			r.Bids[0].Budget != v.Bids[0].Budget || !r.Bids[0].Ends.Equal(v.Bids[0].Ends)) {
			t.Errorf("state file: %+v, book: %+v", r, v)
		}
	}
	if r := gate.sharedRounds(); len(r) > 0 {
		t.Fatalf("batches shared rounds %v", r)
	}
	h.captured(t, "")
}

// downBank refuses every batch, as a bank that is away does.
type downBank struct{}

var errBankAway = errors.New("bank away")

func (downBank) Capture(context.Context, *wire.CaptureBatch) (wire.CaptureReply, error) {
	return wire.CaptureReply{}, errBankAway
}

// recordHandler hands every log record to a channel.
type recordHandler struct{ ch chan slog.Record }

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.ch <- r.Clone():
	default: // the test has what it needs
	}
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }

// metricValue is the value of counter or gauge name with labels, from reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families := must(reg.Gather())
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue metrics
				}
			}
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestRunLogsAndCountsFailedTicks: Run ticks on the agent's clock, and a
// tick that fails is logged with its host and counted, not dropped.
func TestRunLogsAndCountsFailedTicks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := newHost(t, agent.VM{ID: "a", Owner: "alice"})
	at := t0.Add(time.Minute)
	records := make(chan slog.Record, 64)
	reg := prometheus.NewRegistry()
	a := must(agent.New(agent.Config{Host: "host-1", Enforcer: h.sim, Capturer: downBank{},
		Now: func() time.Time { return at }, Metrics: obs.NewMetrics(reg), Logger: slog.New(recordHandler{records})}))
	// The bid starts at t0+1m on the agent's clock; with the clock at t0+2m
	// every tick owes the bank and fails.
	if _, err := a.SetBids(ctx, bidReq(wire.Bid{VM: "a", Owner: "alice", Plan: "pa", Hold: "ha", Budget: 3600, Duration: wire.Duration(time.Hour)})); err != nil {
		t.Fatal(err)
	}
	at = t0.Add(2 * time.Minute)
	done := make(chan struct{})
	go func() {
		agent.Run(ctx, a, time.Millisecond)
		close(done)
	}()
	var r slog.Record
	for r.Level != slog.LevelError {
		r = within(t, records, "a failed tick was logged")
	}
	attrs := map[string]string{}
	r.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	if attrs["host"] != "host-1" || !strings.Contains(attrs["err"], errBankAway.Error()) {
		t.Fatalf("logged %q with %v", r.Message, attrs)
	}
	cancel()
	within(t, done, "Run returned once its context ended")
	if n := metricValue(t, reg, "mrm_errors_total", map[string]string{"component": "agent", "kind": "tick"}); n < 1 {
		t.Fatalf("failed ticks counted: %v", n)
	}
	if st := a.State(); !st.Time.Equal(at) || st.Tick < 1 {
		t.Fatalf("Run ticked at %s (tick %d), want the agent's clock %s", st.Time, st.Tick, at)
	}
}

// answerLateBank passes a batch on to next at once, as a bank applies
// it, and then holds the answer until release is closed: an answer on its
// way back. A caller that gives up meanwhile (its context done) never
// gets it.
type answerLateBank struct {
	next          agent.Capturer
	held, release chan struct{}
}

func (b *answerLateBank) Capture(ctx context.Context, batch *wire.CaptureBatch) (wire.CaptureReply, error) {
	rep, err := b.next.Capture(ctx, batch)
	close(b.held)
	<-b.release
	if ctx.Err() != nil {
		return wire.CaptureReply{}, ctx.Err()
	}
	return rep, err
}

// TestAStopFinishesTheCaptureInFlight: an agent stopped while the bank's
// answer to its capture is on its way takes the answer in and saves it,
// so the book it leaves on disk is what the bank holds. Mutation:
// capturing on the tick's own context, which the stop cuts, leaves the
// book a capture behind the bank, and this fails.
func TestAStopFinishesTheCaptureInFlight(t *testing.T) {
	h := newHost(t, agent.VM{ID: "a", Owner: "alice"})
	h.fund(t, "alice", "ha", 3600)
	state := filepath.Join(t.TempDir(), "agent.json")
	late := &answerLateBank{next: h.bank, held: make(chan struct{}), release: make(chan struct{})}
	now := func() time.Time { return *h.clock }
	a := must(agent.New(agent.Config{Host: "host-1", Enforcer: h.sim, Capturer: late, Now: now, StateFile: state}))
	if _, err := a.SetBids(context.Background(), bidReq(wire.Bid{VM: "a", Owner: "alice", Plan: "pa", Hold: "ha", Budget: 3600, Duration: wire.Duration(time.Hour)})); err != nil {
		t.Fatal(err)
	}
	*h.clock = t0.Add(10 * time.Minute)
	ctx, stop := context.WithCancel(context.Background())
	ticked := make(chan error, 1)
	go func() {
		_, err := a.Tick(ctx, now())
		ticked <- err
	}()
	within(t, late.held, "the capture reached the bank")
	stop()
	close(late.release)
	if err := within(t, ticked, "the stopped tick ended"); err != nil && strings.Contains(err.Error(), "capture") {
		t.Errorf("the capture in flight was cut by the stop: %v", err)
	}
	var saved struct {
		Totals []struct {
			Captured money.Micro `json:"captured"`
		} `json:"totals"`
	}
	if err := json.Unmarshal(must(os.ReadFile(state)), &saved); err != nil {
		t.Fatal(err)
	}
	var book money.Micro
	for _, tot := range saved.Totals {
		book += tot.Captured
	}
	if bank := h.captured(t, "ha"); book != bank || bank == 0 {
		t.Errorf("after the stop the agent's book says %d captured, the bank %d", book, bank)
	}
}
