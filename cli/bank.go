package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/daemon"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/stop"
	"github.com/mrmarket/mrmarket/internal/wire"

	"github.com/prometheus/client_golang/prometheus"
)

// bankServeCommand is `mrmarket bank serve`: the bank daemon.
func bankServeCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "serve",
		Usage: "run the bank daemon on a store (SQLite file or PostgreSQL/CockroachDB)",
		UsageText: "mrmarket bank serve --store sqlite:/var/lib/mrmarket/bank.db --nats nats://nats-1:4222 --creds /etc/mrmarket/creds\n" +
			"   mrmarket bank serve --store postgres://mrmarket@db:5432/bank --nats …   (run several: they share the load)\n" +
			"   mrmarket bank serve --init --store postgres://mrmarket@db:5432/bank --creds ./creds   (the bootstrap: no NATS yet)",
		Flags: []ucli.Flag{flagNATS(), flagCreds(), flagTLSCA(), flagAdminKey(),
			&ucli.StringFlag{Name: "store", Usage: "sqlite:PATH or postgres://…", Value: "sqlite:.data/bank.db", EnvVars: []string{"MRM_BANK_STORE"}},
			&ucli.StringFlag{Name: "http", Usage: "address for /metrics, /healthz and /readyz (empty: none)", Value: "127.0.0.1:9465"},
			&ucli.DurationFlag{Name: "tick", Usage: "how often to expire holds and pay income", Value: 5 * time.Second},
			&ucli.BoolFlag{Name: "init", Usage: "make the store (its migrations) and register the admin and the bank's key in it, then exit: " +
				"the bootstrap, before any NATS node runs"},
		},
		Action: func(c *ucli.Context) error {
			if c.Duration("tick") < tickMin || c.Duration("tick") > tickMax {
				return badInput("--tick must be between %s and %s", tickMin, tickMax)
			}
			keys := signing.CredsDir(c.String("creds"))
			anchor, admin, err := bankAnchor(c, keys)
			if err != nil {
				return err
			}
			self, err := keys.Ensure(wire.RoleBank, "bank")
			if err != nil {
				return err
			}
			s := stop.New()
			defer s.Stop()
			reg := prometheus.NewRegistry()
			env := daemonEnv(c, s, anchor, reg)
			b, err := daemon.OpenBank(daemon.BankConfig{Env: env, Store: c.String("store"), Signer: self, Tick: c.Duration("tick")})
			if err != nil {
				return wire.Errorf(wire.ErrUnavailable, "%v", err)
			}
			if err := registerBank(c, b.Bank, anchor, admin, self, env.Logger); err != nil {
				return err
			}
			if c.Bool("init") {
				_, err := fmt.Fprintf(c.App.Writer, "mrmarket bank: store %s ready: the admin %s and the bank %s registered\n", b.Store(), anchor, self.Public())
				return err
			}
			if err := b.Serve(c.Context, bankConnSigner(c.Context, b.Bank, keys, admin)); err != nil {
				return err
			}
			if addr := c.String("http"); addr != "" {
				srv, err := serveHTTP(s, addr, reg, map[string]obs.HealthFunc{"store": b.Healthy}, b.Ready())
				if err != nil {
					return err
				}
				addr := srv.Addr().String()
				env.Logger.Info("mrmarket bank: metrics, health and readiness", "metrics", "http://"+addr+"/metrics", "health", "http://"+addr+"/healthz",
					"ready", "http://"+addr+"/readyz")
			}
			env.Logger.Info("mrmarket bank serving", "store", b.Store(), "nats", c.String("nats"), "admin_key", anchor)
			if err := b.Run(c.Context); err != nil {
				return err
			}
			<-c.Context.Done()
			env.Logger.Info("mrmarket bank: stopping")
			return nil
		},
	}
}

