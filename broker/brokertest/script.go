package brokertest

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Run runs one script command and returns what it printed: the harness's
// log since the last command (bid requests as "replica → host: vm=budget/
// duration …", the bank's holds and releases), then the command's answer.
// The commands:
//
//	replicas names=(a,b) [tick=10s settle=20s max-boost=0.9 share=0.8 min-history=5 job-order=maxsrpt]
//	grant user=U amount=CREDITS
//	host name=H vms=(vm:owner, …)
//	idle vms=(…) | busy vms=(…)
//	fail-host name=H [refuse] | heal-host name=H   (down: no answer; refuse: a refusal)
//	spend id=P user=U budget=B duration=D strategy=S [vms=(…)] [boost=F] [host-weights=(H:W, …)] [replica=R]
//	    (the input, if any, is the plan's workflows as JSON)
//	cancel plan=P user=U | adjust plan=P user=U id=I [more=B] [less=B]
//	stage-started user=U workflow=W stage=S
//	tick [n=1] [by=TICK]
//	quote user=U [points=N] | submit id=J user=U [deadline=D] [budget=B] [best-effort]
//	    (the input is the job spec as JSON)
//	progress user=U job=NAME progress=F [maps=N] [reduces=N] [done]
//	kill-replica name=R [at=bid]
//	pause-replica name=R | resume-replica name=R
//	    (pause: R's next submit or quote waits once it priced the job,
//	    before committing it, until resume, which prints its answer)
//	plans | jobs | balance user=U
func (h *Harness) Run(t *testing.T, d *datadriven.TestData) string {
	h.t = t
	var out []string
	say := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if cmd, ok := commands[d.Cmd]; ok {
		cmd(h, d, say)
	} else {
		d.Fatalf(t, "unknown command %q", d.Cmd)
	}
	lines := append(h.Log(), out...)
	if len(lines) == 0 {
		return "ok\n"
	}
	return strings.Join(lines, "\n") + "\n"
}

type command func(h *Harness, d *datadriven.TestData, say func(string, ...any))

var commands map[string]command

func init() {
	commands = map[string]command{
		"replicas": cmdReplicas, "grant": cmdGrant, "host": cmdHost,
		"idle": func(h *Harness, d *datadriven.TestData, _ func(string, ...any)) {
			h.SetIdle(true, vals(h, d, "vms")...)
		},
		"busy": func(h *Harness, d *datadriven.TestData, _ func(string, ...any)) {
			h.SetIdle(false, vals(h, d, "vms")...)
		},
		"fail-host": func(h *Harness, d *datadriven.TestData, _ func(string, ...any)) {
			h.SetDown(str(h, d, "name"), true, d.HasArg("refuse"))
		},
		"heal-host": func(h *Harness, d *datadriven.TestData, _ func(string, ...any)) {
			h.SetDown(str(h, d, "name"), false, false)
		},
		"spend": cmdSpend, "cancel": cmdCancel, "adjust": cmdAdjust, "stage-started": cmdStageStarted,
		"tick": cmdTick, "quote": cmdQuote, "submit": cmdSubmit, "progress": cmdProgress,
		"kill-replica": cmdKill, "pause-replica": cmdPause, "resume-replica": cmdResume, "plans": cmdPlans, "jobs": cmdJobs, "balance": cmdBalance,
	}
}

func str(h *Harness, d *datadriven.TestData, key string) string {
	var s string
	d.ScanArgs(h.t, key, &s)
	return s
}

func optStr(d *datadriven.TestData, key, def string) string {
	if a, ok := d.Arg(key); ok && len(a.Vals) > 0 {
		return a.Vals[0]
	}
	return def
}

func vals(h *Harness, d *datadriven.TestData, key string) []string {
	a, ok := d.Arg(key)
	if !ok {
		d.Fatalf(h.t, "%s needs %s=(…)", d.Cmd, key)
	}
	return a.Vals
}

func credits(h *Harness, d *datadriven.TestData, key string) money.Micro {
	m, err := money.Parse(optStr(d, key, "0"))
	if err != nil {
		d.Fatalf(h.t, "%s: %v", key, err)
	}
	return m
}

func duration(h *Harness, d *datadriven.TestData, key string, def time.Duration) time.Duration {
	s := optStr(d, key, "")
	if s == "" {
		return def
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.Fatalf(h.t, "%s: %v", key, err)
	}
	return v
}

func number(h *Harness, d *datadriven.TestData, key string, def float64) float64 {
	if !d.HasArg(key) {
		return def
	}
	var f float64
	d.ScanArgs(h.t, key, &f)
	return f
}

// rel is a time as an offset from T0, the way scripts read times.
func rel(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return "+" + t.Sub(T0).String()
}

