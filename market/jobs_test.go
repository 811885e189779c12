package market_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
	"github.com/mrmarket/mrmarket/strategies"
)

// upMarket is `mrmarket up --hosts 3 --vms-per-host 2 --users alice,bob`
// on a virtual clock the test advances: alice owns h1-vm1, h2-vm1,
// h3-vm1, bob h1-vm2, h2-vm2, h3-vm2.
func upMarket(t *testing.T, tick time.Duration) (*market.Market, *time.Time, bank.Client, broker.Client) {
	t.Helper()
	hosts, err := market.Layout(3, 2, []string{"alice", "bob"})
	if err != nil {
		t.Fatal(err)
	}
	return startAt(t, time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC), market.Config{TickPeriod: tick, Hosts: hosts, Users: []string{"alice", "bob"}})
}

// exampleJob reads a job file of examples/ as the CLI does.
func exampleJob(t *testing.T, name string) wire.JobSpec {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "examples", name))
	if err != nil {
		t.Fatal(err)
	}
	var spec wire.JobSpec
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		t.Fatal(err)
	}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	return spec
}

// jobOf is user's job id as the broker lists it.
func jobOf(t *testing.T, brc broker.Client, user, id string) wire.Job {
	t.Helper()
	jobs, err := brc.Jobs(context.Background(), &wire.JobsRequest{User: user})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Jobs {
		if j.ID == id {
			return j
		}
	}
	t.Fatalf("job %s of %s not listed: %+v", id, user, jobs.Jobs)
	return wire.Job{}
}

