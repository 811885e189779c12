package e2e

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/hadoopvm/worker"
	"github.com/mrmarket/mrmarket/hadoopvm/workertest"
	"github.com/mrmarket/mrmarket/hadoopvm/yarnfacade"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// tolerance is how far a measured time may be from the model's: the
// issue's 10 %.
const tolerance = 0.10

// wordCount is each worker's input: a CPU-bound word count of tens of
// seconds on a TCG guest that has a CPU to itself.
var wordCount = worker.Input{Kind: worker.WordCount, Splits: 8, SplitBytes: 16 << 20, Seed: 21}

// TestE2E runs the cases on one market and one set of guests (booting
// them is the suite's largest fixed cost): alice and bob each own a
// cluster of two worker guests, worker i of both on host CPU i, and spend
// 3:1 on them with fair plans; the agent divides the CPUs by those shares.
func TestE2E(t *testing.T) {
	wall := time.Now()
	w := newWorld(t, []worker.Input{wordCount, sortInput}, stageInput, 3, "alice", "bob")
	t.Cleanup(func() { w.report(time.Since(wall)) })
	a, b := w.clusters["alice"], w.clusters["bob"]
	// Every bid's rate over the whole run, for the charges' check.
	w.all = w.sample(time.Second)
	t.Cleanup(func() { w.all.end() })
	w.must(t, "spend", "--user", "alice", "--budget", "90", "--duration", "1h", "--vm", strings.Join(a.Workers, ","), "--id", "alice-fair")
	w.must(t, "spend", "--user", "bob", "--budget", "30", "--duration", "1h", "--vm", strings.Join(b.Workers, ","), "--id", "bob-fair")
	w.waitRatio("alice", "bob", 3)

	// Alice's time on the jobs' CPU clock in the CPU case: when the next
	// cases act during their jobs.
	var aliceCPU float64
	t.Run("a-cpu", func(t *testing.T) { aliceCPU = w.caseShares(t) })
	if aliceCPU == 0 {
		aliceCPU = 20
	}
	t.Run("a-shuffle", w.caseShuffle)
	t.Run("a-disk", w.caseDisk)
	t.Run("f-more", func(t *testing.T) { w.caseMore(t, aliceCPU) })
	t.Run("e-restart", func(t *testing.T) { w.caseRestart(t, aliceCPU) })
	t.Run("b-deadline", w.caseDeadline)
	t.Run("c-workflow", w.caseWorkflow)
	// Last: it replaces alice's fair plan.
	t.Run("d-bottleneck", w.caseBottleneck)
}

// cpuShares are each user's CPU share in the model: the mean of the
// shares the agent set on their workers, as the broker heard them.
func (w *world) cpuShares() map[string]float64 { return w.userShares(sample{vms: w.shares()}) }

// userShares are each user's CPU share in a sample.
func (w *world) userShares(s sample) map[string]float64 {
	out := map[string]float64{}
	for u, c := range w.clusters {
		for _, vm := range c.Workers {
			out[u] += s.vms[vm].Share / float64(len(c.Workers))
		}
	}
	return out
}

// waitRatio waits until the agent's shares of hi's and lo's workers are
// in ratio (within 1 %): the plans' bids have reached the host.
func (w *world) waitRatio(hi, lo string, ratio float64) {
	w.t.Helper()
	testpoll.CheckFor(w.t, time.Minute, 200*time.Millisecond, func() error {
		q := w.cpuShares()
		if q[lo] == 0 || math.Abs(q[hi]/q[lo]/ratio-1) > 0.01 {
			return fmt.Errorf("shares %v, want %s:%s at %g", q, hi, lo, ratio)
		}
		return nil
	})
}

// pair runs alice's and bob's word counts side by side; during, if set,
// runs while they do. It returns their results, each job's time from its
// submission.
func (w *world) pair(t *testing.T, name string, during func(t0 time.Time)) (ra, rb yarnfacade.Result) {
	t.Helper()
	return w.pairOf(t, name, worker.WordCount, 4, during)
}

// pairOf is pair with jobs of kind whose maps each take per splits.
func (w *world) pairOf(t *testing.T, name, kind string, per int, during func(t0 time.Time)) (ra, rb yarnfacade.Result) {
	t.Helper()
	a, b := w.clusters["alice"], w.clusters["bob"]
	// Each worker's maps are its slots' (slotMaps): the jobs compute on
	// their own CPUs to the end, and no map of one worker's input waits to
	// be read over the link by the other.
	specA, specB := a.Job(name, kind, 2, 1), b.Job(name, kind, 2, 1)
	for _, c := range []struct {
		cl   *workertest.Cluster
		spec *yarnfacade.JobSpec
	}{{a, &specA}, {b, &specB}} {
		c.spec.Splits = nil
		for _, vm := range c.cl.Workers {
			c.spec.Splits = append(c.spec.Splits, slotMaps(c.cl, vm, kind, per)...)
		}
	}
	return w.runPair(t, specA, specB, during)
}

