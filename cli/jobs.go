package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/hadoopvm/yarn"
	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// jobFileHelp shows the job file's shape.
const jobFileHelp = `A job file is JSON: the job's VMs (its Hadoop cluster; another plan may fund them
too), its MRM features and slots, and its ARIA profile — seconds per task at a full
share of the host (from a run of the job, e.g. the YARN monitor's profile). On
` + "`mrmarket up`" + `'s VMs (alice owns h1-vm1, h2-vm1…; see examples/):
   {"name": "etl", "vms": ["h1-vm1", "h2-vm1"], "maps": 16, "reduces": 2,
    "map_slots": 4, "reduce_slots": 4,
    "profile": {"map_avg": 20, "map_max": 27, "reduce_avg": 20, "reduce_max": 27}}
Optional: "map_selectivity", "reduce_selectivity", the shuffle times
("sh1_avg", "sh1_max", "shtyp_avg", "shtyp_max") and a Jockey C(p, a)
"jockey_table" ({"progress": [...], "alloc": [...], "remaining": [[s...]...]}).`

func flagJobFile() *ucli.StringFlag {
	return &ucli.StringFlag{Name: "job", Usage: "the job file (JSON)"}
}

// userAndJob are --user and the job file of --job.
func userAndJob(c *ucli.Context) (string, wire.JobSpec, error) {
	user, err := requireUser(c)
	if err != nil {
		return "", wire.JobSpec{}, err
	}
	spec, err := readJobFile(c)
	return user, spec, err
}

// readJobFile reads a job file, strictly.
func readJobFile(c *ucli.Context) (wire.JobSpec, error) {
	path := c.String("job")
	if path == "" {
		return wire.JobSpec{}, badInput("--job FILE is required (see --help for its shape)")
	}
	f, err := os.Open(path)
	if err != nil {
		return wire.JobSpec{}, usageError{fmt.Errorf("--job: %w", err)}
	}
	defer f.Close()
	var spec wire.JobSpec
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		return wire.JobSpec{}, usageError{fmt.Errorf("--job %s: %w", path, err)}
	}
	if err := spec.Validate(); err != nil {
		return wire.JobSpec{}, usageError{fmt.Errorf("--job %s: %w", path, err)}
	}
	return spec, nil
}

// parseDeadline takes a time (RFC 3339) or a duration from now.
func parseDeadline(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, badInput("--deadline %s: must be in the future", s)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, badInput("--deadline %q: want a time (2026-11-23T17:00:00Z) or a duration from now (45m)", s)
	}
	return t, nil
}

func quoteCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "quote",
		Usage: "price a job's deadlines: the price-deadline curve, nothing held",
		UsageText: "mrmarket quote --user alice --job etl.json [--points 10]\n\n" +
			"The broker estimates the job's processing time (ARIA's bounds over its profile until\n" +
			"enough jobs have finished, then MRM's regression over their measured work), finds the\n" +
			"earliest finish the jobs already admitted leave, and prices deadlines from there: the\n" +
			"cost of the job's reserved share at best-effort prices plus MRM's premium for the slack\n" +
			"it takes. Confidence is the estimate's probability that the job fits by that deadline.\n\n" +
			jobFileHelp,
		Flags: marketFlags(flagJobFile(),
			&ucli.IntFlag{Name: "points", Usage: "deadlines on the curve", Value: 10},
		),
		Action: func(c *ucli.Context) error {
			user, spec, err := userAndJob(c)
			if err != nil {
				return err
			}
			return call(c, onBroker(broker.Client.Quote), &wire.QuoteRequest{User: user, Job: spec, Points: c.Int("points")}, printQuote)
		},
	}
}

