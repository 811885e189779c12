package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nuid"
	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

func parseAmount(flag, s string) (money.Micro, error) {
	if s == "" {
		return 0, badInput("--%s is required (credits, e.g. 12.5)", flag)
	}
	m, err := money.ParsePositive(s)
	if err != nil {
		return 0, usageError{fmt.Errorf("--%s: %w", flag, err)}
	}
	return m, nil
}

// userAndAmount are --user and --amount.
func userAndAmount(c *ucli.Context) (string, money.Micro, error) {
	user, err := requireUser(c)
	if err != nil {
		return "", 0, err
	}
	amount, err := parseAmount("amount", c.String("amount"))
	return user, amount, err
}

func bankCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "bank",
		Usage: "administer the bank",
		Subcommands: []*ucli.Command{{
			Name:      "grant",
			Usage:     "grant a budget to a user (creates the account)",
			UsageText: "mrmarket bank grant --user alice --amount 100",
			Flags: marketFlags(
				&ucli.StringFlag{Name: "amount", Usage: "credits to grant, e.g. 100 or 0.5"},
				&ucli.StringFlag{Name: "id", Usage: "idempotency id: repeating a grant with the same id applies it once (default: a new id)"},
				&ucli.StringFlag{Name: "memo", Usage: "note kept with the transfer"},
			),
			Action: func(c *ucli.Context) error {
				user, amount, err := userAndAmount(c)
				if err != nil {
					return err
				}
				req := &wire.GrantRequest{ID: idOrNew(c, "grant"), User: user, Amount: amount, Memo: c.String("memo")}
				return call(c, onBank(bank.Client.Grant), req, printGrant)
			},
		}, bankServeCommand(), incomeCommand(), principalCommand()},
	}
}

// idOrNew is --id, or a new id with the prefix: an idempotency id the user
// may choose, so that repeating the command applies it once.
func idOrNew(c *ucli.Context, prefix string) string {
	if id := c.String("id"); id != "" {
		return id
	}
	return prefix + "-" + nuid.Next()
}

func printGrant(w *out, rep wire.GrantReply) error {
	note := ""
	if rep.Replayed {
		note = " (already applied; nothing changed)"
	}
	_, err := fmt.Fprintf(w, "granted %s to %s%s; balance %s (transfer %s)\n", rep.Amount, rep.User, note, rep.Balance, rep.Transfer)
	return err
}

func balanceCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "balance",
		Usage:     "show a user's balance, money held by running plans, and spending",
		UsageText: "mrmarket balance --user alice",
		Flags:     marketFlags(),
		Action: func(c *ucli.Context) error {
			user, err := requireUser(c)
			if err != nil {
				return err
			}
			return call(c, onBank(bank.Client.Balance), &wire.BalanceRequest{User: user}, printBalance)
		},
	}
}

func printBalance(w *out, rep wire.BalanceReply) error {
	t := w.table("USER", "BALANCE", "HELD", "SPENT", "GRANTED")
	t.row(rep.User, rep.Balance.String(), rep.Held.String(), rep.Spent.String(), rep.Granted.String())
	if err := t.flush(); err != nil {
		return err
	}
	if len(rep.Holds) > 0 {
		w.note("\n")
		t = w.table("HOLD", "STATUS", "AMOUNT", "CAPTURED", "RELEASED", "EXPIRES")
		for _, h := range rep.Holds {
			t.row(h.ID, h.Status, h.Amount.String(), h.Captured.String(), h.Released.String(), stamp(h.Expires))
		}
		return t.flush()
	}
	return nil
}

func spendCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "spend",
		Usage: "spend a budget over a duration on your VMs, with a strategy; or adjust a running plan",
		UsageText: "mrmarket spend --user alice --budget 10 --duration 1h --vm h1-vm1 --vm h2-vm1\n" +
			"   mrmarket spend --user alice --budget 10 --duration 1h --vm h1-vm1,h2-vm1 --strategy bottleneck --boost 0.9\n" +
			"   mrmarket spend --user alice --budget 10 --duration 1h --plan digg.json --strategy stage\n" +
			"   mrmarket spend --user alice --id plan-… --more 5      (or --less 2)",
		Description: "Holds the budget in the bank; every tick the broker spends what is left over the time\n" +
			"left with the strategy: fair (constant rate), workflow / stage (weights from --plan),\n" +
			"bottleneck (money moves from idle VMs to busy ones, --boost f in [0,1)), best-response\n" +
			"(across hosts from their prices, --host-weight host=w) or stage-bottleneck (ours: stage\n" +
			"weights across stages, bottleneck elimination within the active one). What is not spent when the plan\n" +
			"ends goes back to you. The request signs how fast the strategy may spend, in all and on one VM; the\n" +
			"bank and the agents hold the broker to it. A plan file is JSON:\n" +
			`  {"workflows": [{"name": "digg", "weight": 1, "stages": [{"name": "join", "weight": 20, "vms": ["a1", "a2"]}, …]}]}`,
		Flags: marketFlags(
			&ucli.StringFlag{Name: "budget", Usage: "credits to spend over the duration"},
			&ucli.DurationFlag{Name: "duration", Usage: "how long to spend it, e.g. 30m or 2h"},
			&ucli.StringSliceFlag{Name: "vm", Usage: "a VM to spend on (repeat, or comma-separate)"},
			&ucli.StringFlag{Name: "plan", Usage: "a workflow descriptor file (JSON) instead of --vm"},
			&ucli.StringFlag{Name: "strategy", Value: wire.StrategyFair, Usage: "spending strategy: " + strings.Join(wire.Strategies, ", ")},
			&ucli.Float64Flag{Name: "boost", Usage: "bottleneck elimination's boost f in [0, 1)"},
			&ucli.StringSliceFlag{Name: "host-weight", Usage: "best response's preference for a host: host=weight (default 1)"},
			&ucli.StringFlag{Name: "id", Usage: "plan id (idempotency: the same id and request gives the same plan; default: a new id)"},
			&ucli.StringFlag{Name: "adjust-id", Usage: "--more/--less: idempotency id of the adjustment (default: a new id)"},
			&ucli.StringFlag{Name: "more", Usage: "add this many credits to running plan --id"},
			&ucli.StringFlag{Name: "less", Usage: "take this many unspent credits out of running plan --id (released to you at once)"},
		),
		Action: func(c *ucli.Context) error {
			user, err := requireUser(c)
			if err != nil {
				return err
			}
			if c.String("more") != "" || c.String("less") != "" {
				return adjustPlan(c, user)
			}
			req, err := spendRequest(c, user)
			if err != nil {
				return err
			}
			return call(c, startPlan, req, printSpend)
		},
	}
}

// startPlan is a spend whose plan runs: its id again after the plan was
// cancelled or ended is the broker's replay of that plan, which starts
// nothing — a refusal, saying so, rather than a success.
func startPlan(ctx context.Context, cl clients, req *wire.SpendRequest) (wire.SpendReply, error) {
	rep, err := cl.broker.Spend(ctx, req)
	if p := rep.Plan; err == nil && (p.Status == wire.PlanCancelled || p.Status == wire.PlanDone) {
		err = wire.Errorf(wire.ErrConflict, "plan %s is %s (ended %s): its id starts nothing again; spend with a new --id", p.ID, p.Status, stamp(p.End))
	}
	return rep, err
}

// spendRequest is the plan the flags describe, checked.
func spendRequest(c *ucli.Context, user string) (*wire.SpendRequest, error) {
	budget, err := parseAmount("budget", c.String("budget"))
	if err != nil {
		return nil, err
	}
	d := c.Duration("duration")
	if d <= 0 {
		return nil, badInput("--duration must be greater than zero (e.g. 30m, 2h)")
	}
	req := &wire.SpendRequest{ID: idOrNew(c, "plan"), User: user, Budget: budget, Duration: wire.Duration(d),
		Strategy: c.String("strategy"), Boost: c.Float64("boost")}
	if req.VMs, err = splitList("vm", c.StringSlice("vm")); err != nil {
		return nil, err
	}
	if file := c.String("plan"); file != "" {
		if req.Workflows, err = readPlanFile(file); err != nil {
			return nil, err
		}
	}
	if len(req.VMs) == 0 && len(req.Workflows) == 0 {
		return nil, badInput("at least one --vm (see `mrmarket vms`) or a --plan file is required")
	}
	if req.HostWeights, err = parseHostWeights(c.StringSlice("host-weight")); err != nil {
		return nil, err
	}
	// The user signs how fast the plan may spend, from its strategy: the
	// bank captures and the agents charge no faster (package mandate). An
	// unknown strategy signs none, and the broker says what is wrong.
	_ = mandate.SignCaps(req)
	req.V = wire.Version
	return req, nil
}

