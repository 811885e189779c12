package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nuid"
	ucli "github.com/urfave/cli/v2"

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
				id := c.String("id")
				if id == "" {
					id = "grant-" + nuid.Next()
				}
				nc, err := connect(c)
				if err != nil {
					return err
				}
				defer nc.Close()
				rep, err := bankClient(c, nc).Grant(c.Context, &wire.GrantRequest{ID: id, User: user, Amount: amount, Memo: c.String("memo")})
				if err != nil {
					return err
				}
				return output(c, rep, func(w io.Writer) error {
					note := ""
					if rep.Replayed {
						note = " (already applied; nothing changed)"
					}
					_, err := fmt.Fprintf(w, "granted %s to %s%s; balance %s (transfer %s)\n", rep.Amount, rep.User, note, rep.Balance, rep.Transfer)
					return err
				})
			},
		}, bankServeCommand(), incomeCommand(), principalCommand()},
	}
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
			nc, err := connect(c)
			if err != nil {
				return err
			}
			defer nc.Close()
			rep, err := bankClient(c, nc).Balance(c.Context, &wire.BalanceRequest{User: user})
			if err != nil {
				return err
			}
			return output(c, rep, func(w io.Writer) error {
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
			})
		},
	}
}

func spendCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "spend",
		Usage: "spend a budget over a duration on your VMs",
		UsageText: "mrmarket spend --user alice --budget 10 --duration 1h --vm h1-vm1 --vm h2-vm1\n" +
			"   mrmarket spend --user alice --budget 10 --duration 30m --vm h1-vm1,h2-vm1 --json",
		Description: "Holds the budget in the bank, then bids budget/duration per VM (strategy \"fair\":\n" +
			"a constant rate, budget split evenly over the VMs). Agents charge per tick; what is\n" +
			"not spent when the plan ends goes back to you.",
		Flags: []ucli.Flag{flagNATS(), flagCreds(), flagJSON(), flagUser(),
			&ucli.StringFlag{Name: "budget", Usage: "credits to spend over the duration"},
			&ucli.DurationFlag{Name: "duration", Usage: "how long to spend it, e.g. 30m or 2h"},
			&ucli.StringSliceFlag{Name: "vm", Usage: "a VM to spend on (repeat, or comma-separate)"},
			&ucli.StringFlag{Name: "strategy", Value: wire.StrategyFair, Usage: "spending strategy: fair"},
			&ucli.StringFlag{Name: "id", Usage: "plan id (idempotency: the same id and request gives the same plan)"},
		},
		Action: func(c *ucli.Context) error {
			user, err := requireUser(c)
			if err != nil {
				return err
			}
			budget, err := parseAmount("budget", c.String("budget"))
			if err != nil {
				return err
			}
			d := c.Duration("duration")
			if d <= 0 {
				return badInput("--duration must be greater than zero (e.g. 30m, 2h)")
			}
			var vms []string
			for _, v := range c.StringSlice("vm") {
				for _, p := range strings.Split(v, ",") {
					if p = strings.TrimSpace(p); p != "" {
						vms = append(vms, p)
					}
				}
			}
			if len(vms) == 0 {
				return badInput("at least one --vm is required (see `mrmarket vms`)")
			}
			req := &wire.SpendRequest{ID: c.String("id"), User: user, Budget: budget, Duration: wire.Duration(d), VMs: vms, Strategy: c.String("strategy")}
			req.V = wire.Version
			if err := req.Validate(); err != nil {
				return usageError{err}
			}
			nc, err := connect(c)
			if err != nil {
				return err
			}
			defer nc.Close()
			rep, err := brokerClient(c, nc).Spend(c.Context, req)
			if err != nil {
				return err
			}
			return output(c, rep, func(w io.Writer) error {
				p := rep.Plan
				fmt.Fprintf(w, "plan %s: %s spends %s over %s (%s), hold %s, ends %s\n",
					p.ID, p.User, p.Budget, p.Duration.D(), p.Strategy, p.Hold, stamp(p.End))
				return printPlanVMs(w, p)
			})
		},
	}
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
		Flags:     []ucli.Flag{flagNATS(), flagCreds(), flagJSON(), flagUser(), &ucli.StringFlag{Name: "plan", Usage: "plan id"}},
		Action: func(c *ucli.Context) error {
			user, err := requireUser(c)
			if err != nil {
				return err
			}
			if c.String("plan") == "" {
				return badInput("--plan is required (see `mrmarket plans`)")
			}
			nc, err := connect(c)
			if err != nil {
				return err
			}
			defer nc.Close()
			p, err := brokerClient(c, nc).Cancel(c.Context, &wire.CancelRequest{Plan: c.String("plan"), User: user})
			if err != nil {
				return err
			}
			return output(c, p, func(w io.Writer) error {
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
			nc, err := connect(c)
			if err != nil {
				return err
			}
			defer nc.Close()
			rep, err := brokerClient(c, nc).Plans(c.Context, &wire.PlansRequest{User: c.String("user")})
			if err != nil {
				return err
			}
			return output(c, rep, func(w io.Writer) error {
				t := newTable(w, "PLAN", "USER", "STATUS", "STRATEGY", "BUDGET", "DURATION", "VMS", "ENDS", "RELEASED")
				for _, p := range rep.Plans {
					t.row(p.ID, p.User, p.Status, p.Strategy, p.Budget.String(), p.Duration.D().String(),
						fmt.Sprint(len(p.VMs)), stamp(p.End), p.Released.String())
				}
				return t.flush()
			})
		},
	}
}

func priceCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "price",
		Usage:     "show host prices (the sum of the spending rates on each host)",
		UsageText: "mrmarket price [--host host-1]",
		Flags:     []ucli.Flag{flagNATS(), flagCreds(), flagJSON(), &ucli.StringFlag{Name: "host", Usage: "one host only"}},
		Action: func(c *ucli.Context) error {
			nc, err := connect(c)
			if err != nil {
				return err
			}
			defer nc.Close()
			rep, err := brokerClient(c, nc).Price(c.Context, &wire.PriceRequest{Host: c.String("host")})
			if err != nil {
				return err
			}
			return output(c, rep, func(w io.Writer) error {
				t := newTable(w, "HOST", "PRICE", "VMS", "FUNDED", "UPDATED")
				for _, h := range rep.Hosts {
					t.row(h.Host, perHour(h.Price), fmt.Sprint(h.VMs), fmt.Sprint(h.Funded), stamp(h.Updated))
				}
				return t.flush()
			})
		},
	}
}

func vmsCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "vms",
		Usage:     "list VMs with their owner, rate, share and utilisation",
		UsageText: "mrmarket vms [--owner alice] [--host host-1]",
		Flags: []ucli.Flag{flagNATS(), flagCreds(), flagJSON(),
			&ucli.StringFlag{Name: "owner", Usage: "only this user's VMs"},
			&ucli.StringFlag{Name: "host", Usage: "only this host's VMs"},
		},
		Action: func(c *ucli.Context) error {
			nc, err := connect(c)
			if err != nil {
				return err
			}
			defer nc.Close()
			rep, err := brokerClient(c, nc).VMs(c.Context, &wire.VMsRequest{Owner: c.String("owner"), Host: c.String("host")})
			if err != nil {
				return err
			}
			return output(c, rep, func(w io.Writer) error {
				t := newTable(w, "HOST", "VM", "OWNER", "PLAN", "RATE", "SHARE", "UTIL", "CHARGED", "ENDS")
				for _, v := range rep.VMs {
					plan := v.Plan
					if plan == "" {
						plan = "-"
					}
					util := pct(v.Util)
					if v.Idle {
						util += " idle"
					}
					t.row(v.Host, v.VM, v.Owner, plan, perHour(v.Rate), pct(v.Share), util, v.Charged.String(), stamp(v.Ends))
				}
				return t.flush()
			})
		},
	}
}

func ledgerCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "ledger",
		Usage:     "show every account and check the ledger invariant",
		UsageText: "mrmarket ledger",
		Flags:     []ucli.Flag{flagNATS(), flagCreds(), flagJSON()},
		Action: func(c *ucli.Context) error {
			nc, err := connect(c)
			if err != nil {
				return err
			}
			defer nc.Close()
			rep, err := bankClient(c, nc).Ledger(c.Context)
			if err != nil {
				return err
			}
			if err := output(c, rep, func(w io.Writer) error {
				t := newTable(w, "ACCOUNT", "KIND", "BALANCE")
				for _, a := range rep.Accounts {
					t.row(a.ID, a.Kind, a.Balance.String())
				}
				if err := t.flush(); err != nil {
					return err
				}
				return printInvariant(w, rep)
			}); err != nil {
				return err
			}
			if len(rep.Violations) > 0 {
				return wire.Errorf(wire.ErrInternal, "ledger invariant violated: %s", strings.Join(rep.Violations, "; "))
			}
			return nil
		},
	}
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
