package cli

import (
	"fmt"
	"strings"

	ucli "github.com/urfave/cli/v2"
)

// Shell completion: the app answers `mrmarket … --generate-bash-completion`
// with the commands and flags that may follow (urfave/cli's
// EnableBashCompletion); `mrmarket completion SHELL` prints the script
// that asks it as you type (bash and zsh, from urfave/cli's autocomplete/
// scripts), or the complete fish definitions (urfave/cli's
// ToFishCompletion).

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