// splitList is the items of repeated, comma-separated values of --flag:
// an empty item (--vm "", --vm a1,,b1) or one given twice is an error, not
// skipped — it is more likely a mistyped name than nothing.
func splitList(flag string, values []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, v := range values {
		for _, p := range strings.Split(v, ",") {
			p = strings.TrimSpace(p)
			switch {
			case p == "":
				return nil, badInput("--%s %q: an empty name", flag, v)
			case seen[p]:
				return nil, badInput("--%s: %s is named twice", flag, p)
			}
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}

// parseHostWeights reads --host-weight host=weight flags (nil when none).
func parseHostWeights(flags []string) (map[string]float64, error) {
	var weights map[string]float64
	for _, hw := range flags {
		h, w, ok := strings.Cut(hw, "=")
		f, err := strconv.ParseFloat(w, 64)
		if !ok || err != nil {
			return nil, badInput("--host-weight %q: want host=weight", hw)
		}
		if weights == nil {
			weights = map[string]float64{}
		}
		weights[h] = f
	}
	return weights, nil
}

func printSpend(w *out, rep wire.SpendReply) error {
	p := rep.Plan
	w.note("plan %s: %s spends %s over %s (%s), hold %s, ends %s\n",
		p.ID, p.User, p.Budget, span(p.Duration.D()), p.Strategy, p.Hold, stamp(p.End))
	return printPlanVMs(w, p)
}

// readPlanFile reads a workflow descriptor, strictly.
func readPlanFile(path string) ([]wire.WorkflowSpec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, usageError{fmt.Errorf("--plan: %w", err)}
	}
	defer f.Close()
	var doc struct {
		Workflows []wire.WorkflowSpec `json:"workflows"`
	}
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, usageError{fmt.Errorf("--plan %s: %w", path, err)}
	}
	if len(doc.Workflows) == 0 {
		return nil, badInput("--plan %s: no workflows", path)
	}
	return doc.Workflows, nil
}

// adjustPlan is spend --more / --less.
func adjustPlan(c *ucli.Context, user string) error {
	if c.String("id") == "" {
		return badInput("--more and --less need the plan's --id (see `mrmarket plans`)")
	}
	id := c.String("adjust-id")
	if id == "" {
		id = "adjust-" + nuid.Next()
	}
	req := &wire.AdjustRequest{Plan: c.String("id"), User: user, ID: id}
	var err error
	if c.String("more") != "" {
		if req.More, err = parseAmount("more", c.String("more")); err != nil {
			return err
		}
	}
	if c.String("less") != "" {
		if req.Less, err = parseAmount("less", c.String("less")); err != nil {
			return err
		}
	}
	return call(c, onBroker(broker.Client.Adjust), req, func(w *out, p wire.Plan) error {
		_, err := fmt.Fprintf(w, "plan %s now spends %s (spent %s, held %s, given back %s), ends %s (adjustment %s)\n",
			p.ID, p.Budget-p.Released, p.Spent, p.Held, p.Released, stamp(p.End), req.ID)
		return err
	})
}

func printPlanVMs(w *out, p wire.Plan) error {
	t := w.table("VM", "HOST", "BUDGET", "RATE")
	for _, v := range p.VMs {
		t.row(v.VM, v.Host, v.Budget.String(), perHour(v.Rate))
	}
	return t.flush()
}

func cancelCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "cancel",
		Usage:     "end one of your plans now and get back what it has not spent",
		UsageText: "mrmarket cancel --user alice --plan plan-…",
		Flags: marketFlags(&ucli.StringFlag{Name: "plan", Usage: "plan id"},
			&ucli.StringFlag{Name: "id", Usage: "request id (default: a new id); cancelling twice changes nothing"}),
		Action: func(c *ucli.Context) error {
			user, err := requireUser(c)
			if err != nil {
				return err
			}
			if c.String("plan") == "" {
				return badInput("--plan is required (see `mrmarket plans`)")
			}
			req := &wire.CancelRequest{Plan: c.String("plan"), User: user, ID: idOrNew(c, "cancel")}
			return call(c, onBroker(broker.Client.Cancel), req, func(w *out, p wire.Plan) error {
				_, err := fmt.Fprintf(w, "plan %s %s; spent %s, %s released to %s\n", p.ID, p.Status, p.Spent, p.Released, p.User)
				return err
			})
		},
	}
}

func plansCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "plans",
		Usage: "list spend plans, with the bank's figures: spent (captured), released and still held",
		UsageText: "mrmarket plans [--user alice]\n\n" +
			"STRATEGY is the plan's, or for a job's plan deadline (a job with a deadline) or best-effort.",
		Flags: marketFlags(),
		Action: func(c *ucli.Context) error {
			return call(c, plansAndJobs, &wire.PlansRequest{User: setting(c, "user")}, printPlans)
		},
	}
}

// plansView is the plans reply (its JSON) with the jobs the plans run.
type plansView struct {
	wire.PlansReply
	jobs map[string]wire.Job // by id: a job's plan shares its id
}

// plansAndJobs reads the plans, and the jobs, so that a job's plan is
// shown by the job it runs.
func plansAndJobs(ctx context.Context, cl clients, req *wire.PlansRequest) (plansView, error) {
	ps, js, err := readBook(ctx, cl, req.User)
	return plansView{ps, byID(js.Jobs, func(j wire.Job) string { return j.ID })}, err
}

// readBook reads a user's plans and jobs (everyone's for "").
func readBook(ctx context.Context, cl clients, user string) (wire.PlansReply, wire.JobsReply, error) {
	ps, err := cl.broker.Plans(ctx, &wire.PlansRequest{User: user})
	if err != nil {
		return ps, wire.JobsReply{}, err
	}
	js, err := cl.broker.Jobs(ctx, &wire.JobsRequest{User: user})
	return ps, js, err
}

// byID indexes items by their id.
func byID[T any](items []T, id func(T) string) map[string]T {
	m := make(map[string]T, len(items))
	for _, it := range items {
		m[id(it)] = it
	}
	return m
}

// strategy is what a plan spends by: its strategy, or for a job's plan
// (whose strategy is the deadline service's) the kind of job: deadline or
// best-effort (which the broker's answer names already).
func (v plansView) strategy(p wire.Plan) string {
	if j, ok := v.jobs[p.ID]; ok && j.Deadline.IsZero() {
		return wire.StrategyBestEffort
	}
	return p.Strategy
}

func printPlans(w *out, m plansView) error {
	t := w.table("PLAN", "USER", "STATUS", "STRATEGY", "BUDGET", "SPENT", "RELEASED", "HELD", "DURATION", "VMS", "ENDS")
	estimates := false
	for _, p := range m.Plans {
		spent := p.Spent.String()
		if p.Figures == broker.FiguresEstimate {
			spent, estimates = spent+"*", true
		}
		t.row(p.ID, p.User, p.Status, m.strategy(p), p.Budget.String(), spent, p.Released.String(), p.Held.String(),
			span(p.Duration.D()), fmt.Sprint(len(p.VMs)), stamp(p.End))
	}
	if err := t.flush(); err != nil || !estimates {
		return err
	}
	return w.note("* the broker's estimate: the bank could not be asked\n")
}

func priceCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "price",
		Usage: "show host prices (the sum of the spending rates on each host)",
		UsageText: "mrmarket price [--host host-1]\n" +
			"   mrmarket price --host host-1 --what-if price --performance 0.5 --guarantee 0.9\n" +
			"   mrmarket price --host host-1 --what-if performance --spending 2 --guarantee 0.9\n" +
			"   mrmarket price --host host-1 --what-if guarantee --spending 2 --performance 0.5",
		Flags: marketFlags(&ucli.StringFlag{Name: "host", Usage: "one host only"},
			&ucli.StringFlag{Name: "what-if", Usage: "predict from the host's price history: performance, price or guarantee"},
			&ucli.Float64Flag{Name: "spending", Usage: "a spending rate, credits per hour"},
			&ucli.Float64Flag{Name: "performance", Usage: "a share of the host, 0..1"},
			&ucli.Float64Flag{Name: "guarantee", Usage: "a probability, 0..1"},
		),
		Action: func(c *ucli.Context) error {
			if c.String("what-if") != "" {
				return whatIf(c)
			}
			return call(c, onBroker(broker.Client.Price), &wire.PriceRequest{Host: c.String("host")}, func(w *out, rep wire.PriceReply) error {
				t := w.table("HOST", "PRICE", "VMS", "FUNDED", "UPDATED")
				var stale []string
				for _, h := range rep.Hosts {
					updated := stamp(h.Updated)
					switch {
					case h.Retired:
						updated += " retired"
					case h.Stale:
						updated += " stale"
						stale = append(stale, h.Host)
					}
					t.row(h.Host, perHour(h.Price), fmt.Sprint(h.VMs), fmt.Sprint(h.Funded), updated)
				}
				if err := t.flush(); err != nil {
					return err
				}
				return noteStale(w, stale)
			})
		},
	}
}

