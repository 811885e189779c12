package sim_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/hadoopvm/sim"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// deadlineWorld is a running market on four simulated 2-core hosts: a
// best-effort user spending a fair plan on a long job over a VM on every
// host, a deadline user with a cluster of four 2-slot VMs per job, and a
// user who can afford almost nothing. The broker runs in the simulation,
// fed the jobs' progress as the YARN monitor would.
type deadlineWorld struct {
	s     *sim.Sim
	b     *broker.Broker
	start time.Time
}

const deadlineJobCount = 8

func newDeadlineWorld(t testing.TB, seed uint64) *deadlineWorld {
	t.Helper()
	return newDeadlineWorldOrdered(t, seed, "")
}

// newDeadlineWorldOrdered is newDeadlineWorld with best-effort jobs
// ordered by the overlap policy order.
func newDeadlineWorldOrdered(t testing.TB, seed uint64, order string) *deadlineWorld {
	t.Helper()
	var hosts []sim.HostSpec
	var vms []sim.VMSpec
	for h := range 4 {
		host := fmt.Sprint("h", h)
		hosts = append(hosts, sim.HostSpec{ID: host, Cores: 2})
		vms = append(vms, sim.VMSpec{ID: "be-" + host, Owner: "be", Host: host, Slots: 2},
			sim.VMSpec{ID: "poor-" + host, Owner: "poor", Host: host, Slots: 2})
		for k := range deadlineJobCount {
			vms = append(vms, sim.VMSpec{ID: fmt.Sprintf("dl%d-%s", k, host), Owner: "dl", Host: host, Slots: 2})
		}
	}
	w := &deadlineWorld{start: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	var err error
	if w.s, err = sim.New(sim.Config{Seed: seed, Start: w.start, Tick: 10 * time.Second}, hosts, vms); err != nil {
		t.Fatal(err)
	}
	w.s.Ledger().Grant("dl", 10_000*money.PerCredit)
	w.s.Ledger().Grant("poor", money.PerCredit/2)
	w.s.Ledger().Grant("be", 10_000*money.PerCredit)
	if w.b, err = broker.New(broker.Config{Agents: w.s.Agents(), Bank: w.s.Ledger(), Now: w.s.Now, Tick: 10 * time.Second,
		Settle: 20 * time.Second, Serial: true, MinHistory: 4, JobOrder: order}); err != nil {
		t.Fatal(err)
	}
	w.s.Attach(w.b)
	w.s.Observe(sim.ProgressFeed(w.b))
	ctx := context.Background()
	be := []string{"be-h0", "be-h1", "be-h2", "be-h3"}
	if _, err := w.b.Spend(ctx, &wire.SpendRequest{ID: "plan-be", User: "be", Budget: 1000 * money.PerCredit,
		Duration: wire.Duration(2 * time.Hour), VMs: be, Strategy: wire.StrategyFair}); err != nil {
		t.Fatal(err)
	}
	if err := w.s.Submit(sim.JobSpec{ID: "be-long", User: "be", Name: "long", VMs: be, Maps: 400, Map: sim.Dist{Mean: 30, CV: 0.3}}); err != nil {
		t.Fatal(err)
	}
	return w
}

// job is deadline job k: 16 maps and 2 reduces of about 20 s at a full
// share on its own four VMs, and its ARIA profile.
func (w *deadlineWorld) job(k int) (wire.JobSpec, sim.JobSpec) {
	var vms []string
	for h := range 4 {
		vms = append(vms, fmt.Sprintf("dl%d-h%d", k, h))
	}
	name := fmt.Sprint("etl-", k)
	spec := wire.JobSpec{Name: name, VMs: vms, Maps: 16, Reduces: 2, MapSlots: 8, ReduceSlots: 8,
		Profile: strategies.JobProfile{MapAvg: 20, MapMax: 27, ReduceAvg: 20, ReduceMax: 27}}
	return spec, sim.JobSpec{ID: name, User: "dl", Name: name, VMs: vms, Maps: 16, Reduces: 2,
		Map: sim.Dist{Mean: 20, CV: 0.1}, Reduce: sim.Dist{Mean: 20, CV: 0.1}}
}

// TestDeadlineJobsMeetAdmittedDeadlines: eight jobs arrive 25 s apart, more than the hosts can run at their reserved share, at
// a market where a best-effort plan keeps every host busy; each is quoted,
// admitted with a deadline from its curve (or the earliest its budget
// buys), held and run by EDF as spending. Every job finishes by its
// admitted deadline, pays no more than its price, the best-effort job keeps
// progressing, quotes after the run come from the regression over the
// finished jobs, and a user who cannot pay is told so at quote time with nothing held.
func TestDeadlineJobsMeetAdmittedDeadlines(t *testing.T) {
	for seed := range uint64(5) {
		t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) { deadlineJobs(t, seed) })
	}
}

