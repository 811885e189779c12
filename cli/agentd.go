package cli

import (
	ucli "github.com/urfave/cli/v2"
)

// agentCommand is `mrmarket agent`: one host's agent daemon. Implemented by
// the [agent] issue.
func agentCommand() *ucli.Command {
	return &ucli.Command{
		Name:   "agent",
		Usage:  "run one host's agent daemon (libvirt enforcement) — not yet implemented",
		Hidden: true,
		Action: func(*ucli.Context) error { return badInput("mrmarket agent is not implemented yet") },
	}
}
