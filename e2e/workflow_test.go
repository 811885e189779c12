package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/hadoopvm/worker"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// The workflow case's plans: the same budget over the same period for
// fair share and stage priority, so that stage priority moves money
// between the stages' guests and adds none; workflow priority's plan
// gives the ETL workflow (weight 1) the same part as fair share does and
// a second, idle workflow (weight 0.5, as in Sandholm and Lai's §7.2) the
// rest.
const (
	workflowBudget     = 240
	workflowPlanBudget = 360
	workflowPeriod     = time.Hour
	lowWeight          = 0.5
)

// stageInput is each stage's guest's input: a word count a quarter of
// that of a user's cluster, so that three stages in a row take about as
// long as one of the other cases' jobs.
var stageInput = worker.Input{Kind: worker.WordCount, Splits: 4, SplitBytes: 16 << 20, Seed: 31}

// flowRun is one run of alice's workflow: each stage's time, the plan
// that funded it, and the samples around it.
type flowRun struct {
	plan        string
	start, end  time.Time // the first stage's submission, the last one's end
	stages      []float64 // each stage's time from its submission, s
	cancelled   time.Time // when the plan's cancel returned
	samples     []sample
	spent       float64 // what the bank captured for the plan
	activeShare float64 // the running stage's guest's mean share
}

// caseWorkflow: alice's three-stage workflow, one guest per stage, each
// stage's guest contested by one of bob's workers running word counts.
// Under stage priority (Sandholm and Lai's Eq. 9, equal weights: the
// active stage's guest gets the whole plan's rate) it finishes sooner than
// under fair share (the rate spread over the three guests) with the same
// budget. Under workflow priority (Eq. 8) a plan weighing the workflow 1
// and a second one 0.5 costs, for each, what the product's strategy gives
// it at a constant rate (Eq. 3's integral of the rate over the run): the
// bank's figure for the plan, and the agent's bids on each workflow's
// guests.
func (w *world) caseWorkflow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	vms := w.stageVMs()
	etl := wire.WorkflowSpec{Name: "etl", Weight: 1}
	for k, c := range w.stages {
		etl.Stages = append(etl.Stages, wire.StageSpec{Name: fmt.Sprintf("stage-%d", k+1), Weight: 1, VMs: c.Workers})
	}
	low := wire.WorkflowSpec{Name: "etl-low", Weight: lowWeight, Stages: []wire.StageSpec{{Name: "all", Weight: 1, VMs: w.clusters["alice"].Workers}}}
	stageFile := w.planFile(t, "etl-stage.json", etl)
	priorityFile := w.planFile(t, "etl-workflow.json", etl, low)

	// Bob's word counts throughout: every run meets the same competition.
	stop := w.compete(ctx, "wc-flow-rival")
	budget := fmt.Sprint(workflowBudget)
	all := len(w.stages)
	fair := w.flow(ctx, t, "etl-fair", all, "spend", "--user", "alice", "--budget", budget, "--duration", workflowPeriod.String(),
		"--vm", strings.Join(vms, ","), "--id", "etl-fair")
	staged := w.flow(ctx, t, "etl-stage", all, "spend", "--user", "alice", "--budget", budget, "--duration", workflowPeriod.String(),
		"--plan", stageFile, "--strategy", "stage", "--id", "etl-stage")
	// Workflow priority's rates do not move with the stages (Eq. 8 divides
	// the plan among workflows, not stages): its cost is checked over the
	// first stage, which saves the suite the other two.
	prio := w.flow(ctx, t, "etl-workflow", 1, "spend", "--user", "alice", "--budget", fmt.Sprint(workflowPlanBudget),
		"--duration", workflowPeriod.String(), "--plan", priorityFile, "--strategy", "workflow", "--id", "etl-workflow")
	if _, err := stop(); err != nil {
		t.Error(err)
	}

	// Stage priority against fair share, on the guests' CPU clock (alice's
	// stages' and bob's guests) and, when they had the CPUs, the wall clock.
	rivals := w.clusters["bob"].Workers
	clock := func(r flowRun) float64 {
		all := append(slices.Clone(vms), rivals...)
		return (guestCPU(r.samples, all, r.end) - guestCPU(r.samples, all, r.start)) / float64(len(w.cpus))
	}
	wall := func(r flowRun) float64 { return r.end.Sub(r.start).Seconds() }
	got := min(clock(fair)/wall(fair), clock(staged)/wall(staged))
	stages := func(r flowRun) string {
		parts := make([]string, len(r.stages))
		for i, s := range r.stages {
			parts[i] = fmt.Sprintf("%.1f", s)
		}
		return strings.Join(parts, " + ") + " s"
	}
	w.add(row{fmt.Sprintf("c: alice's three-stage workflow (a guest per stage, bob's word counts on the same CPUs), %d credits over %s: "+
		"fair share, then stage priority (weights 1, 1, 1; the running stage's guest's mean share %.3f → %.3f)",
		workflowBudget, workflowPeriod, fair.activeShare, staged.activeShare), "CPU",
		fmt.Sprintf("stage priority sooner than fair share (%.1f s on the guests' CPU clock, wall %.1f s)", clock(fair), wall(fair)),
		fmt.Sprintf("%.1f s on the guests' CPU clock; wall %.1f s (stages %s; fair's %s); paid %.4f (fair %.4f); guests had %.0f %% of the CPUs",
			clock(staged), wall(staged), stages(staged), stages(fair), staged.spent, fair.spent, 100*got)})
	if clock(staged) >= clock(fair) {
		t.Errorf("stage priority did not speed the workflow up: %.1f s against fair share's %.1f s (the guests' CPU clock)", clock(staged), clock(fair))
	}
	if got >= unloaded && wall(staged) >= wall(fair) {
		t.Errorf("stage priority did not speed the workflow up: %.1f s against fair share's %.1f s (wall clock)", wall(staged), wall(fair))
	}
	if staged.activeShare <= fair.activeShare {
		t.Errorf("stage priority did not raise the running stage's share: %.3f, fair share %.3f", staged.activeShare, fair.activeShare)
	}

	w.checkPriorityCost(t, prio, etl, low)
}

