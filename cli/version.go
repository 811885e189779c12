package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	ucli "github.com/urfave/cli/v2"
)

// Version is what `mrmarket version` reports, from the binary's build
// information: the module version, the VCS commit it was built from (and
// whether the tree had uncommitted changes) and the Go version.
type Version struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Time     string `json:"commit_time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
}

func buildVersion() Version {
	v := Version{Module: "github.com/mrmarket/mrmarket", Version: "(devel)", Go: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Module, v.Version = info.Main.Path, info.Main.Version
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func versionCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "version",
		Usage: "print the version, the commit it was built from and the Go version",
		Flags: []ucli.Flag{flagJSON()},
		Action: func(c *ucli.Context) error {
			return output(c, buildVersion(), func(w io.Writer) error {
				v := buildVersion()
				commit := v.Commit
				if commit == "" {
					commit = "unknown"
				}
				if v.Modified {
					commit += " (modified)"
				}
				_, err := fmt.Fprintf(w, "mrmarket %s\n  module  %s\n  commit  %s\n  go      %s\n", v.Version, v.Module, commit, v.Go)
				return err
			})
		},
	}
}

// bashCompletion is urfave/cli's completion protocol for bash: each word
// asks the binary itself (--generate-bash-completion) what may follow.
const bashCompletion = `# mrmarket bash completion: source <(mrmarket completion bash)
_mrmarket() {
  local cur opts
  COMPREPLY=()
  cur="${COMP_WORDS[COMP_CWORD]}"
  if [[ "$cur" == "-"* ]]; then
    opts=$("${COMP_WORDS[@]:0:$COMP_CWORD}" "$cur" --generate-bash-completion 2>/dev/null)
  else
    opts=$("${COMP_WORDS[@]:0:$COMP_CWORD}" --generate-bash-completion 2>/dev/null)
  fi
  COMPREPLY=($(compgen -W "${opts}" -- "${cur}"))
  return 0
}
complete -o bashdefault -o default -F _mrmarket mrmarket
`

func completionCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script (bash; zsh with bashcompinit)",
		UsageText: "source <(mrmarket completion bash)",
		Action: func(c *ucli.Context) error {
			switch sh := c.Args().First(); sh {
			case "bash", "zsh", "":
				if sh == "zsh" {
					fmt.Fprintln(c.App.Writer, "autoload -U +X bashcompinit && bashcompinit")
				}
				_, err := io.WriteString(c.App.Writer, bashCompletion)
				return err
			default:
				return badInput("no completion for shell %q (bash, zsh)", sh)
			}
		},
	}
}