func printQuote(w *out, rep wire.QuoteReply) error {
	w.note("job %s: %.0f s at a full share (estimate from %s: mean %.0f s, sd %.1f s); runs at share %.2f\n",
		rep.Job, rep.Work, rep.Source, rep.Mean, rep.SD, rep.Share)
	w.note("earliest finish %s after %d admitted job(s); ARIA's minimum there: %d map and %d reduce slots; balance %s\n",
		stamp(rep.Earliest), rep.Queued, rep.MapSlots, rep.ReduceSlots, rep.Balance)
	t := w.table("DEADLINE", "PRICE", "CONFIDENCE", "AFFORDABLE")
	any := false
	for _, p := range rep.Curve {
		ok := "no"
		if p.Affordable {
			ok, any = "yes", true
		}
		t.row(stamp(p.Deadline), p.Price.String(), fmt.Sprintf("%.1f%%", 100*p.Confidence), ok)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if !any {
		return w.note("your balance (%s) pays for none of these deadlines\n", rep.Balance)
	}
	return nil
}

func submitCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "submit",
		Usage: "admit a job with a committed deadline: hold its price and run it",
		UsageText: "mrmarket submit --user alice --job etl.json --deadline 45m   (or 2026-11-23T17:00:00Z)\n" +
			"   mrmarket submit --user alice --job etl.json --budget 150       (the earliest deadline it buys)\n" +
			"   mrmarket submit --user alice --job etl.json --budget 80 --best-effort   (no deadline)\n\n" +
			"Admitted jobs run earliest deadline first: while a job's deadline is the earliest on its\n" +
			"hosts it spends its price as a spending rate that buys its reserved share (more when it\n" +
			"falls behind); what it does not spend comes back when it is done. A deadline before the\n" +
			"earliest finish, or a price above --budget or your balance, is refused and nothing is held.\n" +
			"A best-effort job has no deadline: it runs on hosts no deadline job needs, in the broker's\n" +
			"overlap order (MaxSRPT by default: the job with the least work left first).\n\n" +
			jobFileHelp,
		Flags: marketFlags(flagJobFile(),
			&ucli.StringFlag{Name: "deadline", Usage: "finish by: a time (RFC 3339) or a duration from now"},
			&ucli.StringFlag{Name: "budget", Usage: "credits: the earliest deadline they pay for"},
			&ucli.StringFlag{Name: "id", Usage: "job id (idempotency: the same id gives the same job; default: a new id)"},
			&ucli.BoolFlag{Name: "best-effort", Usage: "no deadline: hold --budget and run in the broker's overlap order"},
		),
		Action: func(c *ucli.Context) error {
			user, spec, err := userAndJob(c)
			if err != nil {
				return err
			}
			// The pace signed is the job's shortest run (package mandate).
			req := &wire.SubmitRequest{ID: idOrNew(c, "job"), User: user, Job: spec, BestEffort: c.Bool("best-effort"), Pace: mandate.JobPace(spec, 0)}
			switch {
			case req.BestEffort && c.String("deadline") != "":
				return badInput("a --best-effort job has no --deadline")
			case c.String("deadline") != "" && c.String("budget") != "":
				return badInput("give --deadline or --budget, not both")
			case c.String("deadline") != "":
				if req.Deadline, err = parseDeadline(c.String("deadline"), time.Now()); err != nil {
					return err
				}
			case c.String("budget") != "":
				if req.Budget, err = parseAmount("budget", c.String("budget")); err != nil {
					return err
				}
			default:
				return badInput("--deadline or --budget is required (see `mrmarket quote`)")
			}
			req.V = wire.Version
			return call(c, submit, req, printSubmit)
		},
	}
}

// maxPriceTries is how many times a deadline submit without a budget
// signs a max price from a fresh quote: the price may rise past the one
// signed between the quote and the admission (a host's state arrived
// meanwhile), and the user asked for the deadline, not for that quote.
const maxPriceTries = 3

// submit admits a job, signing a max price for a deadline without a
// budget; refused as unaffordable, it quotes and signs again (at most
// maxPriceTries in all).
func submit(ctx context.Context, cl clients, req *wire.SubmitRequest) (wire.SubmitReply, error) {
	signs := !req.Deadline.IsZero() && req.Budget == 0 && req.MaxPrice == 0
	for try := 1; ; try++ {
		if signs {
			if err := signMaxPrice(ctx, cl, req); err != nil {
				return wire.SubmitReply{}, err
			}
		}
		rep, err := cl.broker.Submit(ctx, req)
		if !signs || try == maxPriceTries || !errors.Is(err, wire.ErrInsufficient) {
			return rep, err
		}
	}
}

