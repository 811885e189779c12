package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// `mrmarket agent --sim`: a simulated host as its own daemon, so the whole
// distributed market (bank serve, broker, agents) runs as separate
// processes on one machine without libvirt. It is the agent command with
// agent.SimEnforcer in place of the libvirt enforcer; nothing else differs.
//
// Decisions:
//   - The VMs are named on the command line, either one by one (--vms
//     ID=OWNER,…) or as `up` lays them out (--vms-per-host N --users a,b):
//     host-<i> gets h<i>-vm1…h<i>-vmN owned round-robin by the users
//     (market.Layout), so agents host-1…host-n started this way offer the
//     VMs `up --hosts n` would. A host not named host-<i> gets <host>-vm<k>.
//   - A simulated host has 1 CPU unless --capacity says otherwise (as up's
//     hosts), and every VM wants the whole host (SimEnforcer's default), so
//     shares are visible as CPU use.
//   - Its state file defaults to .data/agents/<host>.json (where up keeps
//     its agents' books) rather than the libvirt agent's single
//     /var/lib/mrmarket/agent.json, and it serves no /metrics unless --http
//     is given: several simulated hosts share one machine.
//   - The simulated VMs do not run submitted jobs (up's simulated Hadoop,
//     market/jobs.go). That runner learns jobs from the MRM_EVENTS
//     audit stream and reports progress signed by each job's user (or the
//     admin); an agent holds only its own host's key and its NATS
//     permissions give it neither the stream nor the users' progress
//     subject, which is right: an agent must not speak for users. Running
//     jobs against separate agents needs a job runner of its own, as a user
//     or the admin (future work); deadline jobs are admitted and funded, but
//     their progress is not reported.

// simDescription is the agent command's help on --sim.
const simDescription = "With --sim the host is simulated (no libvirt): its VMs are named on the command line and\n" +
	"receive CPU in proportion to their shares on --capacity CPUs (default 1), each wanting the\n" +
	"whole host. Everything else is the libvirt agent's: credentials <creds>/agents/<host>.nk,\n" +
	"captures to the bank, the host's state every --tick, the bid book in --state. Name the VMs\n" +
	"either --vms ID=OWNER,… or --vms-per-host N --users a,b, which lays them out as `mrmarket up`\n" +
	"does: host-<i> gets h<i>-vm1…h<i>-vmN owned round-robin by the users (another host id gets\n" +
	"<host>-vm<k>). The owners must be registered users (`mrmarket bank principal add`).\n" +
	"Defaults with --sim: --state .data/agents/<host>.json, no --http (several simulated hosts\n" +
	"share a machine). The simulated VMs do not run submitted jobs as up's do: that needs a\n" +
	"user's or the admin's key to report progress, and an agent holds only its host's."

// simOnly are the flags that make sense with --sim only.
var simOnly = []string{"vms", "vms-per-host", "users"}

// libvirtOnly are the flags of a libvirt host (libvirtFlags).
var libvirtOnly = []string{"libvirt", "hard-cap", "disk-mode", "disk-scheduler", "net-mode", "link-kibps", "disk-kibps"}

// simFlags are the flags of a simulated host.
func simFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.BoolFlag{Name: "sim", Usage: "simulate the host instead of governing libvirt domains (see the description above)"},
		&ucli.StringFlag{Name: "vms", Usage: "with --sim: the host's VMs and their owners, ID=OWNER,… (e.g. web-1=alice,db-1=bob)"},
		&ucli.IntFlag{Name: "vms-per-host", Usage: "with --sim: this many VMs, named as up names them, owned round-robin by --users"},
		&ucli.StringFlag{Name: "users", Usage: "with --sim and --vms-per-host: comma-separated owners of the VMs"},
	}
}

// onlyWith refuses any of flags given without the flag named need.
func onlyWith(c *ucli.Context, need string, flags ...string) error {
	for _, f := range flags {
		if c.IsSet(f) {
			return badInput("--%s needs %s", f, need)
		}
	}
	return nil
}

// flagSource names flag as the user may have given it: on the command line
// or in its environment variable.
func flagSource(c *ucli.Context, name string) string {
	for _, f := range c.Command.Flags {
		if ev, ok := f.(interface{ GetEnvVars() []string }); ok && slices.Contains(f.Names(), name) && len(ev.GetEnvVars()) > 0 {
			return fmt.Sprintf("--%s (or %s)", name, strings.Join(ev.GetEnvVars(), ", "))
		}
	}
	return "--" + name
}