// checkPriorityCost holds workflow priority's run to Sandholm and Lai's
// model: each workflow's part of the budget (Eq. 8, the product's
// WorkflowPriority strategy on the plan as it started), spent at a
// constant rate over the plan's period, costs that rate times the time the
// plan ran (Eq. 3). The plan's cost is the bank's figure; each workflow's
// is the part of it the agent's bids on its guests make of the plan's
// (the bank captures a plan, not a VM, and the broker hears the bids a
// tick late, which the proportion cancels). Both within two ticks of their
// rate, the ticks that straddle the plan's start and its cancel.
func (w *world) checkPriorityCost(t *testing.T, r flowRun, wfs ...wire.WorkflowSpec) {
	var plan wire.Plan
	for _, p := range mustJSON[wire.PlansReply](t, w, "plans", "--user", "alice").Plans {
		if p.ID == r.plan {
			plan = p
		}
	}
	vmHost := map[string]string{}
	for _, v := range w.m.Broker.VMs(&wire.VMsRequest{}).VMs {
		vmHost[v.VM] = v.Host
	}
	snap := strategies.Snapshot{Remaining: plan.Budget, Left: plan.Duration.D(), Budget: plan.Budget, Duration: plan.Duration.D(),
		Stage: make([]int, len(wfs))}
	for _, wf := range wfs {
		sw := strategies.Workflow{Name: wf.Name, Weight: wf.Weight}
		for _, st := range wf.Stages {
			s := strategies.Stage{Name: st.Name, Weight: st.Weight}
			for _, vm := range st.VMs {
				s.VMs = append(s.VMs, strategies.VM{Name: vm, Host: vmHost[vm]})
			}
			sw.Stages = append(sw.Stages, s)
		}
		snap.Workflows = append(snap.Workflows, sw)
	}
	rates := map[string]float64{} // credits a second, by VM
	for _, a := range (strategies.WorkflowPriority{}).Allocate(snap).Allocs {
		rates[a.VM] = a.Budget.Credits() / a.Duration.Seconds()
	}
	ran := r.cancelled.Sub(plan.Start).Seconds()
	bids := rateIntegral(r.samples, r.plan, plan.Start, r.cancelled)
	const ticks = 2
	total, totalRate := 0.0, 0.0
	var parts []string
	for _, wf := range wfs {
		var vms []string
		for _, st := range wf.Stages {
			vms = append(vms, st.VMs...)
		}
		rate := 0.0
		for _, vm := range vms {
			rate += rates[vm]
		}
		want := rate * ran
		got := r.spent * rateIntegral(r.samples, r.plan, plan.Start, r.cancelled, vms...) / bids
		total, totalRate = total+want, totalRate+rate
		parts = append(parts, fmt.Sprintf("%s (weight %g) %.4f", wf.Name, wf.Weight, got))
		w.add(row{fmt.Sprintf("c: workflow priority, %s credits over %s, %s weight %g of %s, for the %.1f s the plan ran (its stages ran %.1f s)",
			plan.Budget, plan.Duration.D(), wf.Name, wf.Weight, weightsOf(wfs), ran, r.end.Sub(r.start).Seconds()), "money",
			fmt.Sprintf("%.4f (Eq. 8's rate %.6f/s × the time); ± %d ticks %.4f", want, rate, ticks, ticks*rate),
			fmt.Sprintf("%.4f, the bank's figure in proportion to the agent's bids on its guests", got)})
		if math.Abs(got-want) > ticks*rate {
			t.Errorf("workflow %s: its part of what the bank captured is %.4f, the model's cost is %.4f (± %.4f)", wf.Name, got, want, ticks*rate)
		}
	}
	w.add(row{fmt.Sprintf("c: workflow priority, the plan %s", r.plan), "money",
		fmt.Sprintf("%.4f (the workflows' Eq. 8 rates × %.1f s); ± %d ticks %.4f", total, ran, ticks, ticks*totalRate),
		fmt.Sprintf("%.4f captured by the bank (%s)", r.spent, strings.Join(parts, ", "))})
	if math.Abs(r.spent-total) > ticks*totalRate {
		t.Errorf("plan %s: the bank captured %.4f, the model's cost is %.4f (± %.4f)", r.plan, r.spent, total, ticks*totalRate)
	}
}

