package cli

import (
	"slices"
	"strings"

	ucli "github.com/urfave/cli/v2"
)

// The command line, as a person writes it. urfave/cli reads the app's flags
// (--tls-ca, --config, --log-level, --log-format) only before the command and a command's flags only
// after it, and it stops at the first argument that is not a flag; a
// mistyped command showed "No help topic", and an argument nobody reads
// was ignored. So: the connection flags go in either place (placeFlags
// moves them where the parser reads them), a mistyped command is told the
// closest one, and an argument a command does not take is refused (exit 2).

// appFlags are the app's flags, read before the command; commandFlags are
// the connection flags of the commands, read after it. Each is accepted in
// both places.
var (
	appFlags     = []string{"tls-ca", "config", "log-level", "log-format"}
	commandFlags = []string{"nats", "creds", "user"}
)

// placeFlags returns args with the connection flags where the parser reads
// them: --nats, --creds and --user written before the command after it,
// --tls-ca and --config written after the command (which does not define
// them itself) before it. Everything else keeps its place.
func placeFlags(app *ucli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	var lead, moved []string
	i := 1
	for i < len(args) && strings.HasPrefix(args[i], "-") && args[i] != "--" {
		n := flagTokens(args, i)
		if name, _ := flagName(args[i]); slices.Contains(commandFlags, name) {
			moved = append(moved, args[i:i+n]...)
		} else {
			lead = append(lead, args[i:i+n]...)
		}
		i += n
	}
	var path []string
	var leaf *ucli.Command
	for cmds := app.Commands; i < len(args); i++ {
		c := findCommand(cmds, args[i])
		if c == nil {
			break
		}
		path, leaf, cmds = append(path, args[i]), c, c.Subcommands
	}
	var rest []string
	for j := i; j < len(args); {
		if args[j] == "--" {
			rest = append(rest, args[j:]...)
			break
		}
		n := 1
		if strings.HasPrefix(args[j], "-") {
			n = flagTokens(args, j)
			if name, _ := flagName(args[j]); slices.Contains(appFlags, name) && leaf != nil && !defines(leaf, name) {
				lead = append(lead, args[j:j+n]...)
				j += n
				continue
			}
		}
		rest = append(rest, args[j:j+n]...)
		j += n
	}
	if leaf == nil {
		lead, moved = append(lead, moved...), nil // no command: the parser says what is wrong
	}
	return slices.Concat(args[:1], lead, path, moved, rest)
}

// flagName is the name of a flag argument (--user=alice: user) and
// whether its value is in it.
func flagName(arg string) (string, bool) {
	name, _, inline := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	return name, inline
}

// flagTokens is how many arguments the flag at args[i] takes: two for a
// connection flag whose value follows it, else one (its value is in it, or
// it is left where it is).
func flagTokens(args []string, i int) int {
	name, inline := flagName(args[i])
	if !inline && i+1 < len(args) && (slices.Contains(appFlags, name) || slices.Contains(commandFlags, name)) {
		return 2
	}
	return 1
}

// findCommand is the command of cmds named (or aliased) name.
func findCommand(cmds []*ucli.Command, name string) *ucli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// defines reports whether c has the flag name.
func defines(c *ucli.Command, name string) bool {
	return slices.ContainsFunc(c.Flags, func(f ucli.Flag) bool { return slices.Contains(f.Names(), name) })
}

// strictArgs gives every command below path (the app's commands first)
// an answer for arguments it does not read: a group names the closest of
// its commands to a mistyped one, and a command that takes no arguments
// (no ArgsUsage) refuses them — before its own action.
func strictArgs(path string, cmds []*ucli.Command) {
	for _, c := range cmds {
		p := path + " " + c.Name
		strictArgs(p, c.Subcommands)
		act, sub := c.Action, c.Subcommands
		switch {
		case act == nil && len(sub) > 0:
			c.Action = func(ctx *ucli.Context) error {
				if ctx.NArg() == 0 {
					return ucli.ShowSubcommandHelp(ctx)
				}
				return unknownCommand(p, sub, ctx.Args().First())
			}
		case act != nil && c.ArgsUsage == "":
			c.Action = func(ctx *ucli.Context) error {
				if ctx.NArg() > 0 {
					if len(sub) > 0 {
						return unknownCommand(p, sub, ctx.Args().First())
					}
					return badInput("`%s` takes no arguments, only flags: %q would not be read (see `%s --help`)", p, strings.Join(ctx.Args().Slice(), " "), p)
				}
				return act(ctx)
			}
		}
	}
}

// rootAction answers `mrmarket` alone with its help, and a command it
// does not know with the closest one.
func rootAction(ctx *ucli.Context) error {
	if ctx.NArg() == 0 {
		return ucli.ShowAppHelp(ctx)
	}
	return unknownCommand(ctx.App.Name, ctx.App.Commands, ctx.Args().First())
}

// unknownCommand is the error of name, not a command of cmds (below
// path): it names the closest one when one is close.
func unknownCommand(path string, cmds []*ucli.Command, name string) error {
	best, bestD := "", max(2, len(name)/3)+1 // farther is no suggestion
	for _, c := range cmds {
		if c.Hidden {
			continue
		}
		for _, n := range c.Names() {
			d := editDistance(name, n)
			if strings.HasPrefix(n, name) {
				d = min(d, 1) // a command begun
			}
			if d < bestD {
				best, bestD = n, d
			}
		}
	}
	if best == "" {
		return badInput("`%s` has no command %q (see `%s --help`)", path, name, path)
	}
	return badInput("`%s` has no command %q: did you mean `%s %s`? (see `%s --help`)", path, name, path, best, path)
}

// editDistance is the Damerau–Levenshtein distance (optimal string
// alignment) of a and b: a swapped pair of letters ("spned") counts one.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
