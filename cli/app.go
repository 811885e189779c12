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
// Connection and identity come from flags, the environment or a config file
// (config.go), in that order of precedence, then the defaults: --nats
// (MRM_NATS_URL, default nats://127.0.0.1:4222), --user (MRM_USER), --creds
// (MRM_CREDS), the credentials directory whose NKeys authenticate the
// connection and sign every request (default .data/creds, where `mrmarket
// up --data .data` writes them) — reads too, as the user (--user) or else as
// the admin — and --tls-ca (MRM_TLS_CA), the CA that verifies the NATS
// server (default: the tls/ca.pem next to the credentials directory). The
// config file is --config (MRM_CONFIG), by default
// ~/.config/mrmarket/config: `key = value` lines for nats, user, creds,
// tls-ca and admin-key. See conn.go for which principal a command connects
// as.
//
// Output: tables for people (credits, credits per hour, durations rounded
// to the second; --no-headers drops the header line), or with --json the
// wire messages, whose money fields name their unit (*_micro: micro-credits;
// *_micro_per_s: micro-credits per second). Progress bars are drawn only on
// a terminal. Every command's round trip is one helper, call (call.go).
// `mrmarket version` tells the build; `mrmarket completion bash|zsh|fish`
// prints a shell completion script.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"
	ucli "github.com/urfave/cli/v2"

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
func flagNATS() *ucli.StringFlag {
	return &ucli.StringFlag{Name: "nats", Usage: "NATS URL of the market", Value: DefaultNATSURL, EnvVars: []string{"MRM_NATS_URL"}}
}

func flagUser() *ucli.StringFlag {
	return &ucli.StringFlag{Name: "user", Usage: "the user acting", EnvVars: []string{"MRM_USER"}}
}

func flagCreds() *ucli.StringFlag {
	return &ucli.StringFlag{Name: "creds", Usage: "credentials directory (admin.nk, users/<name>.nk) that signs requests", Value: DefaultCreds, EnvVars: []string{"MRM_CREDS"}}
}

// marketFlags are the flags of a command that talks to the market for a
// user (connection, identity, output), then its own.
func marketFlags(own ...ucli.Flag) []ucli.Flag {
	return append([]ucli.Flag{flagNATS(), flagCreds(), flagUser()}, outputFlags(own...)...)
}

// adminFlags are marketFlags without --user: the command acts as the admin.
func adminFlags(own ...ucli.Flag) []ucli.Flag {
	return append([]ucli.Flag{flagNATS(), flagCreds()}, outputFlags(own...)...)
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
			"             mrmarket up --data ./.data   (a persistent local market)\n\n" +
			"Connection and identity: flags, else the environment (MRM_NATS_URL, MRM_USER, MRM_CREDS,\n" +
			"MRM_TLS_CA, MRM_ADMIN_KEY), else the config file, else the defaults. The config file is\n" +
			"--config (MRM_CONFIG), by default ~/.config/mrmarket/config, with lines such as\n" +
			"   nats = tls://market.example.org:4222\n" +
			"   user = alice\n" +
			"   creds = ~/mrmarket/creds\n" +
			"   tls-ca = ~/mrmarket/ca.pem\n" +
			"Tables: --no-headers leaves out the header line. --json prints the wire messages: money in\n" +
			"*_micro fields (micro-credits, 10^-6 credit) and *_micro_per_s (micro-credits per second).\n" +
			"Shell completion: source <(mrmarket completion bash)   (or zsh, fish).",
		Version:              strings.TrimPrefix(buildInfo().String(), "mrmarket "),
		Writer:               stdout,
		ErrWriter:            stderr,
		HideHelpCommand:      true,
		EnableBashCompletion: true,
		Flags:                []ucli.Flag{flagTLSCA(), flagConfig(), flagLogLevel(), flagLogFormat()},
		Before: func(c *ucli.Context) error {
			if err := checkLogFlags(c); err != nil {
				return err
			}
			return loadConfig(c)
		},
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
			stagesCommand(),
			simCommand(),
			cancelCommand(),
			plansCommand(),
			priceCommand(),
			vmsCommand(),
			ledgerCommand(),
			natsCommand(),
			eventsCommand(),
			dashboardCommand(),
			versionCommand(),
			completionCommand(),
		},
		ExitErrHandler: func(*ucli.Context, error) {}, // Main maps errors to exit codes
		OnUsageError:   usageErrorIn("mrmarket", nil),
		Action:         rootAction,
	}
	quietUsage("mrmarket", app.Commands)
	strictArgs("mrmarket", app.Commands)
	withValueCompletion(app.Commands)
	return app
}

// quietUsage makes every command below path report a bad command line as
// one clear line on stderr (exit 2) rather than its whole help on stdout.
func quietUsage(path string, cmds []*ucli.Command) {
	for _, c := range cmds {
		p := path + " " + c.Name
		c.OnUsageError = usageErrorIn(p, c.Flags)
		quietUsage(p, c.Subcommands)
	}
}

// flagValueError is how the flag package reports a value it cannot parse.
var flagValueError = regexp.MustCompile(`^invalid value "(.*)" for flag -([\w-]+): (.*)$`)

// usageErrorIn is the usage error of the command at path, whose flags are
// flags: what was wrong, and where to read more.
func usageErrorIn(path string, flags []ucli.Flag) ucli.OnUsageErrorFunc {
	return func(_ *ucli.Context, err error, _ bool) error {
		msg := err.Error()
		if m := flagValueError.FindStringSubmatch(msg); m != nil {
			msg = fmt.Sprintf("--%s %q: %s", m[2], m[1], m[3])
			for _, f := range flags {
				if _, ok := f.(*ucli.DurationFlag); ok && slices.Contains(f.Names(), m[2]) {
					msg = fmt.Sprintf("--%s %q is not a duration: write a number and a unit (ns, us, ms, s, m, h), e.g. 90s, 30m, 2h or 1h30m (a day is 24h)", m[2], m[1])
				}
			}
		}
		return badInput("%s (see `%s --help`)", msg, path)
	}
}

// Main runs the command line and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	app := App(stdout, stderr)
	err := app.RunContext(ctx, placeFlags(app, args))
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
