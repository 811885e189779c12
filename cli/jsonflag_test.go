package cli_test

import (
	"io"
	"slices"
	"testing"

	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/cli"
)

// Every command that prints an answer takes --json; the README names the
// others: the daemons, which log (--log-format json), and those that write
// a script, a configuration, files or a sign-in link.
func TestEveryAnsweringCommandTakesJSON(t *testing.T) {
	notAnswers := []string{"up", "agent", "broker", "bank serve", "nats serve", "completion", "nats config", "sim results", "dashboard login"}
	var walk func(prefix string, cs []*ucli.Command)
	walk = func(prefix string, cs []*ucli.Command) {
		for _, c := range cs {
			if len(c.Subcommands) > 0 {
				walk(prefix+c.Name+" ", c.Subcommands)
				continue
			}
			has := slices.ContainsFunc(c.Flags, func(f ucli.Flag) bool { return slices.Contains(f.Names(), "json") })
			if name := prefix + c.Name; has == slices.Contains(notAnswers, name) {
				t.Errorf("%s: --json %v, want %v (README: who takes --json)", name, has, !has)
			}
		}
	}
	walk("", cli.App(io.Discard, io.Discard).Commands)
}
