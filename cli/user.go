package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nuid"
	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/broker"
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

func bankCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "bank",
		Usage: "administer the bank",
		Subcommands: []*ucli.Command{{
			Name:      "grant",
			Usage:     "grant a budget to a user (creates the account)",
			UsageText: "mrmarket bank grant --user alice --amount 100",
			Flags: []ucli.Flag{flagNATS(), flagCreds(), flagJSON(), flagUser(),
				&ucli.StringFlag{Name: "amount", Usage: "credits to grant, e.g. 100 or 0.5"},
				&ucli.StringFlag{Name: "id", Usage: "idempotency id: repeating a grant with the same id applies it once (default: a new id)"},
				&ucli.StringFlag{Name: "memo", Usage: "note kept with the transfer"},
			},
			Action: func(c *ucli.Context) error {
				user, err := requireUser(c)
				if err != nil {
					return err
				}
				amount, err := parseAmount("amount", c.String("amount"))
				if err != nil {
					return err
				}
				req := &wire.GrantRequest{ID: idOrNew(c, "grant"), User: user, Amount: amount, Memo: c.String("memo")}
				return callRetry(c, func(ctx context.Context, cl clients) (wire.GrantReply, error) { return cl.bank.Grant(ctx, req) }, printGrant)
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

func printGrant(w io.Writer, rep wire.GrantReply) error {
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
		Flags:     []ucli.Flag{flagNATS(), flagCreds(), flagJSON(), flagUser()},
		Action: func(c *ucli.Context) error {
			user, err := requireUser(c)
			if err != nil {
				return err
			}
			req := &wire.BalanceRequest{User: user}
			return call(c, func(ctx context.Context, cl clients) (wire.BalanceReply, error) { return cl.bank.Balance(ctx, req) }, printBalance)
		},
	}
}

func printBalance(w io.Writer, rep wire.BalanceReply) error {
	t := newTable(w, "USER", "BALANCE", "HELD", "SPENT", "GRANTED")
	t.row(rep.User, rep.Balance.String(), rep.Held.String(), rep.Spent.String(), rep.Granted.String())
	if err := t.flush(); err != nil {
		return err
	}
	if len(rep.Holds) > 0 {
		fmt.Fprintln(w)
		t = newTable(w, "HOLD", "STATUS", "AMOUNT", "CAPTURED", "RELEASED", "EXPIRES")
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
			"ends goes back to you. A plan file is JSON:\n" +
			`  {"workflows": [{"name": "digg", "weight": 1, "stages": [{"name": "join", "weight": 20, "vms": ["a1", "a2"]}, …]}]}`,
		Flags: []ucli.Flag{flagNATS(), flagCreds(), flagJSON(), flagUser(),
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
			&ucli.StringFlag{Name: "less", Usage: "take this many unspent credits out of running plan --id"},
		},
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
			return callRetry(c, func(ctx context.Context, cl clients) (wire.SpendReply, error) { return cl.broker.Spend(ctx, req) }, printSpend)
		},
	}
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
		Strategy: c.String("strategy"), Boost: c.Float64("boost"), VMs: splitList(c.StringSlice("vm"))}
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
	req.V = wire.Version
	if err := req.Validate(); err != nil {
		return nil, usageError{err}
	}
	return req, nil
}