// runPair runs alice's specA and bob's specB side by side (during, if
// set, while they do), fails t unless both succeed, and checks their
// outputs.
func (w *world) runPair(t *testing.T, specA, specB yarnfacade.JobSpec, during func(t0 time.Time)) (ra, rb yarnfacade.Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t0 := time.Now()
	var wg sync.WaitGroup
	var errA, errB error
	wg.Go(func() { ra, errA = w.run(ctx, "alice", specA) })
	wg.Go(func() { rb, errB = w.run(ctx, "bob", specB) })
	if during != nil {
		during(t0)
	}
	wg.Wait()
	if err := errors.Join(errA, errB); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		user string
		spec yarnfacade.JobSpec
		res  yarnfacade.Result
	}{{"alice", specA, ra}, {"bob", specB, rb}} {
		if err := w.clusters[c.user].CheckOutput(c.spec, c.res); err != nil {
			t.Errorf("%s's %s: %v", c.user, c.spec.Name, err)
		}
	}
	return ra, rb
}

// took is a job's time from its submission to its end.
func took(r yarnfacade.Result) float64 { return r.Finished.Sub(r.Submitted).Seconds() }

// within checks measured against expected at the suite's tolerance.
func within(t *testing.T, what string, measured, expected float64) {
	t.Helper()
	if dev := measured/expected - 1; math.Abs(dev) > tolerance {
		t.Errorf("%s: measured %.3f, expected %.3f (%+.1f %%, tolerance %.0f %%)", what, measured, expected, 100*dev, 100*tolerance)
	}
}

// unloaded is the least part of their CPUs the guests must have had for a
// case to hold its wall-clock times to the model too.
const unloaded = 0.9