// bankAnchor is the bank daemon's trust anchor: --admin-key when given
// (the admin's seed may then live elsewhere), else the admin credentials in
// keys, created on first start with their admin.pub. admin is the admin's
// signer when keys hold it (nil otherwise).
func bankAnchor(c *ucli.Context, keys signing.CredsDir) (string, *signing.Signer, error) {
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
func registerBank(c *ucli.Context, b *bank.Bank, anchor string, admin, self *signing.Signer, log *slog.Logger) error {
	if _, err := b.AddPrincipal(c.Context, &wire.PrincipalRequest{Key: anchor, Name: "admin", Role: wire.RoleAdmin}); err != nil {
		return err
	}
	if admin == nil {
		if p, err := b.Whois(c.Context, self.Public()); err != nil || p.Role != wire.RoleBank || p.Cert == nil {
			log.Warn("mrmarket bank: its key is not registered: agents will not believe its answers "+
				"until the admin runs `mrmarket bank principal add --name bank --role bank` with this key", "key", self.Public())
		}
		return nil
	}
	_, err := b.AddPrincipal(c.Context, &wire.PrincipalRequest{Key: self.Public(), Name: "bank", Role: wire.RoleBank,
		Cert: signing.SealPrincipal(admin, self.Public(), "bank", wire.RoleBank)})
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
			Description: "The first period is paid at once (at the bank's next tick), then one every period.",
			Flags: marketFlags(
				&ucli.BoolFlag{Name: "fair", Usage: "split --amount evenly among all users each period"},
				&ucli.StringFlag{Name: "amount", Usage: "credits per period (0 removes the schedule)"},
				&ucli.DurationFlag{Name: "every", Usage: "period", Value: 24 * time.Hour},
			),
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
				return call(c, onBank(bank.Client.SetIncome), req, func(w *out, rep wire.IncomeSetReply) error {
					return printIncome(w, rep, req, time.Now())
				})
			},
		}},
	}
}