// weightsOf names the workflows' weights, "etl 1, etl-low 0.5".
func weightsOf(wfs []wire.WorkflowSpec) string {
	parts := make([]string, len(wfs))
	for i, wf := range wfs {
		parts[i] = fmt.Sprintf("%s %g", wf.Name, wf.Weight)
	}
	return strings.Join(parts, ", ")
}

// planFile writes a workflow descriptor for `spend --plan`.
func (w *world) planFile(t *testing.T, name string, wfs ...wire.WorkflowSpec) string {
	raw, err := json.Marshal(map[string]any{"workflows": wfs})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(w.dir, name)
	if err := os.WriteFile(file, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// flow runs the first stages of alice's workflow under the plan spend
// starts (all of them when stages is len(w.stages)): the first
// stage's job is submitted, and once the agent sees its guest busy the
// plan starts (stage priority moves past a stage whose guests are idle);
// each later stage's job is submitted when the one before ends, and the
// broker told that the stage started over the wire, as the YARN monitor
// that sees its application would (`mrmarket stages start`, signed by
// alice, on mrm.v1.broker.stage; `stages watch` does the same from the
// RM's applications): otherwise the plan moves on only once the agent has
// seen the last stage's guest idle for three ticks, and the stage runs
// unfunded until then. The plan is cancelled when the last stage ends.
func (w *world) flow(ctx context.Context, t *testing.T, id string, stages int, spend ...string) flowRun {
	t.Helper()
	r := flowRun{plan: id}
	smp := w.sample(time.Second)
	var active []span
	for k, c := range w.stages[:stages] {
		spec := c.Job(fmt.Sprintf("etl:stage-%d", k+1), worker.WordCount, 1, 1)
		app, err := c.Facade.Submit(spec)
		if err != nil {
			t.Fatal(err)
		}
		if k > 0 {
			w.must(t, "stages", "start", "--user", "alice", "--workflow", "etl", "--stage", fmt.Sprintf("stage-%d", k+1))
		}
		if k == 0 {
			testpoll.CheckFor(t, 30*time.Second, 100*time.Millisecond, func() error {
				if w.shares()[c.Workers[0]].Idle {
					return fmt.Errorf("the agent has %s idle", c.Workers[0])
				}
				return nil
			})
			w.must(t, spend...)
		}
		res, err := c.Facade.Wait(ctx, app)
		w.mark()
		if err != nil || !res.Succeeded {
			t.Fatalf("alice's %s: %+v %v", spec.Name, res, err)
		}
		if err := c.CheckOutput(spec, res); err != nil {
			t.Error(err)
		}
		if k == 0 {
			r.start = res.Submitted
		}
		r.end = res.Finished
		r.stages = append(r.stages, took(res))
		active = append(active, span{c.Workers[0], res.Submitted, res.Finished})
	}
	w.must(t, "cancel", "--user", "alice", "--plan", id, "--id", id+"-cancel")
	r.cancelled = time.Now()
	// The agent's last charges reach the bank within a few ticks, and the
	// plan settles.
	testpoll.CheckFor(t, time.Minute, 500*time.Millisecond, func() error {
		for _, p := range mustJSON[wire.PlansReply](t, w, "plans", "--user", "alice").Plans {
			if p.ID == id && p.Held == 0 && p.Status != wire.PlanRunning {
				r.spent = p.Spent.Credits()
				return nil
			}
		}
		return fmt.Errorf("plan %s not settled", id)
	})
	r.samples = smp.end()
	t.Logf("%s timeline:\n%s", id, timeline(r.samples, append(w.stageVMs(), w.clusters["bob"].Workers...), r.start))
	sum, length := 0.0, 0.0
	for _, a := range active {
		sum += meanShare(r.samples, a.vm, a.from, a.to) * a.to.Sub(a.from).Seconds()
		length += a.to.Sub(a.from).Seconds()
	}
	r.activeShare = sum / length
	return r
}

// span is a stage's run on its guest.
type span struct {
	vm       string
	from, to time.Time
}