// clock is the jobs' CPU clock from t0: the CPU time the host gave the
// guests pinned to the busiest host CPU, each user's guest until their
// job's end. Each CPU carries one worker of each user and is divided
// between them by their shares, so on each CPU bob's part of equal jobs
// ends where the shares say after alice's; a job ends with its worker
// that has the most work (the one a heavier reduce landed on), on the CPU
// that carried most of the jobs' work: the busiest. Averaged over the
// CPUs, the clock slowed whenever one CPU had no job's work left while
// the other still did, and squeezed the later job's time: 1.32 against
// 1.59 on the busiest CPU's clock in make e2e run 57 (docs/E2E.md). The
// market divides what the host gives its guests; on a machine where
// processes outside it take part of the CPUs, wall time runs faster than
// this clock, unevenly, and the model's predictions hold on this clock. On
// a machine that is the guests' alone they agree. It returns the clock
// and the CPU it is the clock of.
func (w *world) clock(samples []sample, t0 time.Time, ends map[string]time.Time) (func(time.Time) float64, int) {
	onCPU := func(cpu int, t time.Time) float64 {
		total := 0.0
		for u, end := range ends {
			for _, vm := range w.clusters[u].Workers {
				if w.pinned[vm] == cpu {
					total += guestCPU(samples, []string{vm}, minTime(t, end)) - guestCPU(samples, []string{vm}, t0)
				}
			}
		}
		return total
	}
	var last time.Time
	for _, end := range ends {
		if end.After(last) {
			last = end
		}
	}
	busiest := w.cpus[0]
	for _, cpu := range w.cpus[1:] {
		if onCPU(cpu, last) > onCPU(busiest, last) {
			busiest = cpu
		}
	}
	return func(t time.Time) float64 { return onCPU(busiest, t) }, busiest
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// check checks a case's measured value against the model's on the
// guests' CPU clock, and on the wall clock too when the guests had the
// CPUs (nearly) to themselves; got is the part of their CPUs they had.
func check(t *testing.T, what string, cpuClock, cpuWant, wall, wallWant, got float64) {
	t.Helper()
	within(t, what+" (the guests' CPU clock)", cpuClock, cpuWant)
	if got >= unloaded {
		within(t, what+" (wall clock)", wall, wallWant)
	} else {
		t.Logf("%s: the guests had %.0f %% of their CPUs (other processes took the rest): the wall clock (%.3f) is not held to the model",
			what, 100*got, wall)
	}
}

// waitClock waits until the jobs' CPU clock has run secs from now: the
// CPU time alice's and bob's workers get, per host CPU. On a loaded host
// the wall clock runs ahead of it, unevenly, and the broker's and the
// agent's ticks stretch: the cases act on this clock so that they act at
// the same point of the jobs however loaded.
func (w *world) waitClock(t *testing.T, secs float64) {
	vms := append(slices.Clone(w.clusters["alice"].Workers), w.clusters["bob"].Workers...)
	used := func() float64 {
		total := 0.0
		for _, vm := range vms {
			total += w.cpuUsed(vm).Seconds()
		}
		return total / float64(len(w.cpus))
	}
	base := used()
	testpoll.CheckFor(t, 10*time.Minute, 200*time.Millisecond, func() error {
		if got := used() - base; got < secs {
			return fmt.Errorf("the jobs' CPU clock at %.1f s of %.1f s", got, secs)
		}
		return nil
	})
}

// equalCost is how far apart the CPU time of the same work may be for an
// attempt of a case that compares equal work (a: alice's and bob's maps
// on the CPU it is judged on; d: the boosted job against the fair run) to
// measure the shares. The model gives equal work equal CPU time, but a
// TCG guest's CPU time for the same maps moved by up to a third within
// one run, and in a, bob's time over alice's followed 0.75·(1 + r), r his
// maps' CPU time over hers (docs/E2E.md, run 68): the shares held, the
// machine's speed moved. An attempt whose r is further from 1 says
// nothing about the shares and runs again (judged).
const equalCost = 0.10

// shareAttempts is how many times such a case runs at most.
const shareAttempts = 3

// judged says whether attempt n, whose equal work cost r times as much
// CPU time, is the one a case judges: r within equalCost of 1, or the
// last attempt, judged whatever its r (so a case whose premise never
// holds still fails).
func judged(r float64, n int) bool { return math.Abs(r-1) <= equalCost || n >= shareAttempts }

// caseShares: two users' equal CPU-bound jobs at 3:1 spending finish in
// the ratio the agent's shares predict.
func (w *world) caseShares(t *testing.T) float64 {
	var costs []string
	for n := 1; ; n++ {
		q := w.cpuShares()
		smp := w.sample(time.Second)
		ra, rb := w.pair(t, fmt.Sprintf("wc-shares-%d", n), nil)
		samples := smp.end()
		t.Logf("attempt %d timeline:\n%s", n, timeline(samples, w.vms(), ra.Submitted))
		t.Logf("attempt %d attempts (s from alice's submission):\n%s%s", n, attempts(ra, ra.Submitted), attempts(rb, ra.Submitted))
		clock, cpu := w.clock(samples, ra.Submitted, map[string]time.Time{"alice": ra.Finished, "bob": rb.Finished})
		r := w.workerVCPU(samples, "bob", cpu, rb) / w.workerVCPU(samples, "alice", cpu, ra)
		costs = append(costs, fmt.Sprintf("%.2f", r))
		ta, tb := took(ra), took(rb)
		ca, cb := clock(ra.Finished), clock(rb.Finished)
		if !judged(r, n) {
			t.Logf("attempt %d: on CPU %d bob's worker used %.2f times the CPU time alice's did for the same maps (bob/alice %.3f): the machine's speed moved, run again",
				n, cpu, r, cb/ca)
			continue
		}
		end := finishes([]flow{{phases: []phase{{"cpu", 1, nil}}, shares: map[string]float64{"cpu": q["alice"]}},
			{phases: []phase{{"cpu", 1, nil}}, shares: map[string]float64{"cpu": q["bob"]}}})
		want := end[1] / end[0]
		got := cb / tb
		w.add(row{fmt.Sprintf("a: equal word counts, alice:bob spending 3:1 (agent's shares %.3f/%.3f)", q["alice"], q["bob"]), "CPU",
			fmt.Sprintf("bob/alice time %.3f", want),
			fmt.Sprintf("%.3f (alice %.1f s, bob %.1f s on the guests' CPU clock); wall %.3f (%.1f s, %.1f s); guests had %.0f %% of the busiest CPU; "+
				"his maps' CPU time over hers %s (attempt %d)",
				cb/ca, ca, cb, tb/ta, ta, tb, 100*got, strings.Join(costs, ", "), n)})
		check(t, "bob's time over alice's", cb/ca, want, tb/ta, want, got)
		return ca
	}
}

// workerVCPU is the vCPU time user's worker on host CPU cpu took over
// their job r: its part of the job's work, on that CPU.
func (w *world) workerVCPU(samples []sample, user string, cpu int, r yarnfacade.Result) float64 {
	for _, vm := range w.clusters[user].Workers {
		if w.pinned[vm] == cpu {
			return jobVCPU(samples, vm, r)
		}
	}
	return math.NaN()
}

// jobVCPU is the vCPU time guest vm took over job r.
func jobVCPU(samples []sample, vm string, r yarnfacade.Result) float64 {
	return guestVCPU(samples, []string{vm}, r.Finished) - guestVCPU(samples, []string{vm}, r.Submitted)
}

// caseMore: bob tops his plan up (spend --more) while both jobs run; his
// job's remaining time is what his new share leaves it. The top-up is
// large enough for him to overtake alice: of two jobs on a work-conserving
// resource the last one ends when their work is done, whatever the
// shares, so only the first one's end shows a share. The model's work is
// calibrated on alice's finish in the same run (her share moved too), so
// the machine's speed is measured, not assumed.
func (w *world) caseMore(t *testing.T, aliceCPU float64) {
	q0 := w.cpuShares()
	var more time.Time
	var q1 map[string]float64
	smp := w.sample(time.Second)
	ra, rb := w.pair(t, "wc-more", func(t0 time.Time) {
		w.waitClock(t, 0.3*aliceCPU)
		clocked := time.Now()
		w.must(t, "spend", "--user", "bob", "--id", "bob-fair", "--more", "200", "--adjust-id", "bob-more")
		spent := time.Now()
		defer func() {
			t.Logf("the jobs' CPU clock reached %.1f s %.1f s after they were started; the top-up was answered %.1f s later, and the agent's shares had moved %.1f s after that",
				0.3*aliceCPU, clocked.Sub(t0).Seconds(), spent.Sub(clocked).Seconds(), more.Sub(spent).Seconds())
		}()
		// From when the agent's shares moved: the model's change.
		testpoll.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
			if q := w.cpuShares(); q["bob"] <= q0["bob"]*1.05 {
				return fmt.Errorf("bob's share %.3f, was %.3f", q["bob"], q0["bob"])
			}
			return nil
		})
		more = time.Now()
		w.mark()                    // the model's shares change here, however far apart the period's samples are
		time.Sleep(3 * time.Second) // the broker re-spreads the plans over the next ticks
		q1 = w.cpuShares()
	})
	samples := smp.end()
	t.Logf("timeline:\n%s", timeline(samples, w.vms(), ra.Submitted))
	if !more.Before(ra.Finished) || !more.Before(rb.Finished) {
		t.Fatalf("bob's new share reached the host %.1f s into the jobs, after one ended (%.1f s, %.1f s)",
			more.Sub(ra.Submitted).Seconds(), took(ra), took(rb))
	}
	// The model on either clock: the top-up's moment and the jobs' ends.
	// The shares as the agent set them second by second (the broker's
	// re-spreading takes a few ticks after the top-up), on clock c.
	users := []string{"alice", "bob"}
	predict := func(c func(time.Time) float64, ta float64) (want, without float64) {
		jobs := make([]flow, len(users))
		for i, u := range users {
			jobs[i].shares = map[string]float64{"cpu": q0[u]}
			for _, s := range samples {
				if s.at.After(ra.Submitted) {
					jobs[i].changes = append(jobs[i].changes, change{c(s.setAt()), map[string]float64{"cpu": w.userShares(s)[u]}})
				}
			}
		}
		work := calibrate(jobs, 0, "cpu", ta)
		for i := range jobs {
			jobs[i].phases = []phase{{"cpu", work, nil}}
		}
		want = finishes(jobs)[1]
		jobs[0].changes, jobs[1].changes = nil, nil
		return want, finishes(jobs)[1]
	}
	clock, cpu := w.clock(samples, ra.Submitted, map[string]time.Time{"alice": ra.Finished, "bob": rb.Finished})
	at, ca, cb := clock(more), clock(ra.Finished), clock(rb.Finished)
	want, without := predict(clock, ca)
	// The model gives both jobs alice's work; what bob's maps cost his
	// worker's vCPU against hers (equalCost) is reported beside it.
	r := w.workerVCPU(samples, "bob", cpu, rb) / w.workerVCPU(samples, "alice", cpu, ra)
	wallAt, ta, tb := more.Sub(ra.Submitted).Seconds(), took(ra), took(rb)
	wallWant, _ := predict(func(t time.Time) float64 { return t.Sub(ra.Submitted).Seconds() }, ta)
	got := cb / tb
	w.add(row{fmt.Sprintf("f: bob's spend --more at %.1f s (shares %.3f/%.3f → %.3f/%.3f)", at, q0["alice"], q0["bob"], q1["alice"], q1["bob"]), "CPU",
		fmt.Sprintf("bob's remaining %.1f s (%.1f s without the top-up)", want-at, without-at),
		fmt.Sprintf("%.1f s on the guests' CPU clock (alice %.1f s, bob %.1f s); wall %.1f s, model %.1f s; guests had %.0f %% of the busiest CPU; "+
			"his maps' CPU time over hers %.2f", cb-at, ca, cb, tb-wallAt, wallWant-wallAt, 100*got, r)})
	check(t, "bob's remaining time after the top-up", cb-at, want-at, tb-wallAt, wallWant-wallAt, got)
}

