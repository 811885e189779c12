package faults

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// attempt bounds one try of an operation; a client then tries again with
// the same id.
const attempt = 2 * time.Second

// Kinds of operations.
const (
	kindTransfer = "transfer"
	kindSpend    = "spend"
	kindCancel   = "cancel"
	kindSubmit   = "submit"
)

var kinds = []string{kindTransfer, kindSpend, kindCancel, kindSubmit}

// retryable says whether err leaves the operation's outcome open, so a
// client tries again with the same id: the service unavailable, no answer
// in time, no responder, a lost connection — or, for a deadline, the
// admission race a retry may win.
func retryable(err error) bool {
	switch {
	case errors.Is(err, wire.ErrUnavailable), errors.Is(err, wire.ErrInternal),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionReconnecting),
		is(err, broker.ErrAdmitRace):
		return true
	}
	return false
}

// is is errors.Is for an error that came over the wire: its code is kept,
// its sentinel's identity is not, its text is.
func is(err, sentinel error) bool {
	return errors.Is(err, sentinel) || err != nil && strings.Contains(err.Error(), sentinel.Error())
}

// journal is what the workload saw: when each kind of operation was answered,
// what was acknowledged, and what was refused.
type journal struct {
	mu      sync.Mutex
	answers map[string][]time.Time
	retries map[string]int
	errs    map[string]map[string]int // retried errors, by kind, since the last sample
	waits   map[string][][2]time.Time // each operation, by kind: first try, answer
	refused map[string][]string       // unexpected definitive refusals, by kind

	// transfers acknowledged: net change of each payer.
	net map[string]money.Micro
	// plans acknowledged (spends and admitted jobs), by user: plan → hold.
	plans map[string]map[string]string
	// cancels acknowledged.
	cancelled map[string]bool
	// jobs refused admission (a definitive answer: the deadline cannot be
	// met or paid).
	notAdmitted int
	// slow are the operations that waited longer than slowOp, with their
	// tries: what a failed row's bound was spent on.
	slow []slowOp
}

// slowOp is an operation answered after more than half of MaxGap, and each
// of its tries: when it began (after the first), how long it took, and
// what it got.
type slowOp struct {
	kind, id   string
	start, end time.Time
	tries      []string
}

func (o slowOp) String() string {
	return fmt.Sprintf("%s %s (%s): %s", o.kind, o.id, o.end.Sub(o.start).Round(time.Millisecond), strings.Join(o.tries, "; "))
}

func newJournal() *journal {
	return &journal{answers: map[string][]time.Time{}, retries: map[string]int{}, errs: map[string]map[string]int{},
		waits: map[string][][2]time.Time{}, refused: map[string][]string{},
		net: map[string]money.Micro{}, plans: map[string]map[string]string{}, cancelled: map[string]bool{}}
}

func (l *journal) answered(kind string, at time.Time) {
	l.mu.Lock()
	l.answers[kind] = append(l.answers[kind], at)
	l.mu.Unlock()
}

func (l *journal) plan(user, plan, hold string) {
	l.mu.Lock()
	if l.plans[user] == nil {
		l.plans[user] = map[string]string{}
	}
	l.plans[user][plan] = hold
	l.mu.Unlock()
}

// sampleErrors gives the errors retried since the last call, and forgets them.
func (l *journal) sampleErrors() map[string]map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.errs
	l.errs = map[string]map[string]int{}
	return out
}

// gap is the longest time in [from, to] in which no operation of kind was
// answered, counted from the last answer before from.
func (l *journal) gap(kind string, from, to time.Time) time.Duration {
	l.mu.Lock()
	ts := slices.Clone(l.answers[kind])
	l.mu.Unlock()
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	prev := from
	for _, t := range ts {
		if t.Before(from) {
			prev = t
		}
	}
	var longest time.Duration
	for _, t := range append(ts, to) {
		if t.Before(from) || t.After(to) {
			continue
		}
		longest = max(longest, t.Sub(prev))
		prev = t
	}
	return longest
}

