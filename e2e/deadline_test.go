package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/hadoopvm/worker"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// caseDeadline: alice profiles her word count on a run with the host to
// herself (her VMs together had all of it: a full share, as a job file's
// profile means), quotes it, and submits it with a deadline while bob's
// guests run word counts on the same CPUs. An unmeetable deadline is
// refused with nothing held; the admitted job finishes by its deadline,
// followed by `mrmarket jobs watch --yarn` through the facade, and pays no
// more than its price.
func (w *world) caseDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	a := w.clusters["alice"]
	const name = "wc-deadline"
	spec := a.Job(name, worker.WordCount, 2, 1)
	res, err := w.run(ctx, "alice", spec)
	if err != nil {
		t.Fatal(err)
	}
	alone := took(res)
	prof, err := a.Monitor().ProfileJob(ctx, res.Job)
	if err != nil {
		t.Fatal(err)
	}
	job := wire.JobSpec{Name: name, VMs: a.Workers, Maps: prof.Maps, Reduces: prof.Reduces, MapSlots: 2 * len(a.Workers),
		ReduceSlots: 2 * len(a.Workers), MapSelectivity: prof.MapSelectivity, ReduceSelectivity: prof.ReduceSelectivity, Profile: prof.JobProfile}
	file := filepath.Join(w.dir, name+".json")
	raw, _ := json.Marshal(job)
	if err := os.WriteFile(file, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("alone: %.1f s; job file %s", alone, raw)
	quote := mustJSON[wire.QuoteReply](t, w, "quote", "--user", "alice", "--job", file)
	t.Logf("quote: work %.1f s at a full share (%s), share %.2f, earliest %s", quote.Work, quote.Source, quote.Share, quote.Earliest.Format(time.TimeOnly))

	// A deadline before the earliest finish: refused, nothing held.
	holds := func() []string {
		var ids []string
		for _, h := range mustJSON[wire.BalanceReply](t, w, "balance", "--user", "alice").Holds {
			ids = append(ids, h.ID)
		}
		slices.Sort(ids)
		return ids
	}
	before := holds()
	soon := time.Until(quote.Earliest) / 2
	out, err := w.mrmarket("submit", "--user", "alice", "--job", file, "--deadline", soon.Round(time.Second).String(), "--id", "wc-too-soon")
	var ce *cliError
	refused := errors.As(err, &ce)
	after := holds()
	w.add(row{fmt.Sprintf("b: submit --deadline %s (earliest finish %.0f s away)", soon.Round(time.Second), time.Until(quote.Earliest).Seconds()),
		"money", "refused, no hold placed", fmt.Sprintf("refused %v (%s), holds %d → %d", refused, firstLine(ce), len(before), len(after))})
	if !refused || !slices.Equal(before, after) {
		t.Errorf("an unmeetable deadline: %q %v; alice's holds %v, then %v", out, err, before, after)
	}

	// The admitted job, with bob's guests busy throughout: his word counts
	// run first, then alice quotes again (the first quote's earliest finish
	// has come nearer while she was refused), submits with a deadline 1.5
	// times the earliest finish's distance, and starts her job at once — the
	// deadline counts from the admission, as it would for a user.
	stop := w.compete(ctx, "wc-competes")
	smp := w.sample(time.Second)
	quote = mustJSON[wire.QuoteReply](t, w, "quote", "--user", "alice", "--job", file)
	deadline := time.Now().Add(time.Until(quote.Earliest) * 3 / 2)
	sub := mustJSON[wire.SubmitReply](t, w, "submit", "--user", "alice", "--job", file, "--deadline", deadline.Format(time.RFC3339Nano), "--id", "wc-deadline")
	app, err := a.Facade.Submit(spec)
	t.Logf("admitted %s: deadline %s, price %s, share %.2f", sub.Job.ID, sub.Job.Deadline.Format(time.TimeOnly), sub.Job.Price, sub.Job.Share)
	if err != nil {
		t.Fatal(err)
	}
	var transcript string
	var watchErr error
	var watch sync.WaitGroup
	args := []string{"jobs", "watch", "--user", "alice", "--job", file, "--yarn", a.URL, "--history", a.URL, "--every", "2s"}
	watch.Go(func() { transcript, watchErr = w.mrmarket(args...) })
	res, err = a.Facade.Wait(ctx, app)
	w.mark()
	if err != nil || !res.Succeeded {
		t.Fatalf("alice's %s: %+v %v", name, res, err)
	}
	watch.Wait()
	bobRuns, bobErr := stop()
	if bobErr != nil {
		t.Error(bobErr)
	}
	t.Logf("timeline:\n%s", timeline(smp.end(), w.vms(), res.Submitted))
	t.Logf("$ mrmarket %s\n%s", strings.Join(args, " "), transcript)
	if watchErr != nil {
		t.Error(watchErr)
	}
	if err := a.CheckOutput(spec, res); err != nil {
		t.Error(err)
	}
	// The job's plan settles once done: what it spent is final.
	var j wire.Job
	testpoll.CheckFor(t, time.Minute, 500*time.Millisecond, func() error {
		for _, x := range mustJSON[wire.JobsReply](t, w, "jobs", "--user", "alice").Jobs {
			if x.ID == sub.Job.ID {
				j = x
			}
		}
		for _, p := range mustJSON[wire.PlansReply](t, w, "plans", "--user", "alice").Plans {
			if p.ID == sub.Job.ID && p.Held == 0 && p.Status != "running" {
				return nil
			}
		}
		return fmt.Errorf("job %+v: its plan not settled", j)
	})
	spent := w.spent(t)[sub.Job.ID]
	w.add(row{fmt.Sprintf("b: %s submitted with a deadline %.0f s away, bob's word counts on the same CPUs (%d run)", name,
		deadline.Sub(res.Submitted).Seconds(), bobRuns), "CPU", fmt.Sprintf("done by the deadline (%.1f s)", deadline.Sub(res.Submitted).Seconds()),
		fmt.Sprintf("done in %.1f s (%.1f s alone)", took(res), alone)})
	w.add(row{"b: what the deadline job paid", "money", fmt.Sprintf("at most its price %s", sub.Job.Price), fmt.Sprintf("%.6f", spent)})
	if res.Finished.After(deadline) {
		t.Errorf("%s finished at %s, after its deadline %s", name, res.Finished.Format(time.TimeOnly), deadline.Format(time.TimeOnly))
	}
	if spent > sub.Job.Price.Credits() {
		t.Errorf("%s paid %.6f, above its price %s", name, spent, sub.Job.Price)
	}
}

// firstLine is a command's error's first line, or "" without one.
func firstLine(e *cliError) string {
	if e == nil {
		return ""
	}
	line, _, _ := strings.Cut(strings.TrimSpace(e.stderr), "\n")
	return line
}