// caseRestart: the agent is killed while both jobs run and started again
// a while later: the jobs complete, and each plan is charged once, for the
// time an agent enforced its bids: at most what the bids' rates, as the
// agent published them, add up to from the plan's start to the end, less
// the time no agent process existed (the agent excuses its downtime).
func (w *world) caseRestart(t *testing.T, aliceCPU float64) {
	const down = 8 * time.Second
	var killed, spawned, back time.Time
	ra, rb := w.pair(t, "wc-restart", func(time.Time) {
		w.waitClock(t, 0.25*aliceCPU)
		killed = time.Now()
		w.agent.Kill()
		time.Sleep(down)
		spawned = w.agent.Start(t)
		back = time.Now()
	})
	// The agent's last charges reach the bank within a few ticks.
	time.Sleep(3 * time.Second)
	asked := time.Now()
	spent := w.spent(t)
	samples := w.all.snapshot()
	for _, plan := range []string{"alice-fair", "bob-fair"} {
		due := rateIntegral(samples, plan, samples[0].at, killed) + rateIntegral(samples, plan, spawned, asked)
		twice := due + rateIntegral(samples, plan, killed, spawned)
		rate := maxRate(samples, plan)
		w.add(row{fmt.Sprintf("e: agent killed %.1f s into the jobs, started again %.1f s later (ready after %.1f s): %s",
			killed.Sub(ra.Submitted).Seconds(), spawned.Sub(killed).Seconds(), back.Sub(spawned).Seconds(), plan),
			"money", fmt.Sprintf("at most %.4f, its bids' rates over the time an agent ran (%.4f with the downtime); ± 2 ticks %.4f", due, twice, 2*rate),
			fmt.Sprintf("%.4f; jobs done in %.1f s, %.1f s", spent[plan], took(ra), took(rb))})
		// Nothing twice, the downtime not charged: at most the bids'
		// rates over the time an agent ran, give or take the ticks that
		// straddle the plan's start, the kill and the end.
		if slack := 2 * rate; spent[plan] > due+slack {
			t.Errorf("%s: the bank captured %.4f, more than the %.4f its bids' rates come to while an agent ran (%.4f with the downtime)",
				plan, spent[plan], due, twice)
		}
	}
}

