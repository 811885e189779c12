package cli

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// Shell completion: the app answers `mrmarket … --generate-bash-completion`
// with the commands and flags that may follow (urfave/cli's
// EnableBashCompletion); `mrmarket completion SHELL` prints the script
// that asks it as you type (bash and zsh, from urfave/cli's autocomplete/
// scripts), or the complete fish definitions (urfave/cli's
// ToFishCompletion). After a flag that names something of the market the
// values are completed too (completeValues): --strategy the strategies,
// --vm the VMs, --host the hosts, cancel's --plan the running plans — the
// last three asked of the market as the command would be, briefly.

const bashCompletion = `# bash completion for PROG: source <(PROG completion bash)
_PROG_bash_autocomplete() {
  if [[ "${COMP_WORDS[0]}" != "source" ]]; then
    local cur opts words cword
    COMPREPLY=()
    cur="${COMP_WORDS[COMP_CWORD]}"
    if declare -F _init_completion >/dev/null 2>&1; then
      _init_completion -n "=:" || return
    else
      words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD
    fi
    words=("${words[@]:0:$cword}")
    if [[ "$cur" == "-"* ]]; then
      opts=$("${words[@]}" "${cur}" --generate-bash-completion 2>/dev/null)
    else
      opts=$("${words[@]}" --generate-bash-completion 2>/dev/null)
    fi
    COMPREPLY=($(compgen -W "${opts}" -- "${cur}"))
    return 0
  fi
}
complete -o bashdefault -o default -o nospace -F _PROG_bash_autocomplete PROG
`

const zshCompletion = `#compdef PROG
# zsh completion for PROG: source <(PROG completion zsh)
_PROG_zsh_autocomplete() {
  local -a opts
  local cur
  cur=${words[-1]}
  if [[ "$cur" == "-"* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} --generate-bash-completion)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion)}")
  fi
  if [[ "${opts[1]}" != "" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}
compdef _PROG_zsh_autocomplete PROG
`

func completionCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "completion",
		ArgsUsage: "SHELL",
		Usage:     "print the shell completion script for bash, zsh or fish",
		UsageText: "source <(mrmarket completion bash)     (in ~/.bashrc)\n" +
			"   source <(mrmarket completion zsh)      (in ~/.zshrc)\n" +
			"   mrmarket completion fish > ~/.config/fish/completions/mrmarket.fish",
		Action: func(c *ucli.Context) error {
			if c.NArg() != 1 {
				return badInput("name one shell: bash, zsh or fish")
			}
			prog := c.App.Name
			var script string
			switch shell := c.Args().First(); shell {
			case "bash":
				script = strings.ReplaceAll(bashCompletion, "PROG", prog)
			case "zsh":
				script = strings.ReplaceAll(zshCompletion, "PROG", prog)
			case "fish":
				var err error
				if script, err = c.App.ToFishCompletion(); err != nil {
					return err
				}
			default:
				return badInput("unknown shell %q: bash, zsh or fish", shell)
			}
			_, err := fmt.Fprint(c.App.Writer, script)
			return err
		},
	}
}

// completeAsking bounds the market's answer to a completion: the shell
// waits for it as you type.
const completeAsking = 2 * time.Second

// withValueCompletion gives every command below cmds that talks to the
// market (it has --nats) completeValues.
func withValueCompletion(cmds []*ucli.Command) {
	for _, c := range cmds {
		withValueCompletion(c.Subcommands)
		if c.BashComplete == nil && slices.ContainsFunc(c.Flags, func(f ucli.Flag) bool { return slices.Contains(f.Names(), "nats") }) {
			c.BashComplete = completeValues
		}
	}
}

// completeValues completes the value of the flag before the cursor, when
// it names something of the market; otherwise the flags, as urfave/cli
// does. urfave/cli completes from os.Args, as the shell runs the binary:
// "mrmarket spend --vm --generate-bash-completion".
func completeValues(c *ucli.Context) {
	if n := len(os.Args); n >= 2 && os.Args[n-1] == "--generate-bash-completion" && strings.HasPrefix(os.Args[n-2], "-") {
		if name, inline := flagName(os.Args[n-2]); !inline && slices.ContainsFunc(c.Command.Flags, func(f ucli.Flag) bool { return slices.Contains(f.Names(), name) }) {
			if values, ok := flagValues(c, name); ok {
				for _, v := range values {
					fmt.Fprintln(c.App.Writer, v)
				}
				return
			}
		}
	}
	ucli.DefaultCompleteWithFlags(c.Command)(c)
}

// flagValues are the values flag may take in c's command, and whether it
// names something completeValues knows; what the market does not answer
// in time completes nothing.
func flagValues(c *ucli.Context, flag string) ([]string, bool) {
	var ask func(ctx context.Context, cl clients) ([]string, error)
	switch {
	case flag == "strategy":
		return wire.Strategies, true
	case flag == "vm":
		ask = func(ctx context.Context, cl clients) (ids []string, err error) {
			rep, err := cl.broker.VMs(ctx, &wire.VMsRequest{})
			for _, v := range rep.VMs {
				ids = append(ids, v.VM)
			}
			return ids, err
		}
	case flag == "host":
		ask = func(ctx context.Context, cl clients) (ids []string, err error) {
			rep, err := cl.broker.Price(ctx, &wire.PriceRequest{})
			for _, h := range rep.Hosts {
				ids = append(ids, h.Host)
			}
			return ids, err
		}
	case flag == "plan" && commandPath(c) == "cancel":
		ask = func(ctx context.Context, cl clients) (ids []string, err error) {
			rep, err := cl.broker.Plans(ctx, &wire.PlansRequest{User: setting(c, "user")})
			for _, p := range rep.Plans {
				if p.Status == wire.PlanRunning {
					ids = append(ids, p.ID)
				}
			}
			return ids, err
		}
	default:
		return nil, false
	}
	ctx, cancel := context.WithTimeout(c.Context, completeAsking)
	defer cancel()
	outer := c.Context
	c.Context = ctx
	defer func() { c.Context = outer }()
	var values []string
	_ = withClients(c, func(cl clients) (err error) {
		values, err = ask(ctx, cl)
		return err
	})
	return values, true
}
