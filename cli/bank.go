package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/wire"

	"github.com/prometheus/client_golang/prometheus"
)

// bankServeCommand is `mrmarket bank serve`: the bank daemon.
func bankServeCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "serve",
		Usage: "run the bank daemon on a store (SQLite file or PostgreSQL/CockroachDB)",
		UsageText: "mrmarket bank serve --store sqlite:/var/lib/mrmarket/bank.db --nats nats://nats-1:4222 --creds /etc/mrmarket/creds\n" +
			"   mrmarket bank serve --store postgres://mrmarket@db:5432/bank --nats …   (run several: they share the load)",
		Flags: []ucli.Flag{flagNATS(), flagCreds(), flagTLSCA(), flagAdminKey(),
			&ucli.StringFlag{Name: "store", Usage: "sqlite:PATH or postgres://…", Value: "sqlite:.data/bank.db", EnvVars: []string{"MRM_BANK_STORE"}},
			&ucli.StringFlag{Name: "http", Usage: "address for /metrics and /healthz (empty: none)", Value: "127.0.0.1:9465"},
			&ucli.DurationFlag{Name: "tick", Usage: "how often to expire holds and pay income", Value: 5 * time.Second},
		},
		Action: func(c *ucli.Context) error {
			if c.Duration("tick") < tickMin || c.Duration("tick") > tickMax {
				return badInput("--tick must be between %s and %s", tickMin, tickMax)
			}
			reg := prometheus.NewRegistry()
			metrics := obs.NewMetrics(reg)
			keys := wire.CredsDir(c.String("creds"))
			anchor, admin, err := bankAnchor(c, keys)
			if err != nil {
				return err
			}
			self, err := keys.Ensure(wire.RoleBank, "bank")
			if err != nil {
				return err
			}
			b, err := bank.Open(c.String("store"), bank.Options{Metrics: metrics, AdminKey: anchor, Signer: self})
			if err != nil {
				return wire.Errorf(wire.ErrUnavailable, "%v", err)
			}
			defer b.Close()
			if err := registerBank(c, b, anchor, admin, self); err != nil {
				return err
			}
			nc, err := connectDaemon(c, "mrmarket-bank", bankConnSigner(c.Context, b, keys, admin))
			if err != nil {
				return err
			}
			defer nc.Close()
			if _, err := natsutil.EnsureBankAssets(c.Context, nc); err != nil {
				return wire.Errorf(wire.ErrUnavailable, "%v", err)
			}
			stop, err := bank.Serve(nc, b)
			if err != nil {
				return err
			}
			defer stop()
			if addr := c.String("http"); addr != "" {
				srv, err := obs.Serve(addr, reg, map[string]obs.HealthFunc{"store": b.Healthy})
				if err != nil {
					return err
				}
				defer srv.Close()
				fmt.Fprintf(c.App.Writer, "  metrics  http://%s/metrics   health  http://%s/healthz\n", srv.Addr(), srv.Addr())
			}
			fmt.Fprintf(c.App.Writer, "mrmarket bank serving %s on %s (admin key %s)\n", b.Store(), c.String("nats"), anchor)
			t := time.NewTicker(c.Duration("tick"))
			defer t.Stop()
			for {
				select {
				case <-c.Context.Done():
					fmt.Fprintln(c.App.Writer, "mrmarket bank: stopping")
					return nil
				case now := <-t.C:
					if _, err := b.Tick(c.Context, now); err != nil {
						metrics.Error("bank", "tick")
					}
				}
			}
		},
	}
}

// bankAnchor is the bank daemon's trust anchor: --admin-key when given
// (the admin's seed may then live elsewhere), else the admin credentials in
// keys, created on first start with their admin.pub. admin is the admin's
// signer when keys hold it (nil otherwise).
func bankAnchor(c *ucli.Context, keys wire.CredsDir) (string, *wire.Signer, error) {
	if c.String("admin-key") != "" {
		anchor, err := adminKey(c)
		if err != nil {
			return "", nil, err
		}
		admin, err := keys.Signer(wire.RoleAdmin, "admin")
		if err != nil || admin.Public() != anchor {
			admin = nil
		}
		return anchor, admin, nil
	}
	admin, err := keys.Ensure(wire.RoleAdmin, "admin")
	if err != nil {
		return "", nil, err
	}
	if err := keys.WriteAdminKey(admin); err != nil {
		return "", nil, err
	}
	return admin.Public(), admin, nil
}

