package cli

import (
	"log/slog"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/internal/obs"
)

// Logs. A daemon command (agent, bank serve, broker, nats serve, up) has
// one logger, daemonLogger: lines on stderr, so stdout keeps only what the
// command prints for people, in the level and format of --log-level and
// --log-format (obs.NewLogger). Every component logs through it: its
// start, what moves money, refusals, repairs, reconnects, failovers and
// stale hosts.

func flagLogLevel() *ucli.StringFlag {
	return &ucli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"MRM_LOG_LEVEL"},
		Usage: "a daemon's log lines at this level and above: " + strings.Join(obs.LogLevels, ", ")}
}

func flagLogFormat() *ucli.StringFlag {
	return &ucli.StringFlag{Name: "log-format", Value: "text", EnvVars: []string{"MRM_LOG_FORMAT"},
		Usage: "a daemon's log lines as " + strings.Join(obs.LogFormats, " or ") + " (one object a line)"}
}

// checkLogFlags refuses a level or format nobody logs in, before any
// command runs (exit 2).
func checkLogFlags(c *ucli.Context) error {
	if err := obs.CheckLogFlags(c.String("log-level"), c.String("log-format")); err != nil {
		return badInput("%v (--log-level, --log-format, or MRM_LOG_LEVEL, MRM_LOG_FORMAT)", err)
	}
	return nil
}

// daemonLogger is the one logger of a daemon command.
func daemonLogger(c *ucli.Context) *slog.Logger {
	l, err := obs.NewLogger(c.App.ErrWriter, c.String("log-level"), c.String("log-format"))
	if err != nil { // checked before the command ran (checkLogFlags)
		panic(err)
	}
	return l
}