// whatIf is price --what-if: the prediction strategy's three queries.
func whatIf(c *ucli.Context) error {
	perSecond := float64(money.PerCredit) / 3600
	req := &wire.PredictRequest{Host: c.String("host"), Query: c.String("what-if"), Spending: c.Float64("spending") * perSecond,
		Performance: c.Float64("performance"), Guarantee: c.Float64("guarantee")}
	return call(c, onBroker(broker.Client.Predict), req, func(w *out, rep wire.PredictReply) error {
		_, err := fmt.Fprintf(w, "%s (price %s ± %s over %d observations): spending %s buys a share of %.3f with probability %.3f\n",
			rep.Host, perHour(rep.MeanPrice), perHour(rep.StdDevPrice), rep.Observations, perHour(rep.Spending), rep.Performance, rep.Guarantee)
		return err
	})
}

func vmsCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "vms",
		Usage:     "list VMs with their owner, rate, share and utilisation, and every plan's bid on them",
		UsageText: "mrmarket vms [--owner alice] [--host host-1] [--user alice]",
		Description: "As the admin: every VM. As a user: your own VMs, and for each host one row for all the\n" +
			"other users' VMs together, \"(others)\": how many, their rate and share combined (the host's\n" +
			"price less your rates), nothing of whose they are or of their plans. With --json, a user's\n" +
			"answer lists those rows under \"others\": [{\"host\", \"vms\", \"rate_micro_per_s\", \"share\"}].",
		Flags: marketFlags(
			&ucli.StringFlag{Name: "owner", Usage: "only this user's VMs (as a user: only your own)"},
			&ucli.StringFlag{Name: "host", Usage: "only this host's VMs"},
		),
		Action: func(c *ucli.Context) error {
			return call(c, hostVMs, &wire.VMsRequest{Owner: c.String("owner"), Host: c.String("host")}, printVMs)
		},
	}
}

// hostVMs are the VMs req asks for; none of a --host the broker does not
// know is that host unknown (as price says), not an empty table.
func hostVMs(ctx context.Context, cl clients, req *wire.VMsRequest) (wire.VMsReply, error) {
	rep, err := cl.broker.VMs(ctx, req)
	if err == nil && req.Host != "" && len(rep.VMs) == 0 && len(rep.Others) == 0 {
		_, err = cl.broker.Price(ctx, &wire.PriceRequest{Host: req.Host})
	}
	return rep, err
}

// printVMs is a row per bid: a VM funded by several plans has a row for
// each (its rate is their sum), a VM without a bid one row with PLAN -.
// A user's answer has, after its own VMs on each host, a row for the other
// users' VMs there together, "(others)", with only their count, rate and
// share.
func printVMs(w *out, rep wire.VMsReply) error {
	var stale []string
	t := w.table("HOST", "VM", "OWNER", "RATE", "SHARE", "UTIL", "DISK", "NET IN/OUT", "PLAN", "BID", "CHARGED", "ENDS")
	others := func(host string) { // the other users' rows of hosts up to host, in order
		for len(rep.Others) > 0 && (host == "" || rep.Others[0].Host < host) {
			o, vms := rep.Others[0], "VMs"
			if o.VMs == 1 {
				vms = "VM"
			}
			host := o.Host
			if o.Stale {
				host += " stale"
				if !slices.Contains(stale, o.Host) {
					stale = append(stale, o.Host)
				}
			}
			t.row(host, fmt.Sprintf("(%d %s)", o.VMs, vms), "(others)", perHour(o.Rate), pct(o.Share), "-", "-", "-", "-", "-", "-", "-")
			rep.Others = rep.Others[1:]
		}
	}
	for _, v := range rep.VMs {
		others(v.Host)
		util := pct(v.Util)
		if v.Idle {
			util += " idle"
		}
		host := v.Host
		if v.Stale {
			host += " stale"
			if !slices.Contains(stale, v.Host) {
				stale = append(stale, v.Host)
			}
		}
		vm := []string{host, v.VM, v.Owner, perHour(v.Rate), pct(v.Share), util,
			delivered(v, wire.ResourceDisk), delivered(v, wire.ResourceNetIn, wire.ResourceNetOut)}
		if len(v.Bids) == 0 {
			t.row(append(vm, "-", "-", "-", "-")...)
		}
		for _, b := range v.Bids {
			t.row(append(vm, b.Plan, perHour(b.Rate), b.Charged.String(), stamp(b.Ends))...)
		}
	}
	others("")
	if err := t.flush(); err != nil {
		return err
	}
	if err := noteShort(w, rep.VMs); err != nil {
		return err
	}
	return noteStale(w, stale)
}