func printSubmit(w *out, rep wire.SubmitReply) error {
	j := rep.Job
	if j.Deadline.IsZero() {
		_, err := fmt.Fprintf(w, "job %s (%s): admitted best-effort, %s held (hold %s); %s\n", j.ID, j.Name, j.Price, rep.Plan.Hold, j.Status)
		return err
	}
	_, err := fmt.Fprintf(w, "job %s (%s): admitted, deadline %s, price %s held (hold %s); %s, predicted finish %s\n",
		j.ID, j.Name, stamp(j.Deadline), j.Price, rep.Plan.Hold, j.Status, stamp(j.Predict))
	return err
}

func jobsCommand() *ucli.Command {
	return &ucli.Command{
		Name:        "jobs",
		Usage:       "list admitted jobs: deadline, predicted finish, spent so far; or report one's progress",
		UsageText:   "mrmarket jobs [--user alice]\n   mrmarket jobs watch --user alice --job etl.json --yarn http://rm:8088 [--history http://jhs:19888]",
		Subcommands: []*ucli.Command{jobsWatchCommand()},
		Flags:       marketFlags(),
		Action: func(c *ucli.Context) error {
			return call(c, jobsAndPlans, &wire.JobsRequest{User: setting(c, "user")}, printJobs)
		},
	}
}

// jobsView is the jobs reply (its JSON) with the jobs' plans.
type jobsView struct {
	wire.JobsReply
	plans map[string]wire.Plan // by id: a job's plan shares its id
}

// jobsAndPlans reads the jobs, and their plans: what the bank holds for
// each.
func jobsAndPlans(ctx context.Context, cl clients, req *wire.JobsRequest) (jobsView, error) {
	ps, js, err := readBook(ctx, cl, req.User)
	return jobsView{js, byID(ps.Plans, func(p wire.Plan) string { return p.ID })}, err
}

// printJobs: SHARE is the share of its hosts the job's VMs get, from
// whichever plans fund them (package broker); SPENT
// and HELD are the bank's (captured, and still held, of its price).
func printJobs(w *out, v jobsView) error {
	t := w.table("JOB", "USER", "NAME", "STATUS", "DEADLINE", "PREDICTED", "PROGRESS", "SHARE", "PRICE", "SPENT", "HELD")
	for _, j := range v.Jobs {
		held := "-"
		if p, ok := v.plans[j.ID]; ok {
			held = p.Held.String()
		}
		t.row(j.ID, j.User, j.Name, j.Status, stamp(j.Deadline), stamp(j.Predict), fmt.Sprintf("%.0f%%", 100*j.Progress),
			fmt.Sprintf("%.2f", j.Share), j.Price.String(), j.Spent.String(), held)
	}
	return t.flush()
}

// jobsWatchCommand is `mrmarket jobs watch`: the YARN monitor reporting an
// admitted job's progress to the broker until it is done.
func jobsWatchCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "watch",
		Usage: "report an admitted job's progress from YARN to the broker until it is done (its control loop runs on it)",
		UsageText: "mrmarket jobs watch --user alice --job etl.json --yarn http://rm:8088 [--history http://jhs:19888] [--every 10s] [--once]\n\n" +
			"Finds the user's newest YARN application named as the job, reads its maps and reduces done\n" +
			"(the AM while it runs, the history server after), and reports Jockey's progress indicator,\n" +
			"weighted by the job file's profile; a finished application ends the job's plan.",
		Flags: marketFlags(
			&ucli.StringFlag{Name: "job", Usage: "the job file (JSON) it was submitted with"},
			&ucli.StringFlag{Name: "yarn", Usage: "the ResourceManager's web address"},
			&ucli.StringFlag{Name: "history", Usage: "the Job History Server's web address"},
			&ucli.DurationFlag{Name: "every", Usage: "how often to report", Value: 10 * time.Second},
			&ucli.BoolFlag{Name: "once", Usage: "report once and exit"},
		),
		Action: func(c *ucli.Context) error {
			user, spec, err := userAndJob(c)
			if err != nil {
				return err
			}
			mon, err := yarnWatch(c)
			if err != nil {
				return err
			}
			return withClients(c, func(cl clients) error { return watchJob(c, mon, cl.broker, user, spec) })
		},
	}
}