// splitList is the items of repeated, comma-separated flag values.
func splitList(values []string) []string {
	var out []string
	for _, v := range values {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
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

func printSpend(w io.Writer, rep wire.SpendReply) error {
	p := rep.Plan
	fmt.Fprintf(w, "plan %s: %s spends %s over %s (%s), hold %s, ends %s\n",
		p.ID, p.User, p.Budget, humanDuration(p.Duration.D()), p.Strategy, p.Hold, stamp(p.End))
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
	if err := req.Validate(); err != nil {
		return usageError{err}
	}
	return callRetry(c, func(ctx context.Context, cl clients) (wire.Plan, error) { return cl.broker.Adjust(ctx, req) },
		func(w io.Writer, p wire.Plan) error {
			_, err := fmt.Fprintf(w, "plan %s now spends %s (spent %s, held %s, given back %s), ends %s (adjustment %s)\n",
				p.ID, p.Budget-p.Released, p.Spent, p.Held, p.Released, stamp(p.End), req.ID)
			return err
		})
}

func printPlanVMs(w io.Writer, p wire.Plan) error {
	t := newTable(w, "VM", "HOST", "BUDGET", "RATE")
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
		Flags: []ucli.Flag{flagNATS(), flagCreds(), flagJSON(), flagUser(), &ucli.StringFlag{Name: "plan", Usage: "plan id"},
			&ucli.StringFlag{Name: "id", Usage: "request id (default: a new id); cancelling twice changes nothing"}},
		Action: func(c *ucli.Context) error {
			user, err := requireUser(c)
			if err != nil {
				return err
			}
			if c.String("plan") == "" {
				return badInput("--plan is required (see `mrmarket plans`)")
			}
			req := &wire.CancelRequest{Plan: c.String("plan"), User: user, ID: idOrNew(c, "cancel")}
			return callRetry(c, func(ctx context.Context, cl clients) (wire.Plan, error) { return cl.broker.Cancel(ctx, req) },
				func(w io.Writer, p wire.Plan) error {
					_, err := fmt.Fprintf(w, "plan %s %s; %s released to %s\n", p.ID, p.Status, p.Released, p.User)
					return err
				})
		},
	}
}

func plansCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "plans",
		Usage:     "list spend plans",
		UsageText: "mrmarket plans [--user alice]",
		Flags:     []ucli.Flag{flagNATS(), flagCreds(), flagJSON(), flagUser()},
		Action: func(c *ucli.Context) error {
			req := &wire.PlansRequest{User: c.String("user")}
			return call(c, func(ctx context.Context, cl clients) (wire.PlansReply, error) { return cl.broker.Plans(ctx, req) },
				func(w io.Writer, rep wire.PlansReply) error {
					t := newTable(w, "PLAN", "USER", "STATUS", "STRATEGY", "BUDGET", "SPENT", "RELEASED", "HELD", "DURATION", "VMS", "ENDS")
					estimates := false
					for _, p := range rep.Plans {
						spent := p.Spent.String()
						if p.Figures == broker.FiguresEstimate {
							spent, estimates = spent+"*", true
						}
						t.row(p.ID, p.User, p.Status, p.Strategy, p.Budget.String(), spent, p.Released.String(), p.Held.String(),
							humanDuration(p.Duration.D()), fmt.Sprint(len(p.VMs)), stamp(p.End))
					}
					if err := t.flush(); err != nil || !estimates {
						return err
					}
					_, err := fmt.Fprintln(w, "* the broker's estimate: the bank could not be asked")
					return err
				})
		},
	}
}

func priceCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "price",
		Usage: "show host prices (the sum of the spending rates on each host)",
		UsageText: "mrmarket price [--host host-1]\n" +
			"   mrmarket price --host host-1 --what-if price --performance 0.5 --guarantee 0.9\n" +
			"   mrmarket price --host host-1 --what-if performance --spending 2 --guarantee 0.9\n" +
			"   mrmarket price --host host-1 --what-if guarantee --spending 2 --performance 0.5",
		Flags: []ucli.Flag{flagNATS(), flagCreds(), flagJSON(), flagUser(), &ucli.StringFlag{Name: "host", Usage: "one host only"},
			&ucli.StringFlag{Name: "what-if", Usage: "predict from the host's price history: performance, price or guarantee"},
			&ucli.Float64Flag{Name: "spending", Usage: "a spending rate, credits per hour"},
			&ucli.Float64Flag{Name: "performance", Usage: "a share of the host, 0..1"},
			&ucli.Float64Flag{Name: "guarantee", Usage: "a probability, 0..1"},
		},
		Action: func(c *ucli.Context) error {
			if c.String("what-if") != "" {
				return whatIf(c)
			}
			req := &wire.PriceRequest{Host: c.String("host")}
			return call(c, func(ctx context.Context, cl clients) (wire.PriceReply, error) { return cl.broker.Price(ctx, req) },
				func(w io.Writer, rep wire.PriceReply) error {
					t := newTable(w, "HOST", "PRICE", "VMS", "FUNDED", "UPDATED")
					for _, h := range rep.Hosts {
						t.row(h.Host, perHour(h.Price), fmt.Sprint(h.VMs), fmt.Sprint(h.Funded), stamp(h.Updated))
					}
					return t.flush()
				})
		},
	}
}

