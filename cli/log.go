package cli

import (
	"log/slog"

	ucli "github.com/urfave/cli/v2"
)

// daemonLogger is the one logger of a daemon command (agent, bank serve,
// broker, up): text lines on stderr, so stdout keeps only what the command
// prints for people. Every component logs through it; a level or format
// flag changes this function only.
func daemonLogger(c *ucli.Context) *slog.Logger {
	return slog.New(slog.NewTextHandler(c.App.ErrWriter, nil))
}
