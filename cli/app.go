// Package cli is the mrmarket command tree (urfave/cli/v2). It parses flags,
// calls the market's components over NATS, and prints tables for people or
// JSON (--json) for machines. It holds no business logic: every rule lives in
// agent, bank, broker and strategies.
//
// Exit codes mean something:
//
//	0  success
//	1  internal error
//	2  bad input (flags, amounts, ids) — nothing was changed
//	3  refused by the market (unknown user or VM, not yours, not enough money, conflict, expired)
//	4  the market is unreachable (nothing answers on NATS)
//
// Connection and identity come from flags or the environment: MRM_NATS_URL
// (default nats://127.0.0.1:4222), MRM_USER, MRM_CREDS, the credentials
// directory whose NKeys authenticate the connection and sign every request
// (default .data/creds, where `mrmarket up --data .data` writes them) —
// reads too, as the user (--user) or else as the admin — and MRM_TLS_CA, the
// CA that verifies the NATS server (default: the tls/ca.pem next to the
// credentials directory). See conn.go for which principal a command
// connects as.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Exit codes.
const (
	ExitOK          = 0
	ExitInternal    = 1
	ExitBadInput    = 2
	ExitRefused     = 3
	ExitUnavailable = 4
)

// DefaultNATSURL is where a local `mrmarket up` listens.
const DefaultNATSURL = "nats://127.0.0.1:4222"

// Flags shared by many commands. They are made afresh for every App:
// urfave/cli writes into a flag when it parses, so two command lines running
// at once (a daemon and a client in one test process) must not share them.
func flagJSON() *ucli.BoolFlag {
	return &ucli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"}
}

func flagNATS() *ucli.StringFlag {
	return &ucli.StringFlag{Name: "nats", Usage: "NATS URL of the market", Value: DefaultNATSURL, EnvVars: []string{"MRM_NATS_URL"}}
}

func flagUser() *ucli.StringFlag {
	return &ucli.StringFlag{Name: "user", Usage: "the user acting", EnvVars: []string{"MRM_USER"}}
}

func flagCreds() *ucli.StringFlag {
	return &ucli.StringFlag{Name: "creds", Usage: "credentials directory (admin.nk, users/<name>.nk) that signs requests", Value: DefaultCreds, EnvVars: []string{"MRM_CREDS"}}
}

// DefaultCreds is where `mrmarket up --data .data` writes the credentials.
const DefaultCreds = ".data/creds"

// natsHealth reports a NATS connection's health.
func natsHealth(nc *nats.Conn) obs.HealthFunc {
	return func() error {
		if !nc.IsConnected() {
			return fmt.Errorf("NATS connection is %s", nc.Status())
		}
		return nil
	}
}

// App returns the mrmarket command tree writing to stdout and stderr.
func App(stdout, stderr io.Writer) *ucli.App {
	app := &ucli.App{
		Name:  "mrmarket",
		Usage: "a proportional-share market for shared clusters",
		Description: "Users get budgets and spend them as rates on the VMs that host their Hadoop nodes;\n" +
			"every host divides itself among its VMs in proportion to those rates.\n\n" +
			"Start here:  mrmarket demo        (the whole market in one process, simulated time)\n" +
			"             mrmarket up --data ./.data   (a persistent local market)",
		Writer:          stdout,
		ErrWriter:       stderr,
		HideHelpCommand: true,
		Flags:           []ucli.Flag{flagTLSCA()},
		Commands: []*ucli.Command{
			demoCommand(),
			upCommand(),
			agentCommand(),
			brokerCommand(),
			clusterCommand(),
			bankCommand(),
			balanceCommand(),
			transferCommand(),
			statementCommand(),
			spendCommand(),
			quoteCommand(),
			submitCommand(),
			jobsCommand(),
			simCommand(),
			cancelCommand(),
			plansCommand(),
			priceCommand(),
			vmsCommand(),
			ledgerCommand(),
			natsCommand(),
			eventsCommand(),
			versionCommand(),
			completionCommand(),
		},
		EnableBashCompletion: true,                          // `mrmarket completion bash` prints the script
		ExitErrHandler:       func(*ucli.Context, error) {}, // Main maps errors to exit codes
		OnUsageError:         flagError,
	}
	onUsageError(app.Commands)
	return app
}