// do runs op until it gives a definitive answer, each try bounded by
// attempt, and records the answer's time; it gives up only when ctx ends.
func (l *journal) do(ctx context.Context, kind, id string, op func(ctx context.Context) error) error {
	start := time.Now()
	var tries []string
	for {
		began := time.Now()
		actx, cancel := context.WithTimeout(ctx, attempt)
		err := op(actx)
		cancel()
		end := time.Now()
		tries = append(tries, fmt.Sprintf("+%s %s %v", began.Sub(start).Round(time.Millisecond), end.Sub(began).Round(time.Millisecond), cmp.Or(err, error(errOK))))
		if err == nil || !retryable(err) {
			l.waited(kind, start, end)
			if end.Sub(start) > MaxGap/2 {
				l.mu.Lock()
				l.slow = append(l.slow, slowOp{kind: kind, id: id, start: start, end: end, tries: tries})
				l.mu.Unlock()
			}
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: no answer before the test's end: %v", kind, err)
		}
		l.mu.Lock()
		l.retries[kind]++
		if l.errs[kind] == nil {
			l.errs[kind] = map[string]int{}
		}
		msg := err.Error()
		if len(msg) > 120 {
			msg = msg[:120]
		}
		l.errs[kind][msg]++
		l.mu.Unlock()
		time.Sleep(time.Duration(20+rand.IntN(30)) * time.Millisecond)
	}
}

// errOK stands for a try's nil error in a slow operation's tries.
var errOK = errors.New("answered")

// slowOps are the slow operations that overlapped [from, to].
func (l *journal) slowOps(from, to time.Time) []slowOp {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []slowOp
	for _, o := range l.slow {
		if !o.end.Before(from) && !o.start.After(to) {
			out = append(out, o)
		}
	}
	return out
}

// workload is the clients: each loops until stop, finishing the operation
// it is on.
type workload struct {
	c    *cluster
	log  *journal
	stop chan struct{}
	wg   sync.WaitGroup
	errs chan error
	// cancels are plans to cancel (every other spend, every admitted job).
	cancels chan [2]string // user, plan
}