// simHost checks a simulated host's flags and returns how to open it.
func simHost(c *ucli.Context, host string, capacity float64) (func() (agentHost, error), error) {
	for _, f := range libvirtOnly {
		if c.IsSet(f) {
			return nil, badInput("%s is for a libvirt host; a simulated one (--sim) has none", flagSource(c, f))
		}
	}
	var vms []agent.VM
	var err error
	switch {
	case c.IsSet("vms") && c.IsSet("vms-per-host"):
		return nil, badInput("--sim takes --vms or --vms-per-host, not both")
	case c.IsSet("vms"):
		if c.IsSet("users") {
			return nil, badInput("--users goes with --vms-per-host; --vms names each VM's owner (ID=OWNER)")
		}
		vms, err = parseSimVMs(c.String("vms"))
	case c.IsSet("vms-per-host"):
		if strings.TrimSpace(c.String("users")) == "" {
			return nil, badInput("--vms-per-host needs --users: the VMs' owners, e.g. --users alice,bob")
		}
		var users []string
		if users, err = splitList("users", []string{c.String("users")}); err == nil {
			vms, err = simLayout(host, c.Int("vms-per-host"), users)
		}
	default:
		return nil, badInput("--sim needs the host's VMs: --vms ID=OWNER,… or --vms-per-host N --users a,b")
	}
	if err != nil {
		return nil, err
	}
	if capacity == 0 {
		capacity = 1
	}
	return func() (agentHost, error) {
		about := make([]string, len(vms))
		for i, vm := range vms {
			about[i] = vm.ID + "=" + vm.Owner
		}
		return agentHost{enforcer: agent.NewSimEnforcer(nil, capacity, vms...), capacity: capacity, close: func() {},
			about: fmt.Sprintf("simulated, %d VMs (%s)", len(vms), strings.Join(about, ","))}, nil
	}, nil
}

// parseSimVMs reads --vms: ID=OWNER pairs, comma-separated.
func parseSimVMs(s string) ([]agent.VM, error) {
	items, err := splitList("vms", []string{s})
	if err != nil {
		return nil, err
	}
	var vms []agent.VM
	seen := map[string]bool{}
	for _, item := range items {
		id, owner, ok := strings.Cut(item, "=")
		id, owner = strings.TrimSpace(id), strings.TrimSpace(owner)
		if !ok {
			return nil, badInput("--vms %q: want ID=OWNER, e.g. web-1=alice", item)
		}
		if err := wire.CheckName("VM id in --vms", id); err != nil {
			return nil, usageError{err}
		}
		if err := wire.CheckName("owner in --vms", owner); err != nil {
			return nil, usageError{err}
		}
		if seen[id] {
			return nil, badInput("--vms names VM %q twice", id)
		}
		seen[id] = true
		vms = append(vms, agent.VM{ID: id, Owner: owner})
	}
	return vms, nil
}

// simLayout is --vms-per-host: n VMs of host named as `up` names them
// (market.Layout: host-<i> has h<i>-vm<k>), owned round-robin by users.
// Layout itself is not called: it builds every host up to host-<i>.
func simLayout(host string, n int, users []string) ([]agent.VM, error) {
	if n < 1 || n > 1000 {
		return nil, badInput("--vms-per-host must be between 1 and 1000, got %d", n)
	}
	if len(users) == 0 {
		return nil, badInput("--vms-per-host needs --users: the VMs' owners, e.g. --users alice,bob")
	}
	for _, u := range users {
		if err := wire.CheckName("user in --users", u); err != nil {
			return nil, usageError{err}
		}
	}
	prefix := host + "-vm"
	if i, ok := strings.CutPrefix(host, "host-"); ok {
		if idx, err := strconv.Atoi(i); err == nil && idx > 0 && strconv.Itoa(idx) == i {
			prefix = "h" + i + "-vm"
		}
	}
	vms := make([]agent.VM, n)
	for k := range vms {
		vms[k] = agent.VM{ID: prefix + strconv.Itoa(k+1), Owner: users[k%len(users)]}
		if err := wire.CheckName("VM id", vms[k].ID); err != nil {
			return nil, badInput("--host %s is too long to name its VMs %s<k>: name them with --vms", host, prefix)
		}
	}
	return vms, nil
}