// flagError reports a flag that does not parse (`--duration 1y`) as one
// clear line and exit code 2, where urfave/cli would print the whole help.
func flagError(c *ucli.Context, err error, _ bool) error {
	return badInput("%v (see `%s --help`)", err, c.Command.HelpName)
}

func onUsageError(cmds []*ucli.Command) {
	for _, cmd := range cmds {
		cmd.OnUsageError = flagError
		onUsageError(cmd.Subcommands)
	}
}

// Main runs the command line and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := App(stdout, stderr).RunContext(ctx, args)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintln(stderr, "mrmarket:", err)
	return ExitCode(err)
}

// usageError marks an error in the command line itself.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func badInput(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// ExitCode maps an error to the documented exit code.
func ExitCode(err error) int {
	var ue usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue), errors.Is(err, wire.ErrBadRequest):
		return ExitBadInput
	case errors.Is(err, wire.ErrUnavailable):
		return ExitUnavailable
	case errors.Is(err, wire.ErrNotFound), errors.Is(err, wire.ErrForbidden), errors.Is(err, wire.ErrConflict),
		errors.Is(err, wire.ErrInsufficient), errors.Is(err, wire.ErrExpired):
		return ExitRefused
	}
	var we *wire.Error
	if errors.As(err, &we) && we.Code == wire.CodeInternal {
		return ExitInternal
	}
	// urfave/cli reports unknown flags and missing arguments as plain errors.
	return ExitBadInput
}

// clients are the market's services as one command reaches them: over one
// connection, signing with the credentials of --creds.
type clients struct {
	bank   bank.Client
	broker broker.Client
}

// call is a command's round trip to the market: it connects to --nats, runs
// do against the bank and broker, prints the reply (JSON with --json,
// otherwise human) and closes the connection. Commands parse and check
// their flags before, so bad input never waits on the network.
func call[Rep any](c *ucli.Context, do func(ctx context.Context, cl clients) (Rep, error), human func(w io.Writer, rep Rep) error) error {
	return withClients(c, func(cl clients) error {
		rep, err := do(c.Context, cl)
		if err != nil {
			return err
		}
		return show(c, rep, human)
	})
}

// withClients runs use on a connection to the market named by --nats, which
// it closes afterwards; for commands that talk more than once (jobs watch).
// A request the NATS server refuses to this principal (a permission
// violation, reported asynchronously) ends the command at once as
// forbidden rather than as a time-out.
func withClients(c *ucli.Context, use func(cl clients) error) error {
	nc, err := connect(c)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithCancelCause(c.Context)
	defer cancel(nil)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			cancel(err)
		}
	})
	outer := c.Context
	c.Context = ctx
	defer func() { c.Context = outer }()
	keys := credsDir(c)
	anchor := clientAdminKey(c) // answers count only signed by the bank or the broker
	err = use(clients{bank: bank.Client{NC: nc, Keys: keys, AdminKey: anchor}, broker: broker.Client{NC: nc, Keys: keys, AdminKey: anchor, Reader: reader(c)}})
	if cause := context.Cause(ctx); err != nil && errors.Is(cause, nats.ErrPermissionViolation) {
		return wire.Errorf(wire.ErrForbidden, "the NATS server refused it to this principal (%s): %v", nc.Opts.Nkey, cause)
	}
	return err
}

// reader is who signs a command's reads that act for no user (prices, VMs,
// everyone's plans): the principal the command connects as (connPrincipal)
// — --user when it is set, else the admin (the zero As), else the one user
// whose credentials are there.
func reader(c *ucli.Context) wire.As {
	if _, as, err := connPrincipal(c, credsDir(c)); err == nil && as.Role == wire.RoleUser {
		return as
	}
	return wire.As{}
}

// requireUser returns --user or a usage error.
func requireUser(c *ucli.Context) (string, error) {
	u := c.String("user")
	if u == "" {
		return "", badInput("--user (or MRM_USER) is required")
	}
	if err := wire.CheckName("user", u); err != nil {
		return "", usageError{err}
	}
	return u, nil
}