// printIncome lists the schedules: periods paid so far and when the next
// one is paid; then says what the change does.
func printIncome(w *out, rep wire.IncomeSetReply, req *wire.IncomeSetRequest, now time.Time) error {
	t := w.table("USER", "AMOUNT", "EVERY", "PERIODS PAID", "NEXT PAYMENT")
	var set *wire.IncomeSchedule
	for i, s := range rep.Schedules {
		t.row(s.User, s.Amount.String(), span(s.Every.D()), fmt.Sprint(max(s.LastPeriod+1, 0)), nextIncome(s, now))
		if s.User == req.User {
			set = &rep.Schedules[i]
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	who := req.User
	if who == wire.FairShareUser {
		who = "every user (an even split)"
	}
	var err error
	switch {
	case set == nil:
		err = w.note("no more income for %s\n", who)
	case !nextPayment(*set).After(now):
		err = w.note("income for %s: %s every %s; the first period is paid at once (at the bank's next tick), the next at %s\n",
			who, set.Amount, span(set.Every.D()), stamp(nextPayment(*set).Add(set.Every.D())))
	default:
		err = w.note("income for %s: %s every %s; the next is paid at %s\n", who, set.Amount, span(set.Every.D()), stamp(nextPayment(*set)))
	}
	return err
}

// nextPayment is when a schedule's next period begins: it is paid then.
func nextPayment(s wire.IncomeSchedule) time.Time {
	return s.Anchor.Add(time.Duration(s.LastPeriod+1) * s.Every.D())
}

// nextIncome is nextPayment for people: "now" when it is due.
func nextIncome(s wire.IncomeSchedule, now time.Time) string {
	if next := nextPayment(s); next.After(now) {
		return stamp(next)
	}
	return "now"
}

func principalCommand() *ucli.Command {
	who := func(own ...ucli.Flag) []ucli.Flag {
		return adminFlags(append([]ucli.Flag{
			&ucli.StringFlag{Name: "name", Usage: "user name, host id (agent), or admin/broker/bank"},
			&ucli.StringFlag{Name: "role", Usage: "user, agent, broker, bank or admin", Value: wire.RoleUser},
		}, own...)...)
	}
	return &ucli.Command{
		Name:  "principal",
		Usage: "identities that sign requests: add, list, revoke, rotate (admin)",
		Description: "A principal is a name and role with one live NKey, registered by a record the admin's key seals.\n" +
			"A second key for a name that has one is refused: rotate it (its accounts, holds and plans stay:\n" +
			"they are by name), or revoke it first. A revoked key is refused everywhere at once and for good.",
		Subcommands: []*ucli.Command{{
			Name:      "add",
			Usage:     "create (if missing) the credentials of a principal in --creds and register its key with a record sealed by the admin's",
			UsageText: "mrmarket bank principal add --name carol --role user",
			Flags:     who(),
			Action:    addPrincipal,
		}, {
			Name:      "list",
			Usage:     "every key of the registry: role, name, key, when registered and when revoked (and by which key replaced)",
			UsageText: "mrmarket bank principal list\n   mrmarket bank principal list --role agent --live --json",
			Flags: adminFlags(
				&ucli.StringFlag{Name: "name", Usage: "only this name"},
				&ucli.StringFlag{Name: "role", Usage: "only this role"},
				&ucli.BoolFlag{Name: "live", Usage: "leave out the revoked keys"},
			),
			Action: listPrincipals,
		}, {
			Name:  "revoke",
			Usage: "revoke a principal's key: refused everywhere at once, its connections closed; a user's open holds are released, an agent's host retired",
			UsageText: "mrmarket bank principal revoke --name alice\n" +
				"   mrmarket bank principal revoke --name host-3 --role agent",
			Description: "Revokes the principal's live key (or --key: one of its keys). A revoked key is never registered\n" +
				"again; the name is free for a new key (bank principal add). The credentials file in --creds that\n" +
				"holds the revoked key is renamed <file>.revoked. The admin key (the trust anchor) is not revoked.",
			Flags:  who(&ucli.StringFlag{Name: "key", Usage: "the key to revoke (default: the principal's live key)"}),
			Action: revokePrincipal,
		}, {
			Name:  "rotate",
			Usage: "give a principal a new key: registered, then the old one revoked, in one step; accounts, holds and plans stay",
			UsageText: "mrmarket bank principal rotate --name alice\n" +
				"   mrmarket bank principal rotate --name host-3 --role agent   (then install creds/agents/host-3.nk on host-3 and restart its agent)",
			Description: "Writes the new key to the principal's credentials file in --creds (agents/<host>.nk, users/<name>.nk,\n" +
				"broker.nk, bank.nk), in place of the old one, only once the bank has registered it. From then on\n" +
				"the old key is refused and its connections closed: install the new file where the principal runs\n" +
				"and restart it.",
			Flags:  who(),
			Action: rotatePrincipal,
		}},
	}
}

// principalFlags are --name and --role, checked.
func principalFlags(c *ucli.Context) (name, role string, err error) {
	name, role = c.String("name"), c.String("role")
	if err := wire.CheckName("--name", name); err != nil {
		return "", "", usageError{err}
	}
	if err := wire.CheckRole(role); err != nil {
		return "", "", usageError{err}
	}
	return name, role, nil
}

// addPrincipal is `bank principal add`: the principal's existing key, or a
// new one that is written to --creds only once the bank has registered it
// (a refused registration leaves no key behind). A name that has another
// live key is refused by the bank (rotate it instead).
func addPrincipal(c *ucli.Context) error {
	req := &wire.PrincipalRequest{Name: c.String("name"), Role: c.String("role")}
	if err := wire.CheckName("--name", req.Name); err != nil {
		return usageError{err}
	}
	keys := credsDir(c)
	s, err := keys.Signer(req.Role, req.Name)
	fresh := errors.Is(err, wire.ErrForbidden) // no credentials yet
	if fresh {
		s, err = signing.NewUserSigner()
	}
	if err != nil {
		return err
	}
	req.Key = s.Public()
	if err := req.Validate(); err != nil {
		return usageError{err}
	}
	// The record the bank keeps and gives out: sealed by the admin, the
	// trust anchor every agent and broker checks.
	admin, err := keys.Signer(wire.RoleAdmin, "admin")
	if err != nil {
		return err
	}
	req.Cert = signing.SealPrincipal(admin, req.Key, req.Name, req.Role)
	register := func(ctx context.Context, cl clients, req *wire.PrincipalRequest) (wire.Principal, error) {
		p, err := cl.bank.AddPrincipal(ctx, req)
		if err == nil && fresh {
			if err = signing.SaveSigner(keys.Path(req.Role, req.Name), s); err != nil {
				err = fmt.Errorf("%s %s is registered with key %s, but its credentials could not be written: %w", req.Role, req.Name, req.Key, err)
			}
		}
		return p, err
	}
	return call(c, register, req, func(w *out, p wire.Principal) error {
		_, err := fmt.Fprintf(w, "%s %s registered: key %s, credentials %s\n", p.Role, p.Name, p.Key, keys.Path(p.Role, p.Name))
		return err
	})
}

// listPrincipals is `bank principal list`.
func listPrincipals(c *ucli.Context) error {
	req := &wire.PrincipalsRequest{Name: c.String("name"), Role: c.String("role"), Live: c.Bool("live")}
	return call(c, onBank(bank.Client.ListPrincipals), req, func(w *out, rep wire.PrincipalsReply) error {
		t := w.table("ROLE", "NAME", "KEY", "REGISTERED", "REVOKED", "REPLACED BY")
		for _, p := range rep.Principals {
			revoked, by := "-", "-"
			if p.Revoked != nil {
				revoked = stamp(*p.Revoked)
			}
			if p.ReplacedBy != "" {
				by = p.ReplacedBy
			}
			t.row(p.Role, p.Name, p.Key, stamp(p.Registered), revoked, by)
		}
		return t.flush()
	})
}

// liveKey is the live key of principal (role, name) in the registry.
func liveKey(ctx context.Context, cl clients, role, name string) (string, error) {
	rep, err := cl.bank.ListPrincipals(ctx, &wire.PrincipalsRequest{Role: role, Name: name, Live: true})
	if err != nil {
		return "", err
	}
	if len(rep.Principals) != 1 {
		return "", wire.Errorf(wire.ErrNotFound, "%s %s has %d live keys in the registry (pass --key)", role, name, len(rep.Principals))
	}
	return rep.Principals[0].Key, nil
}

// revokePrincipal is `bank principal revoke`: the admin seals the
// revocation of the principal's live key (or --key), the bank applies it,
// and a credentials file in --creds holding that key is set aside.
func revokePrincipal(c *ucli.Context) error {
	name, role, err := principalFlags(c)
	if err != nil {
		return err
	}
	if k := c.String("key"); k != "" {
		if err := wire.CheckPublicKey(k); err != nil {
			return usageError{err}
		}
	}
	keys := credsDir(c)
	admin, err := keys.Signer(wire.RoleAdmin, "admin")
	if err != nil {
		return err
	}
	key := c.String("key") // the live key, once found: a try asked again revokes the same one
	revoke := func(ctx context.Context, cl clients, _ string) (wire.RevokeReply, error) {
		if key == "" {
			var err error
			if key, err = liveKey(ctx, cl, role, name); err != nil {
				return wire.RevokeReply{}, err
			}
		}
		rep, err := cl.bank.RevokePrincipal(ctx, &wire.RevokeRequest{Key: key, Name: name, Role: role, Cert: signing.SealRevocation(admin, key, name, role)})
		if err == nil {
			err = setAside(keys.Path(role, name), key)
		}
		return rep, err
	}
	return call(c, revoke, c.String("key"), func(w *out, rep wire.RevokeReply) error {
		p := rep.Principal
		fmt.Fprintf(w, "%s %s: key %s revoked\n", p.Role, p.Name, p.Key)
		switch {
		case len(rep.Released) > 0:
			fmt.Fprintf(w, "  released %d open hold(s), %s, to %s's account: %s\n", len(rep.Released), rep.ReleasedAmount, p.Name, strings.Join(rep.Released, ", "))
		case p.Role == wire.RoleAgent:
			fmt.Fprintf(w, "  host %s is retired: no bid goes there any more\n", p.Name)
		}
		return nil
	})
}

// setAside renames the credentials file at path to <path>.revoked when it
// holds key: a revoked key is never used again, and `principal add` then
// makes a new one.
func setAside(path, key string) error {
	s, err := signing.LoadSigner(path)
	if err != nil || s.Public() != key {
		return nil // not there, or another key: nothing of the revoked one here
	}
	if err := os.Rename(path, path+".revoked"); err != nil {
		return fmt.Errorf("key %s is revoked, but its credentials file could not be set aside: %w", key, err)
	}
	return nil
}

// rotatePrincipal is `bank principal rotate`: a new key for the principal,
// registered with the admin's record while its live key is revoked, in
// one request; the new key replaces the old in --creds only once the bank
// has done both. The new seed waits in <file>.new meanwhile: the rotation
// of a daemon's key (the bank's own) may close the connection its answer
// would come on, and a key the bank registered must not be lost with the
// answer. An unanswered request is asked again (the bank answers a done
// rotation as done: call asks again); a refused one removes the pending
// seed.
func rotatePrincipal(c *ucli.Context) error {
	name, role, err := principalFlags(c)
	if err != nil {
		return err
	}
	keys := credsDir(c)
	admin, err := keys.Signer(wire.RoleAdmin, "admin")
	if err != nil {
		return err
	}
	fresh, err := signing.NewUserSigner()
	if err != nil {
		return err
	}
	path := keys.Path(role, name)
	var req *wire.RotateRequest // the same request on every try
	rotate := func(ctx context.Context, cl clients, _ string) (wire.RotateReply, error) {
		if req == nil {
			old, err := liveKey(ctx, cl, role, name)
			if err != nil {
				return wire.RotateReply{}, err
			}
			if err := signing.SaveSigner(path+".new", fresh); err != nil {
				return wire.RotateReply{}, fmt.Errorf("keeping the new key before registering it: %w", err)
			}
			req = &wire.RotateRequest{Name: name, Role: role, Old: old, OldCert: signing.SealRevocation(admin, old, name, role),
				Key: fresh.Public(), Cert: signing.SealPrincipal(admin, fresh.Public(), name, role)}
		}
		return cl.bank.RotatePrincipal(ctx, req)
	}
	done := func(ctx context.Context, cl clients, x string) (wire.RotateReply, error) {
		rep, err := rotate(ctx, cl, x)
		switch {
		case err == nil:
			if err = os.Rename(path+".new", path); err != nil {
				err = fmt.Errorf("%s %s has the new key %s (in %s.new), but it could not replace %s: %w", role, name, fresh.Public(), path, path, err)
			}
		case req != nil && errors.Is(err, wire.ErrUnavailable):
			err = fmt.Errorf("%w (the bank may have registered the new key %s: if `bank principal list` shows it, install %s.new as %s)",
				err, fresh.Public(), path, path)
		case req != nil:
			_ = os.Remove(path + ".new") // refused: the key is nobody's
		}
		return rep, err
	}
	return call(c, done, "", func(w *out, rep wire.RotateReply) error {
		_, err := fmt.Fprintf(w, "%s %s: new key %s, credentials %s; key %s revoked\n", rep.New.Role, rep.New.Name, rep.New.Key,
			keys.Path(rep.New.Role, rep.New.Name), rep.Old.Key)
		return err
	})
}

func transferCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "transfer",
		Usage:     "give some of your credits to another user",
		UsageText: "mrmarket transfer --user alice --to bob --amount 5",
		Flags: marketFlags(
			&ucli.StringFlag{Name: "to", Usage: "the receiving user"},
			&ucli.StringFlag{Name: "amount", Usage: "credits"},
			&ucli.StringFlag{Name: "id", Usage: "idempotency id (default: a new id)"},
			&ucli.StringFlag{Name: "memo", Usage: "note kept with the transfer"},
		),
		Action: func(c *ucli.Context) error {
			from, amount, err := userAndAmount(c)
			if err != nil {
				return err
			}
			req := &wire.TransferRequest{ID: idOrNew(c, "transfer"), From: from, To: c.String("to"), Amount: amount, Memo: c.String("memo")}
			return call(c, onBank(bank.Client.Transfer), req, func(w *out, rep wire.TransferReply) error {
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
		Flags: marketFlags(
			&ucli.StringFlag{Name: "account", Usage: "any account id instead of a user (provider:<host>, escrow, mint)"},
			&ucli.IntFlag{Name: "limit", Usage: "entries, newest first", Value: wire.DefaultStatement},
		),
		Action: func(c *ucli.Context) error {
			if l := c.Int("limit"); l < 1 || l > wire.MaxStatement {
				return badInput("--limit must be 1 to %d (default %d), got %d", wire.MaxStatement, wire.DefaultStatement, l)
			}
			req := &wire.StatementRequest{Account: c.String("account"), Limit: c.Int("limit")}
			if req.Account == "" {
				req.User = setting(c, "user")
			}
			return call(c, onBank(bank.Client.Statement), req, printStatement)
		},
	}
}

func printStatement(w *out, rep wire.StatementReply) error {
	if err := w.note("%s: balance %s\n", rep.Account, rep.Balance); err != nil {
		return err
	}
	t := w.table("AT", "KIND", "AMOUNT", "COUNTERPARTY", "TRANSFER", "MEMO")
	for _, e := range rep.Entries {
		amt := e.Amount.String()
		if e.Amount > 0 {
			amt = "+" + amt
		}
		t.row(stamp(e.At), e.Kind, amt, e.Counterparty, e.Transfer, strings.TrimSpace(e.Memo))
	}
	return t.flush()
}