func startWorkload(t testing.TB, c *cluster) *workload {
	w := &workload{c: c, log: newJournal(), stop: make(chan struct{}), errs: make(chan error, 16), cancels: make(chan [2]string, 10_000)}
	// The test's end bounds every operation's retries.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	t.Cleanup(cancel)
	run := func(name string, loop func(ctx context.Context, nc *nats.Conn, n int) error) {
		nc := c.connect(t, "faults-"+name) // each client its own connection, so some are on the node that dies
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for n := 0; ; n++ {
				select {
				case <-w.stop:
					return
				default:
				}
				if err := loop(ctx, nc, n); err != nil {
					w.errs <- fmt.Errorf("%s: %w", name, err)
					return
				}
			}
		}()
	}
	for k := range 2 {
		rng := rand.New(rand.NewPCG(uint64(k), 16))
		run(fmt.Sprintf("transfers-%d", k), func(ctx context.Context, nc *nats.Conn, n int) error {
			from, to := payers[rng.IntN(len(payers))], payers[rng.IntN(len(payers))]
			for to == from {
				to = payers[rng.IntN(len(payers))]
			}
			req := &wire.TransferRequest{ID: fmt.Sprintf("tr-%d-%d", k, n), From: from, To: to, Amount: money.Micro(1 + rng.IntN(1000))}
			err := w.log.do(ctx, kindTransfer, req.ID, func(ctx context.Context) error { _, err := c.bank(nc).Transfer(ctx, req); return err })
			if err != nil {
				return fmt.Errorf("transfer %s: %w", req.ID, err)
			}
			w.log.mu.Lock()
			w.log.net[from] -= req.Amount
			w.log.net[to] += req.Amount
			w.log.mu.Unlock()
			time.Sleep(10 * time.Millisecond)
			return nil
		})
	}
	for k, user := range spenders[:2] {
		rng := rand.New(rand.NewPCG(uint64(10+k), 16))
		vms := c.vmsOf(user)
		run("spends-"+user, func(ctx context.Context, nc *nats.Conn, n int) error {
			req := &wire.SpendRequest{ID: fmt.Sprintf("sp-%s-%d", user, n), User: user, Budget: money.PerCredit / 100,
				Duration: wire.Duration(time.Duration(5+rng.IntN(20)) * time.Second), VMs: []string{vms[rng.IntN(len(vms))]}, Strategy: wire.StrategyFair}
			var rep wire.SpendReply
			err := w.log.do(ctx, kindSpend, req.ID, func(ctx context.Context) (err error) { rep, err = c.broker(nc).Spend(ctx, req); return err })
			if err != nil {
				return fmt.Errorf("spend %s: %w", req.ID, err)
			}
			w.log.plan(user, rep.Plan.ID, rep.Plan.Hold)
			if n%2 == 0 {
				w.cancels <- [2]string{user, rep.Plan.ID}
			}
			time.Sleep(50 * time.Millisecond)
			return nil
		})
	}
	for k := range 2 {
		run(fmt.Sprintf("cancels-%d", k), w.cancelLoop(c))
	}
	rng := rand.New(rand.NewPCG(99, 16))
	vms := c.vmsOf("carol")
	run("submits", func(ctx context.Context, nc *nats.Conn, n int) error {
		job := wire.JobSpec{Name: fmt.Sprintf("job-%d", n), VMs: []string{vms[rng.IntN(len(vms))]},
			Maps: 4, Reduces: 1, MapSlots: 2, ReduceSlots: 1, Profile: strategies.JobProfile{
				MapAvg: 12, MapMax: 18, Sh1Avg: 3, Sh1Max: 5, ShTypAvg: 2, ShTypMax: 4, ReduceAvg: 6, ReduceMax: 9}}
		req := &wire.SubmitRequest{ID: fmt.Sprintf("job-%d", n), User: "carol", Job: job, Deadline: time.Now().Add(2 * time.Hour),
			MaxPrice: 50 * money.PerCredit}
		var rep wire.SubmitReply
		err := w.log.do(ctx, kindSubmit, req.ID, func(ctx context.Context) (err error) { rep, err = c.broker(nc).Submit(ctx, req); return err })
		switch {
		// Not admitted, a definitive answer: the deadline cannot be met, or
		// carol cannot pay for it — as the broker priced it, or as the bank
		// found her balance when it held the price (her cancels' releases
		// race her submits).
		case is(err, broker.ErrDeadline), is(err, broker.ErrUnaffordable), errors.Is(err, wire.ErrInsufficient):
			w.log.mu.Lock()
			w.log.notAdmitted++
			w.log.mu.Unlock()
		case err != nil:
			return fmt.Errorf("submit %s: %w", req.ID, err)
		default:
			w.log.plan("carol", rep.Plan.ID, rep.Plan.Hold)
			w.cancels <- [2]string{"carol", rep.Plan.ID}
		}
		time.Sleep(100 * time.Millisecond)
		return nil
	})
	w.startCLI(ctx, run)
	return w
}

// finish stops the clients once each has its current operation answered.
func (w *workload) finish(t testing.TB) {
	t.Helper()
	close(w.stop)
	w.wg.Wait()
	w.check(t)
}

// check fails t with a client's error, if one gave up.
func (w *workload) check(t testing.TB) {
	t.Helper()
	select {
	case err := <-w.errs:
		t.Fatal(err)
	default:
	}
}

// cancelLoop is a client cancelling the plans queued for it, each by its
// id.
func (w *workload) cancelLoop(c *cluster) func(ctx context.Context, nc *nats.Conn, n int) error {
	return func(ctx context.Context, nc *nats.Conn, n int) error {
		var job [2]string
		select {
		case job = <-w.cancels:
		case <-w.stop:
			return nil
		}
		user, plan := job[0], job[1]
		req := &wire.CancelRequest{Plan: plan, User: user, ID: "cancel-" + plan}
		err := w.log.do(ctx, kindCancel, req.ID, func(ctx context.Context) error { _, err := c.broker(nc).Cancel(ctx, req); return err })
		switch {
		case is(err, broker.ErrNotRunning): // it ended first: an answer
		case err != nil:
			return fmt.Errorf("cancel %s: %w", plan, err)
		}
		w.log.mu.Lock()
		w.log.cancelled[plan] = true
		w.log.mu.Unlock()
		return nil
	}
}