// whatIf is price --what-if: the prediction strategy's three queries.
func whatIf(c *ucli.Context) error {
	perSecond := float64(money.PerCredit) / 3600
	req := &wire.PredictRequest{Host: c.String("host"), Query: c.String("what-if"), Spending: c.Float64("spending") * perSecond,
		Performance: c.Float64("performance"), Guarantee: c.Float64("guarantee")}
	if err := req.Validate(); err != nil {
		return usageError{err}
	}
	return call(c, func(ctx context.Context, cl clients) (wire.PredictReply, error) { return cl.broker.Predict(ctx, req) },
		func(w io.Writer, rep wire.PredictReply) error {
			_, err := fmt.Fprintf(w, "%s (price %s ± %s over %d observations): spending %s buys a share of %.3f with probability %.3f\n",
				rep.Host, perHour(rep.MeanPrice), perHour(rep.StdDevPrice), rep.Observations, perHour(rep.Spending), rep.Performance, rep.Guarantee)
			return err
		})
}

func vmsCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "vms",
		Usage:     "list VMs with their owner, rate, share and utilisation",
		UsageText: "mrmarket vms [--owner alice] [--host host-1] [--user alice]",
		Flags: []ucli.Flag{flagNATS(), flagCreds(), flagJSON(), flagUser(),
			&ucli.StringFlag{Name: "owner", Usage: "only this user's VMs"},
			&ucli.StringFlag{Name: "host", Usage: "only this host's VMs"},
		},
		Action: func(c *ucli.Context) error {
			req := &wire.VMsRequest{Owner: c.String("owner"), Host: c.String("host")}
			return call(c, func(ctx context.Context, cl clients) (wire.VMsReply, error) { return cl.broker.VMs(ctx, req) }, printVMs)
		},
	}
}

func printVMs(w io.Writer, rep wire.VMsReply) error {
	t := newTable(w, "HOST", "VM", "OWNER", "PLAN", "RATE", "SHARE", "UTIL", "CHARGED", "ENDS")
	for _, v := range rep.VMs {
		plan, charged, ends := "-", "-", "-"
		if len(v.Bids) > 0 {
			b := v.Bids[0]
			plan, charged, ends = b.Plan, b.Charged.String(), stamp(b.Ends)
		}
		util := pct(v.Util)
		if v.Idle {
			util += " idle"
		}
		t.row(v.Host, v.VM, v.Owner, plan, perHour(v.Rate), pct(v.Share), util, charged, ends)
	}
	return t.flush()
}

func ledgerCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "ledger",
		Usage:     "show every account and check the ledger invariant",
		UsageText: "mrmarket ledger",
		Flags:     []ucli.Flag{flagNATS(), flagCreds(), flagJSON()},
		Action: func(c *ucli.Context) error {
			var rep wire.LedgerReply // kept to judge the invariant after printing it
			ledger := func(ctx context.Context, cl clients) (wire.LedgerReply, error) {
				var err error
				rep, err = cl.bank.Ledger(ctx)
				return rep, err
			}
			if err := call(c, ledger, printLedger); err != nil {
				return err
			}
			if len(rep.Violations) > 0 {
				return wire.Errorf(wire.ErrInternal, "ledger invariant violated: %s", strings.Join(rep.Violations, "; "))
			}
			return nil
		},
	}
}

func printLedger(w io.Writer, rep wire.LedgerReply) error {
	t := newTable(w, "ACCOUNT", "KIND", "BALANCE")
	for _, a := range rep.Accounts {
		t.row(a.ID, a.Kind, a.Balance.String())
	}
	if err := t.flush(); err != nil {
		return err
	}
	return printInvariant(w, rep)
}

func printInvariant(w io.Writer, rep wire.LedgerReply) error {
	verdict := "holds"
	if len(rep.Violations) > 0 {
		verdict = "VIOLATED: " + strings.Join(rep.Violations, "; ")
	}
	_, err := fmt.Fprintf(w, "\ninvariant: Σ balances %s + Σ open holds %s = Σ granted %s … %s\n",
		rep.Balances, rep.OpenHolds, rep.Granted, verdict)
	return err
}

// durationOf prints a virtual elapsed time compactly.
func durationOf(d time.Duration) string { return d.Round(time.Second).String() }
