package cli

import (
	"fmt"

	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/hadoopvm/cluster"
	"github.com/mrmarket/mrmarket/internal/wire"
)

func clusterCommand() *ucli.Command {
	return &ucli.Command{
		Name:        "cluster",
		Usage:       "provision a user's virtual Hadoop cluster as libvirt domains",
		Subcommands: []*ucli.Command{clusterCreateCommand(), clusterListCommand(), clusterDeleteCommand()},
	}
}

func clusterCreateCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "create",
		Usage: "define and start a master and workers, with owner metadata and cloud-init seeds",
		UsageText: "mrmarket cluster create --name digg --owner alice --workers 8 --image /var/lib/libvirt/images/hadoop.qcow2 \\\n" +
			"     --host host-1=qemu:///system --host host-2=qemu+ssh://h2/system --seed-dir /var/lib/mrmarket/seeds --seed-iso\n" +
			"   mrmarket cluster create --name wc --owner alice --workers 2 --guest bin/guest --input-dir DIR --bridge br0 \\\n" +
			"     --host host-1=qemu:///system --seed-dir /var/lib/libvirt/images/wc --domain-type qemu\n\n" +
			"With --guest, the VMs boot mrmarket's own worker guest (`make guest`) instead of a Hadoop image:\n" +
			"workers only, each with its input disk DIR/<vm>.img (`mrm-guest data` writes one), a scratch\n" +
			"disk and an address of --subnet; their master is the YARN facade on the host\n" +
			"(hadoopvm/yarnfacade), which they report to over a virtio-serial channel.",
		Flags: outputFlags(flagHosts(),
			&ucli.StringFlag{Name: "name", Usage: "cluster name"},
			&ucli.StringFlag{Name: "owner", Usage: "the user who owns (and pays for) the VMs"},
			&ucli.IntFlag{Name: "workers", Usage: "worker nodes", Value: 2},
			&ucli.StringFlag{Name: "image", Usage: "base qcow2 image with Hadoop 3 in /opt/hadoop"},
			&ucli.UintFlag{Name: "memory", Usage: "MiB per VM (with --guest: 160 unless given)", Value: 2048},
			&ucli.UintFlag{Name: "vcpus", Usage: "vCPUs per VM (with --guest: 1 unless given)", Value: 2},
			&ucli.StringFlag{Name: "network", Usage: "libvirt network", Value: "default"},
			&ucli.StringFlag{Name: "seed-dir", Usage: "where the cloud-init seeds are written", Value: ".data/seeds"},
			&ucli.BoolFlag{Name: "seed-iso", Usage: "pack each seed as a cidata ISO (cloud-localds or genisoimage)"},
			&ucli.StringFlag{Name: "domain-type", Usage: "libvirt domain type: kvm, qemu (TCG) or test", Value: "kvm"},
			&ucli.StringFlag{Name: "images-dir", Usage: "where the VMs' disks go (default: the image's directory; with --guest, --seed-dir)"},
			&ucli.StringFlag{Name: "guest", Usage: "boot mrmarket's worker guest from this directory (make guest's vmlinuz and initrd.img), not --image"},
			&ucli.StringFlag{Name: "input-dir", Usage: "with --guest: each worker's input disk <dir>/<vm>.img"},
			&ucli.UintFlag{Name: "scratch-mib", Usage: "with --guest: each worker's scratch disk, MiB", Value: 1024},
			&ucli.StringFlag{Name: "bridge", Usage: "with --guest: a host bridge for the workers' taps, in place of --network"},
			&ucli.StringFlag{Name: "subnet", Usage: "with --guest: the workers' addresses (worker i at the (10+i)-th)", Value: "10.83.0.0/16"},
			&ucli.IntFlag{Name: "slots", Usage: "with --guest: task slots per worker", Value: 2},
		),
		Action: func(c *ucli.Context) error {
			hs, err := parseHosts(c)
			if err != nil {
				return err
			}
			s := cluster.Spec{Name: c.String("name"), Owner: c.String("owner"), Workers: c.Int("workers"), Hosts: hs,
				Image: c.String("image"), MemoryMiB: c.Uint("memory"), VCPUs: c.Uint("vcpus"), Network: c.String("network"),
				SeedDir: c.String("seed-dir"), BuildSeedImage: c.Bool("seed-iso"), DomainType: c.String("domain-type"),
				ImagesDir: c.String("images-dir")}
			if c.String("guest") != "" {
				guestSpec(c, &s)
			}
			if _, err := cluster.Plan(s); err != nil {
				return usageError{err}
			}
			return onLibvirt(c, func(conn *cluster.Connector) ([]cluster.Node, error) { return conn.Create(s) },
				func(w *out, nodes []cluster.Node) error {
					if s.Guest == "" {
						t := w.table("VM", "ROLE", "HOST")
						for _, n := range nodes {
							t.row(n.VM, n.Role, n.Host)
						}
						return t.flush()
					}
					t := w.table("VM", "ROLE", "HOST", "ADDRESS")
					for _, n := range nodes {
						t.row(n.VM, n.Role, n.Host, n.Address)
					}
					return t.flush()
				})
		},
	}
}