func deadlineJobs(t *testing.T, seed uint64) {
	w := newDeadlineWorld(t, seed)
	ctx := context.Background()
	admitted := map[string]wire.Job{}
	for k := range deadlineJobCount {
		if err := w.s.RunUntil(w.start.Add(30*time.Second + time.Duration(k)*25*time.Second)); err != nil {
			t.Fatal(err)
		}
		spec, simJob := w.job(k)
		q, err := w.b.Quote(ctx, &wire.QuoteRequest{User: "dl", Job: spec})
		if err != nil {
			t.Fatalf("quote %d: %v", k, err)
		}
		if len(q.Curve) != 10 || q.Curve[0].Deadline.Before(w.s.Now()) {
			t.Fatalf("quote %d: %+v", k, q)
		}
		for i := 1; i < len(q.Curve); i++ {
			if q.Curve[i].Price > q.Curve[i-1].Price || !q.Curve[i].Deadline.After(q.Curve[i-1].Deadline) {
				t.Fatalf("quote %d: the price rises with the deadline: %+v", k, q.Curve)
			}
		}
		req := &wire.SubmitRequest{ID: fmt.Sprint("job-", k), User: "dl", Job: spec}
		if k%2 == 0 {
			req.Deadline = q.Curve[2].Deadline
		} else {
			req.Budget = q.Curve[4].Price
		}
		rep, err := w.b.Submit(ctx, req)
		if err != nil {
			t.Fatalf("submit %d: %v", k, err)
		}
		t.Logf("%s at %s: %s work %.0f s (mean %.0f, sd %.1f), earliest %s, deadline %s, price %s, %d queued",
			spec.Name, w.s.Now().Sub(w.start), q.Source, q.Work, q.Mean, q.SD, q.Earliest.Sub(w.start), rep.Job.Deadline.Sub(w.start), rep.Job.Price, q.Queued)
		admitted[spec.Name] = rep.Job
		simJob.Submit = w.s.Now().Sub(w.start)
		if err := w.s.Submit(simJob); err != nil {
			t.Fatal(err)
		}
	}

	// A user whose balance pays for no point of the curve.
	poor := wire.JobSpec{Name: "report", VMs: []string{"poor-h0", "poor-h1"}, Maps: 16, Reduces: 2, MapSlots: 4, ReduceSlots: 4,
		Profile: strategies.JobProfile{MapAvg: 20, MapMax: 27, ReduceAvg: 20, ReduceMax: 27}}
	holds := w.s.Ledger().Holds()
	q, err := w.b.Quote(ctx, &wire.QuoteRequest{User: "poor", Job: poor})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range q.Curve {
		if p.Affordable {
			t.Fatalf("poor: %s at balance %s is affordable", p.Price, q.Balance)
		}
	}
	_, err = w.b.Submit(ctx, &wire.SubmitRequest{User: "poor", Job: poor, Deadline: q.Curve[len(q.Curve)-1].Deadline})
	if !errors.Is(err, broker.ErrUnaffordable) {
		t.Fatalf("poor submit: %v, want ErrUnaffordable", err)
	}
	if _, err = w.b.Submit(ctx, &wire.SubmitRequest{User: "poor", Job: poor, Budget: money.PerCredit / 4}); !errors.Is(err, broker.ErrUnaffordable) {
		t.Fatalf("poor submit by budget: %v, want ErrUnaffordable", err)
	}
	if got := w.s.Ledger().Holds(); got != holds {
		t.Fatalf("a refused job held money: %d holds, was %d", got, holds)
	}
	if bal, _ := w.s.Ledger().Balance(ctx, &wire.BalanceRequest{User: "poor"}); bal.Balance != money.PerCredit/2 {
		t.Fatalf("poor's balance moved: %s", bal.Balance)
	}

	res, err := w.s.Run(3 * time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	finish := map[string]time.Time{}
	for _, r := range res {
		finish[r.ID] = r.Finish
	}
	if err := w.s.RunUntil(w.s.Now().Add(time.Minute)); err != nil { // let the plans settle
		t.Fatal(err)
	}
	jobs := w.b.Jobs(&wire.JobsRequest{User: "dl"}).Jobs
	if len(jobs) != deadlineJobCount {
		t.Fatalf("%d jobs listed, want %d", len(jobs), deadlineJobCount)
	}
	for _, j := range jobs {
		a := admitted[j.Name]
		f := finish[j.Name]
		t.Logf("%s: deadline %s, finished %s, paid %s of %s", j.Name, a.Deadline.Sub(w.start), f.Sub(w.start), j.Spent, a.Price)
		if f.IsZero() || f.After(a.Deadline) {
			t.Errorf("%s finished at %s, after its admitted deadline %s", j.Name, f.Sub(w.start), a.Deadline.Sub(w.start))
		}
		if j.Status != wire.JobDone {
			t.Errorf("%s: status %s", j.Name, j.Status)
		}
		if paid := w.s.Ledger().Paid(holdOf(w.b, j.ID)); paid > a.Price || paid <= 0 {
			t.Errorf("%s paid %s, its price is %s", j.Name, paid, a.Price)
		}
	}
	// With the jobs done, the estimate is MRM's regression over their
	// measured work, no longer the profile.
	spec, _ := w.job(0)
	again, err := w.b.Quote(ctx, &wire.QuoteRequest{User: "dl", Job: spec})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the run: %s work %.0f s (mean %.0f, sd %.1f)", again.Source, again.Work, again.Mean, again.SD)
	if again.Source != "history" || again.Mean < 40 || again.Mean > 100 {
		t.Errorf("after %d finished jobs the estimate is %s, mean %.0f s", deadlineJobCount, again.Source, again.Mean)
	}
	if be := finish["be-long"]; be.IsZero() {
		t.Error("the best-effort job did not finish")
	}
}

// TestDeadlineControlAndEDF: two jobs on the same hosts run one at a time,
// the earlier deadline first (the other waits with no bids); a job whose
// profile is too optimistic falls behind and its control loop (ARIA over
// the tasks left, or Jockey over a C(p, a) table from the simulator) buys
// it more than the reserved share. Bad requests are refused.
func TestDeadlineControlAndEDF(t *testing.T) {
	for _, jockey := range []bool{false, true} {
		t.Run(fmt.Sprint("jockey=", jockey), func(t *testing.T) {
			w := newDeadlineWorld(t, 3)
			ctx := context.Background()
			if err := w.s.RunUntil(w.start.Add(30 * time.Second)); err != nil {
				t.Fatal(err)
			}
			// The profile says 20 s maps; they take 40.
			spec, slow := w.job(0)
			slow.Map.Mean, slow.Reduce.Mean = 40, 40
			if jockey {
				tbl, err := sim.JockeyTable(slow, 2, 2, []float64{0.2, 0.4, 0.6, 0.8, 0.95}, 11, 3, 1)
				if err != nil {
					t.Fatal(err)
				}
				spec.Table = sim.WireTable(tbl)
			}
			q, err := w.b.Quote(ctx, &wire.QuoteRequest{User: "dl", Job: spec})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.b.Submit(ctx, &wire.SubmitRequest{ID: "job-slow", User: "dl", Job: spec, Deadline: q.Curve[0].Deadline}); err != nil {
				t.Fatal(err)
			}
			slow.Submit = w.s.Now().Sub(w.start)
			if err := w.s.Submit(slow); err != nil {
				t.Fatal(err)
			}
			other, otherSim := w.job(1)
			q2, err := w.b.Quote(ctx, &wire.QuoteRequest{User: "dl", Job: other})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.b.Submit(ctx, &wire.SubmitRequest{ID: "job-other", User: "dl", Job: other, Deadline: q2.Curve[9].Deadline}); err != nil {
				t.Fatal(err)
			}
			otherSim.Submit = slow.Submit
			if err := w.s.Submit(otherSim); err != nil {
				t.Fatal(err)
			}
			status := func() map[string]wire.Job {
				out := map[string]wire.Job{}
				for _, j := range w.b.Jobs(&wire.JobsRequest{}).Jobs {
					out[j.ID] = j
				}
				return out
			}
			if err := w.s.RunUntil(w.s.Now().Add(20 * time.Second)); err != nil {
				t.Fatal(err)
			}
			st := status()
			if st["job-slow"].Status != wire.JobRunning || st["job-other"].Status != wire.JobQueued {
				t.Fatalf("EDF: %s is %s and %s is %s", "job-slow", st["job-slow"].Status, "job-other", st["job-other"].Status)
			}
			maxShare := 0.0
			for range 30 {
				if err := w.s.RunUntil(w.s.Now().Add(10 * time.Second)); err != nil {
					t.Fatal(err)
				}
				if j := status()["job-slow"]; j.Status != wire.JobDone {
					maxShare = max(maxShare, j.Share)
				}
			}
			t.Logf("the slow job's share rose to %.2f", maxShare)
			if maxShare <= 0.8 {
				t.Errorf("the job fell behind and its share stayed at %.2f", maxShare)
			}
		})
	}
	w := newDeadlineWorld(t, 3)
	ctx := context.Background()
	spec, _ := w.job(0)
	if _, err := w.b.Spend(ctx, &wire.SpendRequest{User: "dl", Budget: 1000, Duration: wire.Duration(time.Hour), VMs: spec.VMs, Strategy: wire.StrategyDeadline}); !errors.Is(err, wire.ErrBadRequest) {
		t.Errorf("spend with the deadline strategy: %v", err)
	}
	if _, err := w.b.JobProgress(ctx, &wire.ProgressRequest{User: "dl", Job: "nope", Progress: 0.5}); !errors.Is(err, broker.ErrUnknownJob) {
		t.Errorf("progress of an unknown job: %v", err)
	}
	if _, err := w.b.JobProgress(ctx, &wire.ProgressRequest{User: "dl", Job: "etl-0", Progress: 1.5}); !errors.Is(err, wire.ErrBadRequest) {
		t.Errorf("progress 1.5: %v", err)
	}
	busy := wire.JobSpec{Name: "busy", VMs: []string{"be-h0"}, Maps: 1, MapSlots: 1, Profile: strategies.JobProfile{MapAvg: 1, MapMax: 1}}
	// Several plans may bid on one VM (their rates add up): a job on a VM
	// another plan bids on is not refused for it.
	if _, err := w.b.Submit(ctx, &wire.SubmitRequest{User: "be", Job: busy, Budget: money.PerCredit}); errors.Is(err, wire.ErrConflict) {
		t.Errorf("a job on a VM another plan bids on: %v", err)
	}
}

// BenchmarkDeadlineQuote is the cost of one quote (estimate, earliest
// finish, ten priced points with their confidence) against a queue of
// admitted jobs, after enough finished jobs that the regression estimates.
func BenchmarkDeadlineQuote(b *testing.B) {
	w := newDeadlineWorld(b, 1)
	ctx := context.Background()
	for k := range deadlineJobCount {
		_ = w.s.RunUntil(w.start.Add(30*time.Second + time.Duration(k)*25*time.Second))
		spec, simJob := w.job(k)
		q, err := w.b.Quote(ctx, &wire.QuoteRequest{User: "dl", Job: spec})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.b.Submit(ctx, &wire.SubmitRequest{User: "dl", Job: spec, Deadline: q.Curve[2].Deadline}); err != nil {
			b.Fatal(err)
		}
		simJob.Submit = w.s.Now().Sub(w.start)
		_ = w.s.Submit(simJob)
	}
	_ = w.s.RunUntil(w.start.Add(6 * time.Minute)) // some done, some queued
	spec, _ := w.job(0)
	spec.Name, spec.VMs = "bench", []string{"poor-h0", "poor-h1"}
	q, err := w.b.Quote(ctx, &wire.QuoteRequest{User: "poor", Job: spec})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(q.Queued), "queued")
	b.ResetTimer()
	for b.Loop() {
		if _, err := w.b.Quote(ctx, &wire.QuoteRequest{User: "poor", Job: spec}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBestEffortJobsInOverlapOrder: best-effort jobs (no deadline) share
// the reserved share by Lin et al.'s policies. Three jobs of 48, 16 and 8
// maps arrive together, the largest first: MaxSRPT runs the small ones
// first and has a lower mean response than FIFO; a deadline job submitted
// meanwhile takes their hosts, and they wait until it is done.
func TestBestEffortJobsInOverlapOrder(t *testing.T) {
	mean := map[string]time.Duration{}
	for _, order := range []string{strategies.PolicyFIFO, strategies.PolicyMaxSRPT, strategies.PolicyKLPS} {
		w := newDeadlineWorldOrdered(t, 5, order)
		ctx := context.Background()
		if err := w.s.RunUntil(w.start.Add(30 * time.Second)); err != nil {
			t.Fatal(err)
		}
		for i, maps := range []int{48, 16, 8} {
			spec, simJob := w.job(i)
			spec.Maps, simJob.Maps = maps, maps
			if _, err := w.b.Submit(ctx, &wire.SubmitRequest{User: "dl", Job: spec, Budget: 2000 * money.PerCredit, BestEffort: true}); err != nil {
				t.Fatalf("%s: %v", order, err)
			}
			simJob.Submit = w.s.Now().Sub(w.start)
			if err := w.s.Submit(simJob); err != nil {
				t.Fatal(err)
			}
			w.s.RunUntil(w.s.Now().Add(time.Second))
		}
		if err := w.s.RunUntil(w.s.Now().Add(15 * time.Second)); err != nil {
			t.Fatal(err)
		}
		// A deadline job on the same hosts comes first.
		spec, simJob := w.job(3)
		q, err := w.b.Quote(ctx, &wire.QuoteRequest{User: "dl", Job: spec})
		if err != nil {
			t.Fatal(err)
		}
		admitted, err := w.b.Submit(ctx, &wire.SubmitRequest{User: "dl", Job: spec, Deadline: q.Curve[0].Deadline})
		if err != nil {
			t.Fatal(err)
		}
		simJob.Submit = w.s.Now().Sub(w.start)
		if err := w.s.Submit(simJob); err != nil {
			t.Fatal(err)
		}
		if err := w.s.RunUntil(w.s.Now().Add(15 * time.Second)); err != nil {
			t.Fatal(err)
		}
		for _, j := range w.b.Jobs(&wire.JobsRequest{}).Jobs {
			if j.Name != spec.Name && j.Status != wire.JobQueued && j.Status != wire.JobDone {
				t.Errorf("%s: best-effort %s is %s while a deadline job holds its hosts", order, j.Name, j.Status)
			}
		}
		res, err := w.s.Run(3 * time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		var sum time.Duration
		for _, r := range res {
			if r.ID == spec.Name && r.Finish.After(admitted.Job.Deadline) {
				t.Errorf("%s: the deadline job finished at %s, after %s", order, r.Finish.Sub(w.start), admitted.Job.Deadline.Sub(w.start))
			}
			if r.ID == "etl-0" || r.ID == "etl-1" || r.ID == "etl-2" {
				sum += r.Duration()
				t.Logf("%s: %s took %s", order, r.ID, r.Duration().Round(time.Second))
			}
		}
		mean[order] = sum / 3
	}
	t.Logf("mean response: %v", mean)
	if mean[strategies.PolicyMaxSRPT] >= mean[strategies.PolicyFIFO] {
		t.Errorf("MaxSRPT's mean response %s is not below FIFO's %s", mean[strategies.PolicyMaxSRPT], mean[strategies.PolicyFIFO])
	}
}