// registerBank registers the anchor as the admin and, when the admin's
// seed is at hand, the bank's own key with a fresh record, so its signed
// replies are believed; else it says how to register it.
func registerBank(c *ucli.Context, b *bank.Bank, anchor string, admin, self *wire.Signer) error {
	if _, err := b.AddPrincipal(c.Context, &wire.PrincipalRequest{Key: anchor, Name: "admin", Role: wire.RoleAdmin}); err != nil {
		return err
	}
	if admin == nil {
		if p, err := b.Whois(c.Context, self.Public()); err != nil || p.Role != wire.RoleBank || p.Cert == nil {
			fmt.Fprintf(c.App.ErrWriter, "mrmarket bank: its key %s is not registered: agents will not believe its answers until the admin runs `mrmarket bank principal add --name bank --role bank` with this key\n", self.Public())
		}
		return nil
	}
	_, err := b.AddPrincipal(c.Context, &wire.PrincipalRequest{Key: self.Public(), Name: "bank", Role: wire.RoleBank,
		Cert: wire.SealPrincipal(admin, self.Public(), "bank", wire.RoleBank)})
	return err
}

func incomeCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "income",
		Usage: "budgets granted on a schedule, once per period",
		Subcommands: []*ucli.Command{{
			Name:  "set",
			Usage: "set a user's income (or --fair: split an amount among all users) every period; --amount 0 removes it",
			UsageText: "mrmarket bank income set --user alice --amount 100 --every 24h\n" +
				"   mrmarket bank income set --fair --amount 1000 --every 24h",
			Flags: []ucli.Flag{flagNATS(), flagCreds(), flagJSON(), flagUser(),
				&ucli.BoolFlag{Name: "fair", Usage: "split --amount evenly among all users each period"},
				&ucli.StringFlag{Name: "amount", Usage: "credits per period (0 removes the schedule)"},
				&ucli.DurationFlag{Name: "every", Usage: "period", Value: 24 * time.Hour},
			},
			Action: func(c *ucli.Context) error {
				user := wire.FairShareUser
				if !c.Bool("fair") {
					var err error
					if user, err = requireUser(c); err != nil {
						return err
					}
				}
				var amount money.Micro
				if c.String("amount") != "0" {
					var err error
					if amount, err = parseAmount("amount", c.String("amount")); err != nil {
						return err
					}
				}
				req := &wire.IncomeSetRequest{User: user, Amount: amount, Every: wire.Duration(c.Duration("every"))}
				return call(c, func(ctx context.Context, cl clients) (wire.IncomeSetReply, error) { return cl.bank.SetIncome(ctx, req) },
					func(w io.Writer, rep wire.IncomeSetReply) error {
						// Period k runs from Anchor + k·Every; the bank pays
						// each at its start, so period 0 is paid at once
						// (its next tick) and LastPeriod -1 means none yet.
						t := newTable(w, "USER", "AMOUNT", "EVERY", "SINCE", "PERIODS PAID", "NEXT PAYMENT")
						for _, s := range rep.Schedules {
							next := s.Anchor.Add(time.Duration(s.LastPeriod+1) * s.Every.D())
							t.row(s.User, s.Amount.String(), humanDuration(s.Every.D()), stamp(s.Anchor), fmt.Sprint(s.LastPeriod+1), stamp(next))
						}
						if err := t.flush(); err != nil {
							return err
						}
						if amount > 0 {
							_, err := fmt.Fprintf(w, "the first period is paid at once (the bank's next tick), then one every %s\n", humanDuration(req.Every.D()))
							return err
						}
						return nil
					})
			},
		}},
	}
}

func principalCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "principal",
		Usage: "identities that sign requests",
		Subcommands: []*ucli.Command{{
			Name:      "add",
			Usage:     "create (if missing) the credentials of a principal in --creds and register its key with a record sealed by the admin's (admin)",
			UsageText: "mrmarket bank principal add --name carol --role user",
			Flags: []ucli.Flag{flagNATS(), flagCreds(), flagJSON(),
				&ucli.StringFlag{Name: "name", Usage: "user name, host id (agent), or admin/broker"},
				&ucli.StringFlag{Name: "role", Usage: "user, agent, broker, bank or admin", Value: wire.RoleUser},
			},
			Action: func(c *ucli.Context) error {
				req := &wire.PrincipalRequest{Name: c.String("name"), Role: c.String("role")}
				if err := wire.CheckName("--name", req.Name); err != nil {
					return usageError{err}
				}
				keys := wire.CredsDir(c.String("creds"))
				_, statErr := os.Stat(keys.Path(req.Role, req.Name))
				s, err := keys.Ensure(req.Role, req.Name)
				if err != nil {
					return err
				}
				// A key made here for a principal the bank then refuses is
				// removed: no credentials of a principal that does not exist.
				created := errors.Is(statErr, fs.ErrNotExist)
				defer func() {
					if created && err != nil {
						_ = os.Remove(keys.Path(req.Role, req.Name))
					}
				}()
				req.Key = s.Public()
				if err = req.Validate(); err != nil {
					return usageError{err}
				}
				// The record the bank keeps and gives out: sealed by the
				// admin, the trust anchor every agent and broker checks.
				admin, err := keys.Signer(wire.RoleAdmin, "admin")
				if err != nil {
					return err
				}
				req.Cert = wire.SealPrincipal(admin, req.Key, req.Name, req.Role)
				err = call(c, func(ctx context.Context, cl clients) (wire.Principal, error) { return cl.bank.AddPrincipal(ctx, req) },
					func(w io.Writer, p wire.Principal) error {
						_, err := fmt.Fprintf(w, "%s %s registered: key %s, credentials %s\n", p.Role, p.Name, p.Key, keys.Path(p.Role, p.Name))
						return err
					})
				return err
			},
		}},
	}
}

func transferCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "transfer",
		Usage:     "give some of your credits to another user",
		UsageText: "mrmarket transfer --user alice --to bob --amount 5",
		Flags: []ucli.Flag{flagNATS(), flagCreds(), flagJSON(), flagUser(),
			&ucli.StringFlag{Name: "to", Usage: "the receiving user"},
			&ucli.StringFlag{Name: "amount", Usage: "credits"},
			&ucli.StringFlag{Name: "id", Usage: "idempotency id (default: a new id)"},
			&ucli.StringFlag{Name: "memo", Usage: "note kept with the transfer"},
		},
		Action: func(c *ucli.Context) error {
			from, err := requireUser(c)
			if err != nil {
				return err
			}
			amount, err := parseAmount("amount", c.String("amount"))
			if err != nil {
				return err
			}
			req := &wire.TransferRequest{ID: idOrNew(c, "transfer"), From: from, To: c.String("to"), Amount: amount, Memo: c.String("memo")}
			if err := req.Validate(); err != nil {
				return usageError{err}
			}
			return callRetry(c, func(ctx context.Context, cl clients) (wire.TransferReply, error) { return cl.bank.Transfer(ctx, req) },
				func(w io.Writer, rep wire.TransferReply) error {
					_, err := fmt.Fprintf(w, "moved %s from %s to %s; %s's balance %s (transfer %s)\n", amount, from, req.To, from, rep.Balance, rep.Transfer)
					return err
				})
		},
	}
}

func statementCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "statement",
		Usage:     "an account's transfers, newest first",
		UsageText: "mrmarket statement --user alice\n   mrmarket statement --account provider:host-1 --limit 20",
		Flags: []ucli.Flag{flagNATS(), flagCreds(), flagJSON(), flagUser(),
			&ucli.StringFlag{Name: "account", Usage: "any account id instead of a user (provider:<host>, escrow, mint)"},
			&ucli.IntFlag{Name: "limit", Usage: "entries", Value: 50},
		},
		Action: func(c *ucli.Context) error {
			req := &wire.StatementRequest{User: c.String("user"), Account: c.String("account"), Limit: c.Int("limit")}
			if err := req.Validate(); err != nil {
				return usageError{err}
			}
			return call(c, func(ctx context.Context, cl clients) (wire.StatementReply, error) { return cl.bank.Statement(ctx, req) }, printStatement)
		},
	}
}

func printStatement(w io.Writer, rep wire.StatementReply) error {
	fmt.Fprintf(w, "%s: balance %s\n", rep.Account, rep.Balance)
	t := newTable(w, "AT", "KIND", "AMOUNT", "COUNTERPARTY", "TRANSFER", "MEMO")
	for _, e := range rep.Entries {
		amt := e.Amount.String()
		if e.Amount > 0 {
			amt = "+" + amt
		}
		t.row(stamp(e.At), e.Kind, amt, e.Counterparty, e.Transfer, strings.TrimSpace(e.Memo))
	}
	return t.flush()
}
