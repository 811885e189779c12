package agent

// What the libvirt agent (mrmarket agent without --sim) needs of its host,
// beyond running as an unprivileged user in libvirt's group, by what it
// does. It is data so that what deploys the agent can be checked against
// it: deploy/systemd's agent unit grants exactly the union of every mode's
// (its test fails when the two disagree), so a deployed agent neither
// falls back to network shares it cannot deliver (a unit without
// CAP_NET_ADMIN made `net-mode auto` silently none) nor holds a privilege
// nothing here needs.

// Privilege is what one mode needs: Linux capabilities (effective in the
// agent and in the tc and ip it runs, so ambient for a non-root user),
// socket address families, and the paths it writes outside its state.
type Privilege struct {
	Mode            string
	Capabilities    []string
	AddressFamilies []string
	Writes          []string
	Why             string
}

// Privileges are the libvirt agent's needs, by mode.
var Privileges = []Privilege{
	{
		Mode:            "always",
		AddressFamilies: []string{"AF_UNIX", "AF_INET", "AF_INET6"},
		Why:             "libvirt's socket (AF_UNIX); NATS and the metrics server (AF_INET, AF_INET6)",
	},
	{
		Mode:            "--net-mode auto|throttle (network shares)",
		Capabilities:    []string{"CAP_NET_ADMIN"},
		AddressFamilies: []string{"AF_NETLINK"},
		Why: "iproute2's ip and tc, which the agent runs, add an IFB per tap and HTB and ingress qdiscs with a mirred redirect " +
			"over rtnetlink (virt.CheckNetShaping tries them at start)",
	},
	{
		Mode:         "--disk-scheduler (switching the managed disks' I/O scheduler, for --disk-mode weights)",
		Capabilities: []string{"CAP_DAC_OVERRIDE"},
		Writes:       []string{"/sys/devices"},
		Why: "it writes queue/scheduler of each block device behind a managed disk (/sys/block/<dev> links into /sys/devices), " +
			"a file of root's (mode 0644) on a tree the unit's ProtectKernelTunables makes read-only",
	},
}