// spent is what the bank captured for each plan, in credits.
func (w *world) spent(t testing.TB) map[string]float64 {
	out := map[string]float64{}
	for _, u := range []string{"alice", "bob"} {
		for _, p := range mustJSON[wire.PlansReply](t, w, "plans", "--user", u).Plans {
			out[p.ID] = p.Spent.Credits()
		}
	}
	return out
}

// rateIntegral is what plan's bids (on vms, or all its VMs without any),
// at the rates the samples show from when the agent set them (setAt), add
// up to from from to to, in credits.
func rateIntegral(samples []sample, plan string, from, to time.Time, vms ...string) float64 {
	total := 0.0
	for i, s := range samples {
		lo, hi := s.setAt(), to
		if i+1 < len(samples) {
			hi = samples[i+1].setAt()
		}
		if lo.Before(from) {
			lo = from
		}
		if hi.After(to) {
			hi = to
		}
		if !hi.After(lo) {
			continue
		}
		total += planRate(s, plan, vms...) * hi.Sub(lo).Seconds()
	}
	return total / 1e6
}

// planRate is a plan's bids' rate in a sample (on vms, or all its VMs
// without any), micro-credits a second.
func planRate(s sample, plan string, vms ...string) float64 {
	r := 0.0
	for vm, v := range s.vms {
		if len(vms) > 0 && !slices.Contains(vms, vm) {
			continue
		}
		for _, b := range v.Bids {
			if b.Plan == plan {
				r += b.Rate
			}
		}
	}
	return r
}

// maxRate is a plan's highest rate in the samples, credits a second.
func maxRate(samples []sample, plan string) float64 {
	r := 0.0
	for _, s := range samples {
		r = max(r, planRate(s, plan))
	}
	return r / 1e6
}