func cmdReplicas(h *Harness, d *datadriven.TestData, _ func(string, ...any)) {
	if len(h.replicas) > 0 {
		d.Fatalf(h.t, "replicas must come first")
	}
	h.cfg.Tick = duration(h, d, "tick", h.cfg.Tick)
	h.cfg.Settle = duration(h, d, "settle", h.cfg.Settle)
	h.cfg.MaxBoost = number(h, d, "max-boost", h.cfg.MaxBoost)
	h.cfg.DeadlineShare = number(h, d, "share", h.cfg.DeadlineShare)
	h.cfg.MinHistory = int(number(h, d, "min-history", float64(h.cfg.MinHistory)))
	h.cfg.JobOrder = optStr(d, "job-order", h.cfg.JobOrder)
	for _, name := range vals(h, d, "names") {
		h.AddReplica(name)
	}
}

func cmdGrant(h *Harness, d *datadriven.TestData, _ func(string, ...any)) {
	h.Bank().Grant(str(h, d, "user"), credits(h, d, "amount"))
}

func cmdHost(h *Harness, d *datadriven.TestData, _ func(string, ...any)) {
	if len(h.replicas) == 0 {
		h.AddReplica("broker")
	}
	h.AddHost(str(h, d, "name"), vals(h, d, "vms")...)
}

func cmdTick(h *Harness, d *datadriven.TestData, _ func(string, ...any)) {
	by := duration(h, d, "by", h.cfg.Tick)
	for range int(number(h, d, "n", 1)) {
		h.Tick(by)
	}
	h.logf("now %s", rel(h.Now()))
}

func cmdSpend(h *Harness, d *datadriven.TestData, say func(string, ...any)) {
	req := &wire.SpendRequest{ID: str(h, d, "id"), User: str(h, d, "user"), Budget: credits(h, d, "budget"),
		Duration: wire.Duration(duration(h, d, "duration", time.Hour)), Strategy: str(h, d, "strategy"),
		Boost: number(h, d, "boost", 0)}
	if a, ok := d.Arg("vms"); ok {
		req.VMs = a.Vals
	}
	if a, ok := d.Arg("host-weights"); ok {
		req.HostWeights = map[string]float64{}
		for _, v := range a.Vals {
			host, w, _ := strings.Cut(v, ":")
			f, err := strconv.ParseFloat(w, 64)
			if err != nil {
				d.Fatalf(h.t, "host weight %q: %v", v, err)
			}
			req.HostWeights[host] = f
		}
	}
	if strings.TrimSpace(d.Input) != "" {
		if err := json.Unmarshal([]byte(d.Input), &req.Workflows); err != nil {
			d.Fatalf(h.t, "workflows: %v", err)
		}
	}
	signed := *req // what the user's CLI signs: the pace audit's (audit.go)
	if err := mandate.SignCaps(&signed); err == nil {
		h.expect(req.User, req.ID, signed.Pace.D(), signed.VMShare)
	}
	r := h.live(optStr(d, "replica", ""))
	say("%s", h.call(r, "spending "+req.ID, func(b *broker.Broker) string {
		rep, err := b.Spend(context.Background(), req)
		if err != nil {
			return fmt.Sprintf("error: %v", err)
		}
		return fmt.Sprintf("plan %s %s", rep.Plan.ID, rep.Plan.Status)
	}))
}

// call runs f on replica r and gives what it printed. If r dies in it
// (Kill at its next bid), f is left hanging and call says so; if r pauses
// in it (Pause), f waits, and resume-replica prints its answer.
func (h *Harness) call(r *replica, what string, f func(b *broker.Broker) string) string {
	done := make(chan string, 1)
	h.hung.Add(1)
	go func() {
		defer h.hung.Done()
		done <- f(r.b)
	}()
	h.mu.Lock()
	paused := r.paused // nil (never ready) unless Pause was called
	h.mu.Unlock()
	select {
	case s := <-done:
		return s
	case <-r.died:
		r.dead = true
		return fmt.Sprintf("%s died while %s", r.name, what)
	case <-paused:
		r.pending = done
		return fmt.Sprintf("%s paused while %s", r.name, what)
	}
}

func cmdPause(h *Harness, d *datadriven.TestData, _ func(string, ...any)) {
	h.Pause(str(h, d, "name"))
}

// cmdResume lets a paused replica go on and prints the answer of the call
// it was paused in.
func cmdResume(h *Harness, d *datadriven.TestData, say func(string, ...any)) {
	r := h.replica(str(h, d, "name"))
	h.Resume(r.name)
	if r.pending != nil {
		say("%s", <-r.pending)
		r.pending = nil
	}
}

func cmdCancel(h *Harness, d *datadriven.TestData, say func(string, ...any)) {
	p, err := h.Broker(optStr(d, "replica", "")).Cancel(context.Background(), &wire.CancelRequest{Plan: str(h, d, "plan"), User: str(h, d, "user")})
	if err != nil {
		say("error: %v", err)
		return
	}
	say("plan %s %s, released %s", p.ID, p.Status, p.Released)
}

func cmdAdjust(h *Harness, d *datadriven.TestData, say func(string, ...any)) {
	p, err := h.Broker(optStr(d, "replica", "")).Adjust(context.Background(), &wire.AdjustRequest{Plan: str(h, d, "plan"),
		User: str(h, d, "user"), ID: str(h, d, "id"), More: credits(h, d, "more"), Less: credits(h, d, "less")})
	if err != nil {
		say("error: %v", err)
		return
	}
	say("plan %s budget %s", p.ID, p.Budget)
}