// guestSpec sets a worker guest cluster's settings: the sizes default to
// a small guest's (160 MiB, one vCPU) unless given, and a --bridge
// replaces the default network.
func guestSpec(c *ucli.Context, s *cluster.Spec) {
	s.Guest, s.InputDir, s.ScratchMiB = c.String("guest"), c.String("input-dir"), c.Uint("scratch-mib")
	s.Bridge, s.Subnet, s.Slots = c.String("bridge"), c.String("subnet"), c.Int("slots")
	if !c.IsSet("memory") {
		s.MemoryMiB = 0
	}
	if !c.IsSet("vcpus") {
		s.VCPUs = 0
	}
	if s.Bridge != "" && !c.IsSet("network") {
		s.Network = ""
	}
}

func clusterListCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "list",
		Usage:     "list the cluster VMs on hosts",
		UsageText: "mrmarket cluster list --host host-1=qemu:///system",
		Flags:     outputFlags(flagHosts()),
		Action: func(c *ucli.Context) error {
			hs, err := parseHosts(c)
			if err != nil {
				return err
			}
			return onLibvirt(c, func(conn *cluster.Connector) ([]cluster.Member, error) { return conn.List(hs) }, printMembers)
		},
	}
}

func clusterDeleteCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "delete",
		Usage:     "destroy and undefine a cluster's VMs",
		UsageText: "mrmarket cluster delete --name digg --host host-1=qemu:///system",
		Flags:     outputFlags(flagHosts(), &ucli.StringFlag{Name: "name", Usage: "cluster name"}),
		Action: func(c *ucli.Context) error {
			hs, err := parseHosts(c)
			if err != nil {
				return err
			}
			if err := wire.CheckName("--name", c.String("name")); err != nil {
				return usageError{err}
			}
			return onLibvirt(c, func(conn *cluster.Connector) ([]cluster.Member, error) { return conn.Delete(c.String("name"), hs) }, printMembers)
		},
	}
}

func flagHosts() ucli.Flag {
	return &ucli.StringSliceFlag{Name: "host", Usage: "a hypervisor as id=libvirt-uri (repeat), e.g. host-1=qemu+ssh://h1/system"}
}

// parseHosts reads the --host flags: at least one.
func parseHosts(c *ucli.Context) ([]cluster.Host, error) {
	hs, err := cluster.ParseHosts(c.StringSlice("host"))
	if err == nil && len(hs) == 0 {
		err = fmt.Errorf("%w: at least one --host", cluster.ErrSpec)
	}
	if err != nil {
		return nil, usageError{err}
	}
	return hs, nil
}

// onLibvirt is call's counterpart for the hypervisors: it runs do on
// libvirt connections that it closes afterwards, and prints the result
// (show). libvirt failing exits as unavailable.
func onLibvirt[Rep any](c *ucli.Context, do func(conn *cluster.Connector) (Rep, error), human func(w *out, rep Rep) error) error {
	conn := &cluster.Connector{}
	defer conn.Close()
	rep, err := do(conn)
	if err != nil {
		return wire.Errorf(wire.ErrUnavailable, "%v", err)
	}
	return show(c, rep, human)
}

func printMembers(w *out, ms []cluster.Member) error {
	t := w.table("CLUSTER", "VM", "ROLE", "HOST", "OWNER", "RUNNING")
	for _, m := range ms {
		t.row(m.Cluster, m.VM, m.Role, m.Host, m.Owner, fmt.Sprint(m.Running))
	}
	return t.flush()
}