// TestExampleJobMeetsItsDeadline is `mrmarket up`'s deadline walkthrough on
// a virtual clock: bob spends on his VMs beside alice's (so every host is
// contended), alice quotes examples/etl.json, submits it with a deadline
// from the curve signing at most the quoted price, and the market's
// simulated Hadoop runs it at the CPU its VMs get. Its progress, reported
// over NATS as the YARN monitor does, rises; the predicted finish
// converges on the real one; it is done before its deadline; the bank
// captured no more than the quoted price; the ledger holds.
func TestExampleJobMeetsItsDeadline(t *testing.T) {
	ctx := context.Background()
	const tick = 5 * time.Second
	m, clock, bc, brc := upMarket(t, tick)
	start := *clock
	grant(t, bc, "alice", "100")
	grant(t, bc, "bob", "100")
	if _, err := brc.Spend(ctx, &wire.SpendRequest{ID: "p-bob", User: "bob", Budget: credits(t, "10"), Duration: wire.Duration(time.Hour),
		VMs: []string{"h1-vm2", "h2-vm2", "h3-vm2"}, Strategy: wire.StrategyFair}); err != nil {
		t.Fatal(err)
	}
	*clock = clock.Add(tick)
	if err := m.Tick(ctx, *clock); err != nil {
		t.Fatal(err)
	}

	spec := exampleJob(t, "etl.json")
	q, err := brc.Quote(ctx, &wire.QuoteRequest{User: "alice", Job: spec})
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Curve) < 3 || !q.Curve[2].Affordable {
		t.Fatalf("quote: %+v", q)
	}
	point := q.Curve[2]
	rep, err := brc.Submit(ctx, &wire.SubmitRequest{ID: "job-etl", User: "alice", Job: spec, Deadline: point.Deadline, MaxPrice: point.Price})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("quoted %.0f s of work from %s; deadline %s for %s (earliest %s)", q.Work, q.Source, point.Deadline.Sub(*clock), point.Price, q.Earliest.Sub(*clock))
	if rep.Job.Price > point.Price {
		t.Fatalf("admitted at %s, quoted %s", rep.Job.Price, point.Price)
	}
	usage0 := map[string]time.Duration{}
	for _, h := range []string{"host-1", "host-2"} {
		u, _ := m.Sims[h].Usage(ctx)
		for vm, d := range u {
			usage0[vm] = d
		}
	}
	submitted := *clock

	type seen struct {
		at       time.Time
		progress float64
		predict  time.Time
	}
	var trail []seen
	var job wire.Job
	for end := point.Deadline.Add(time.Minute); clock.Before(end); {
		*clock = clock.Add(tick)
		if err := m.Tick(ctx, *clock); err != nil {
			t.Fatal(err)
		}
		job = jobOf(t, brc, "alice", "job-etl")
		if len(trail) > 0 && job.Progress < trail[len(trail)-1].progress {
			t.Fatalf("progress fell from %v to %v", trail[len(trail)-1].progress, job.Progress)
		}
		trail = append(trail, seen{*clock, job.Progress, job.Predict})
		if job.Status != wire.JobRunning {
			break
		}
	}
	if job.Status != wire.JobDone || job.Finished.After(point.Deadline) {
		t.Fatalf("job at %s: %+v, deadline %s", clock.Sub(start), job, point.Deadline.Sub(start))
	}
	run := job.Finished.Sub(submitted)
	t.Logf("done after %s (deadline %s after submit), %d reports seen", run, point.Deadline.Sub(submitted), len(trail))
	// Progress rose step by step, not at once at the end.
	steps := map[float64]bool{}
	for _, s := range trail {
		if s.progress > 0 && s.progress < 1 {
			steps[s.progress] = true
		}
	}
	if len(steps) < 5 {
		t.Fatalf("progress took %d values between 0 and 1: %+v", len(steps), trail)
	}
	// The prediction converges: its error over the last quarter of the run
	// is smaller than over the first, and small at the end.
	errAt := func(from, to float64) float64 {
		worst := 0.0
		for _, s := range trail {
			if f := s.at.Sub(submitted).Seconds() / run.Seconds(); f >= from && f < to && s.progress < 1 {
				worst = max(worst, math.Abs(s.predict.Sub(job.Finished).Seconds()))
			}
		}
		return worst
	}
	first, last := errAt(0, 0.25), errAt(0.75, 1)
	t.Logf("prediction error: first quarter %.0f s, last quarter %.0f s", first, last)
	if last >= first || last > 0.15*run.Seconds() {
		t.Fatalf("the predicted finish does not converge: first quarter off by %.0f s, last quarter by %.0f s (run %s)", first, last, run)
	}
	// The job's VMs did the work: busy while it ran, each at most its host.
	for _, vm := range spec.VMs {
		h := "host-" + vm[1:2]
		u, _ := m.Sims[h].Usage(ctx)
		got := (u[vm] - usage0[vm]).Seconds()
		t.Logf("%s: %.1f CPU-seconds, %.0f%% of its host over the run", vm, got, 100*got/run.Seconds())
		if got < 0.5*q.Mean/2 || got > clock.Sub(submitted).Seconds() {
			t.Fatalf("%s used %.0f CPU-seconds for a job of %.0f s of work over 2 VMs", vm, got, q.Mean)
		}
	}

	// Settled: what alice paid is the bank's, at most the quote.
	for i := 0; i < 3; i++ {
		*clock = clock.Add(tick)
		if err := m.Tick(ctx, *clock); err != nil {
			t.Fatal(err)
		}
	}
	bal, err := bc.Balance(ctx, &wire.BalanceRequest{User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("alice paid %s of the quoted %s", bal.Spent, point.Price)
	if bal.Spent <= 0 || bal.Spent > point.Price || bal.Held != 0 {
		t.Fatalf("alice paid %s (held %s) for a job quoted %s", bal.Spent, bal.Held, point.Price)
	}
	checkLedger(t, bc)
}

// TestExampleJobsShareTheHosts: the three example jobs submitted one after
// the other, each with a deadline from its own quote — etl (alice) and
// report (bob) share host-1, so EDF runs one of them there at a time, and
// the quotes account for it — all finish by their deadlines, each paying
// at most its price.
func TestExampleJobsShareTheHosts(t *testing.T) {
	ctx := context.Background()
	const tick = 5 * time.Second
	m, clock, bc, brc := upMarket(t, tick)
	grant(t, bc, "alice", "100")
	grant(t, bc, "bob", "100")
	type admitted struct {
		user string
		job  wire.Job
	}
	var jobs []admitted
	for _, c := range []struct{ file, user string }{{"etl.json", "alice"}, {"report.json", "bob"}, {"sort.json", "alice"}} {
		spec := exampleJob(t, c.file)
		q, err := brc.Quote(ctx, &wire.QuoteRequest{User: c.user, Job: spec})
		if err != nil {
			t.Fatal(err)
		}
		p := q.Curve[2]
		rep, err := brc.Submit(ctx, &wire.SubmitRequest{ID: "job-" + spec.Name, User: c.user, Job: spec, Deadline: p.Deadline, MaxPrice: p.Price})
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		t.Logf("%s: %.0f s of work, %d queued before it, deadline %s, price %s", spec.Name, q.Work, q.Queued, p.Deadline.Sub(*clock), p.Price)
		jobs = append(jobs, admitted{c.user, rep.Job})
		*clock = clock.Add(tick)
		if err := m.Tick(ctx, *clock); err != nil {
			t.Fatal(err)
		}
	}
	last := jobs[0].job.Deadline
	for _, j := range jobs {
		if j.job.Deadline.After(last) {
			last = j.job.Deadline
		}
	}
	for clock.Before(last.Add(time.Minute)) {
		*clock = clock.Add(tick)
		if err := m.Tick(ctx, *clock); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range jobs {
		j := jobOf(t, brc, a.user, a.job.ID)
		t.Logf("%s: done at %s, deadline %s, spent %s of %s", j.Name, j.Finished.Format(time.TimeOnly), j.Deadline.Format(time.TimeOnly), j.Spent, j.Price)
		if j.Status != wire.JobDone || j.Finished.After(j.Deadline) || j.Spent > j.Price {
			t.Errorf("%s: %+v", j.Name, j)
		}
	}
	for _, u := range []string{"alice", "bob"} {
		bal, err := bc.Balance(ctx, &wire.BalanceRequest{User: u})
		if err != nil {
			t.Fatal(err)
		}
		var price int64
		for _, a := range jobs {
			if a.user == u {
				price += int64(a.job.Price)
			}
		}
		if bal.Held != 0 || int64(bal.Spent) > price || bal.Spent <= 0 {
			t.Errorf("%s paid %s (held %s) for jobs priced %d µ", u, bal.Spent, bal.Held, price)
		}
	}
	checkLedger(t, bc)
}

// TestJobsRunOnTheWallClock: in a market run on the wall clock (mrmarket
// up), a submitted job runs by itself and is reported done before its
// deadline.
func TestJobsRunOnTheWallClock(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hosts, err := market.Layout(2, 2, []string{"alice", "bob"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := market.Start(ctx, market.Config{Dir: t.TempDir(), NATSPort: -1, TickPeriod: 20 * time.Millisecond, Hosts: hosts})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() {
		cancel()
		select {
		case <-done:
			m.Close()
		case <-time.After(10 * time.Second):
			// Fail rather than hang the package on a stuck component
			// (the market is left open).
			t.Error("the market's Run did not return within 10s of its context's end: a component is stuck")
		}
	}()
	nc, err := m.NC("wallclock-jobs")
	if err != nil {
		t.Fatal(err)
	}
	bc, brc := bank.Client{NC: nc, Keys: m.Keys()}, broker.Client{NC: nc, Keys: m.Keys()}
	grant(t, bc, "alice", "100")
	// About 2 s of work at a full share, due in 30 s.
	spec := wire.JobSpec{Name: "quick", VMs: []string{"h1-vm1", "h2-vm1"}, Maps: 8, Reduces: 2, MapSlots: 2, ReduceSlots: 2,
		Profile: strategies.JobProfile{MapAvg: 0.4, MapMax: 0.5, ReduceAvg: 0.4, ReduceMax: 0.5}}
	_, err = brc.Submit(ctx, &wire.SubmitRequest{User: "alice", Job: spec, Deadline: time.Now().Add(30 * time.Second), MaxPrice: credits(t, "1")})
	if err != nil {
		t.Fatal(err)
	}
	testpoll.CheckFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		jobs, err := brc.Jobs(ctx, &wire.JobsRequest{User: "alice"})
		if err != nil || len(jobs.Jobs) != 1 {
			return fmt.Errorf("alice's jobs: %+v, %v", jobs, err)
		}
		j := jobs.Jobs[0]
		if j.Status != wire.JobDone {
			return fmt.Errorf("job %s is %s at %.0f%% after 20s", j.ID, j.Status, 100*j.Progress)
		}
		if j.Finished.After(j.Deadline) {
			return fmt.Errorf("job %s finished at %s, after its deadline %s", j.ID, j.Finished, j.Deadline)
		}
		return nil
	})
	checkLedger(t, bc)
}