// noteShort says, after a table, which VMs their agents found short of
// their shares: each wanted more of a resource than it got, and got less
// than its share entitles it to.
func noteShort(w *out, vms []wire.HostVM) error {
	for _, v := range vms {
		for _, s := range v.Short {
			if err := w.note("short: %s on %s got %s of the %s for %s, its share entitles it to %s (the agent does not deliver what it pays for)\n",
				v.VM, v.Host, pct(s.Delivered), s.Resource, v.Updated.Sub(s.Since).Round(time.Second), pct(s.Entitled)); err != nil {
				return err
			}
		}
	}
	return nil
}

// noteStale says, after a table, what its "stale" hosts' rows are: the
// last their agents said, not what they do now.
func noteStale(w *out, hosts []string) error {
	if len(hosts) == 0 {
		return nil
	}
	return w.note("stale: no state from the agent of %s for several of its ticks; its rows are as of its last state "+
		"(`mrmarket price` says when; `mrmarket bank principal revoke` of its agent's key retires a host for good)\n", strings.Join(hosts, ", "))
}

// delivered says how v's host delivers its share of resources: a
// throttle's caps now (MiB/s), "weights" where the kernel divides by its
// share, "-" where nothing governs it — never a share nothing delivers.
func delivered(v wire.HostVM, resources ...string) string {
	mode, caps := v.Delivery(resources...)
	switch {
	case mode == wire.ModeWeights:
		return "weights " + pct(v.Share)
	case mode == wire.ModeThrottle && caps == nil:
		return "throttle"
	case mode == wire.ModeThrottle:
		s := make([]string, len(caps))
		for i, c := range caps {
			s[i] = fmt.Sprintf("%.1f", c)
		}
		return strings.Join(s, "/") + " MiB/s"
	}
	return "-"
}

func ledgerCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "ledger",
		Usage:     "show every account and check the ledger invariant",
		UsageText: "mrmarket ledger",
		Flags:     adminFlags(),
		Action: func(c *ucli.Context) error {
			var rep wire.LedgerReply // kept to judge the invariant after printing it
			ledger := func(ctx context.Context, cl clients, _ *wire.LedgerRequest) (wire.LedgerReply, error) {
				var err error
				rep, err = cl.bank.Ledger(ctx)
				return rep, err
			}
			if err := call(c, ledger, &wire.LedgerRequest{}, printLedger); err != nil {
				return err
			}
			if len(rep.Violations) > 0 {
				return wire.Errorf(wire.ErrInternal, "ledger invariant violated: %s", strings.Join(rep.Violations, "; "))
			}
			return nil
		},
	}
}

func printLedger(w *out, rep wire.LedgerReply) error {
	t := w.table("ACCOUNT", "KIND", "BALANCE")
	for _, a := range rep.Accounts {
		t.row(a.ID, a.Kind, a.Balance.String())
	}
	if err := t.flush(); err != nil {
		return err
	}
	return printInvariant(w, rep)
}

func printInvariant(w *out, rep wire.LedgerReply) error {
	verdict := "holds"
	if len(rep.Violations) > 0 {
		verdict = "VIOLATED: " + strings.Join(rep.Violations, "; ")
	}
	return w.note("\ninvariant: Σ balances %s + Σ open holds %s = Σ granted %s … %s\n",
		rep.Balances, rep.OpenHolds, rep.Granted, verdict)
}