// watchJob reports the job's progress from YARN every --every until it is
// done (or once with --once), printing each report.
func watchJob(c *ucli.Context, mon *yarn.Monitor, bc broker.Client, user string, spec wire.JobSpec) error {
	mapSecs, reduceSecs := spec.Profile.StageSecs()
	for {
		p, err := mon.JobProgress(c.Context, user, spec.Name)
		if err != nil {
			return wire.Errorf(wire.ErrUnavailable, "%v", err)
		}
		job, err := bc.Progress(c.Context, &wire.ProgressRequest{User: user, Job: spec.Name, Progress: p.Fraction(mapSecs, reduceSecs),
			MapsDone: p.MapsDone, ReducesDone: p.ReducesDone, Done: p.Done})
		if err != nil {
			return err
		}
		if err := show(c, job, func(w *out, job wire.Job) error {
			_, err := fmt.Fprintf(w, "%s %s: %s, %.0f%% (%d/%d maps, %d/%d reduces), share %.2f, deadline %s, predicted %s\n",
				job.ID, job.Name, job.Status, 100*job.Progress, p.MapsDone, p.Maps, p.ReducesDone, p.Reduces, job.Share, stamp(job.Deadline), stamp(job.Predict))
			return err
		}); err != nil {
			return err
		}
		if p.Done || c.Bool("once") || !nextLook(c) {
			return nil
		}
	}
}

// yarnWatch is the ResourceManager (and Job History Server, where the
// command has --history) a watch command follows, its flags checked:
// --yarn given, --every at least 10ms.
func yarnWatch(c *ucli.Context) (*yarn.Monitor, error) {
	if c.String("yarn") == "" {
		return nil, badInput("--yarn (the ResourceManager's address, e.g. http://rm:8088) is required")
	}
	if c.Duration("every") < 10*time.Millisecond {
		return nil, badInput("--every must be at least 10ms")
	}
	return &yarn.Monitor{RM: c.String("yarn"), History: c.String("history")}, nil
}

// nextLook waits --every before a watch's next look: false when the
// command is cancelled meanwhile.
func nextLook(c *ucli.Context) bool {
	select {
	case <-c.Context.Done():
		return false
	case <-time.After(c.Duration("every")):
		return true
	}
}

// maxPriceSlack is how much above the quoted price a deadline submit
// signs as its max price: prices move between the quote and the admission.
const maxPriceSlack = 1.1

// signMaxPrice gives a deadline submit without a budget a max price (the
// bank holds no more than the user signed): the price quoted for the
// deadline now, plus a margin.
func signMaxPrice(ctx context.Context, cl clients, req *wire.SubmitRequest) error {
	q, err := cl.broker.Quote(ctx, &wire.QuoteRequest{User: req.User, Job: req.Job, Points: 10})
	if err != nil {
		return err
	}
	if len(q.Curve) == 0 {
		return wire.Errorf(wire.ErrUnavailable, "no price quoted for job %q", req.Job.Name)
	}
	// Prices fall with the deadline: the last point at or before it costs
	// at least what the deadline does.
	price := q.Curve[0].Price
	for _, p := range q.Curve {
		if !p.Deadline.After(req.Deadline) {
			price = p.Price
		}
	}
	req.MaxPrice = min(money.Micro(float64(price)*maxPriceSlack)+1, money.Max)
	req.Pace = mandate.JobPace(req.Job, q.Work) // the broker's estimate may be below the profile's
	return nil
}