func cmdStageStarted(h *Harness, d *datadriven.TestData, say func(string, ...any)) {
	if err := h.Broker("").StageStarted(context.Background(), str(h, d, "user"), str(h, d, "workflow"), str(h, d, "stage")); err != nil {
		say("error: %v", err)
	}
}

func cmdKill(h *Harness, d *datadriven.TestData, _ func(string, ...any)) {
	h.Kill(str(h, d, "name"), optStr(d, "at", "") == "bid")
}

func cmdPlans(h *Harness, _ *datadriven.TestData, say func(string, ...any)) {
	for _, p := range h.Broker("").Plans(&wire.PlansRequest{}).Plans {
		line := fmt.Sprintf("%s %s %s %s owner=%s budget=%s spent=%s", p.ID, p.User, p.Strategy, p.Status, p.Owner, p.Budget, p.Spent)
		if p.Released > 0 {
			line += fmt.Sprintf(" released=%s", p.Released)
		}
		if len(p.Stage) > 0 {
			line += fmt.Sprintf(" stage=%v", p.Stage)
		}
		say("%s", line)
		for _, v := range p.VMs {
			say("  %s %s %s @%.3f", v.VM, v.Host, v.Budget, v.Rate)
		}
	}
}

func cmdJobs(h *Harness, _ *datadriven.TestData, say func(string, ...any)) {
	for _, j := range h.Broker("").Jobs(&wire.JobsRequest{}).Jobs {
		say("%s %s %s %s deadline=%s predict=%s finished=%s progress=%.2f share=%.3f price=%s spent=%s", j.ID, j.User, j.Name,
			j.Status, rel(j.Deadline), rel(j.Predict), rel(j.Finished), j.Progress, j.Share, j.Price, j.Spent)
	}
}

func cmdBalance(h *Harness, d *datadriven.TestData, say func(string, ...any)) {
	b, _ := h.Bank().Balance(context.Background(), &wire.BalanceRequest{User: str(h, d, "user")})
	say("%s balance=%s held=%s spent=%s granted=%s", b.User, b.Balance, b.Held, b.Spent, b.Granted)
}

func job(h *Harness, d *datadriven.TestData) wire.JobSpec {
	var s wire.JobSpec
	if err := json.Unmarshal([]byte(d.Input), &s); err != nil {
		d.Fatalf(h.t, "job: %v", err)
	}
	return s
}

func cmdQuote(h *Harness, d *datadriven.TestData, say func(string, ...any)) {
	q, err := h.Broker(optStr(d, "replica", "")).Quote(context.Background(), &wire.QuoteRequest{User: str(h, d, "user"),
		Job: job(h, d), Points: int(number(h, d, "points", 0))})
	if err != nil {
		say("error: %v", err)
		return
	}
	say("%s work=%.1f mean=%.1f sd=%.1f source=%s share=%.2f earliest=%s queued=%d balance=%s slots=%d/%d", q.Job, q.Work, q.Mean, q.SD,
		q.Source, q.Share, rel(q.Earliest), q.Queued, q.Balance, q.MapSlots, q.ReduceSlots)
	for _, p := range q.Curve {
		say("  %s %s confidence=%.3f affordable=%v", rel(p.Deadline), p.Price, p.Confidence, p.Affordable)
	}
}

func cmdSubmit(h *Harness, d *datadriven.TestData, say func(string, ...any)) {
	req := &wire.SubmitRequest{ID: str(h, d, "id"), User: str(h, d, "user"), Job: job(h, d), Budget: credits(h, d, "budget"),
		BestEffort: d.HasArg("best-effort")}
	if d.HasArg("deadline") {
		req.Deadline = h.Now().Add(duration(h, d, "deadline", 0))
	}
	h.expect(req.User, req.ID, mandate.JobPace(req.Job, 0).D(), wire.FullShare)
	say("%s", h.call(h.live(optStr(d, "replica", "")), "submitting "+req.ID, func(b *broker.Broker) string {
		rep, err := b.Submit(context.Background(), req)
		if err != nil {
			return fmt.Sprintf("error: %v", err)
		}
		j := rep.Job
		return fmt.Sprintf("job %s %s deadline=%s price=%s plan ends %s", j.ID, j.Status, rel(j.Deadline), j.Price, rel(rep.Plan.End))
	}))
}

func cmdProgress(h *Harness, d *datadriven.TestData, say func(string, ...any)) {
	j, err := h.Broker(optStr(d, "replica", "")).JobProgress(context.Background(), &wire.ProgressRequest{User: str(h, d, "user"),
		Job: str(h, d, "job"), Progress: number(h, d, "progress", 0), MapsDone: int(number(h, d, "maps", 0)),
		ReducesDone: int(number(h, d, "reduces", 0)), Done: d.HasArg("done")})
	if err != nil {
		say("error: %v", err)
		return
	}
	say("job %s %s progress=%.2f share=%.3f predict=%s", j.ID, j.Status, j.Progress, j.Share, rel(j.Predict))
}
