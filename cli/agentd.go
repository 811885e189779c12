package cli

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/agent/virt"
	"github.com/mrmarket/mrmarket/daemon"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/stop"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// agentCommand is `mrmarket agent`: one host's agent daemon, on libvirt or
// (--sim) on a simulated host. Both are one code path: only the Enforcer
// (and its flags) differ — the identity, the bank and NATS wiring, the state
// file, metrics and the tick loop are package daemon's, as up's agents are.
func agentCommand() *ucli.Command {
	flags := []ucli.Flag{flagNATS(), flagCreds(), flagTLSCA(), flagAdminKey(),
		&ucli.StringFlag{Name: "host", Usage: "this host's id (its agent credentials: <creds>/agents/<host>.nk)", EnvVars: []string{"MRM_HOST"}},
		&ucli.Float64Flag{Name: "capacity", Usage: "the host's CPUs", DefaultText: "all of them; 1 with --sim"},
		flagIdleBelow(),
		&ucli.DurationFlag{Name: "tick", Usage: "charge, reconcile and publish every", Value: defaultTick},
		&ucli.StringFlag{Name: "state", Usage: "state file keeping the bid book across restarts", Value: "/var/lib/mrmarket/agent.json",
			DefaultText: "/var/lib/mrmarket/agent.json; with --sim .data/agents/<host>.json, where up keeps it", EnvVars: []string{"MRM_AGENT_STATE"}},
		&ucli.StringFlag{Name: "http", Usage: "address for /metrics, /healthz and /readyz (empty: none)", Value: "127.0.0.1:9466",
			DefaultText: "127.0.0.1:9466; with --sim none"},
	}
	flags = append(flags, libvirtFlags()...)
	flags = append(flags, simFlags()...)
	return &ucli.Command{
		Name:  "agent",
		Usage: "run one host's agent: enforce shares on its libvirt domains (or a simulated host's VMs: --sim), charge bids, publish the host's state",
		UsageText: "mrmarket agent --host host-1 --libvirt qemu:///system --nats nats://nats-1:4222 --creds /etc/mrmarket/creds\n" +
			"   (domains are managed when their metadata names an owner: see `go doc ./agent/virt`)\n" +
			"mrmarket agent --sim --host host-1 --vms-per-host 2 --users alice,bob --nats … --creds .data/creds\n" +
			"mrmarket agent --sim --host host-3 --vms web-1=alice,db-1=bob --capacity 4 --nats … --creds …",
		Description: simDescription,
		Flags:       flags,
		Action:      runAgent,
	}
}

// agentHost is what differs between the agent's kinds of host: how its VMs
// are seen and governed, and how many CPUs it has.
type agentHost struct {
	enforcer agent.Enforcer
	capacity float64
	about    string // for the start line: "libvirt qemu:///system"
	close    func()
}

// runAgent is `mrmarket agent`. Every flag is checked before anything is
// opened or connected to; then the host's enforcer is opened (libvirt, or
// the simulated host) and everything else is the same for both.
func runAgent(c *ucli.Context) error {
	host := c.String("host")
	if err := wire.CheckName("--host", host); err != nil {
		return usageError{err}
	}
	if c.Duration("tick") < tickMin || c.Duration("tick") > tickMax {
		return badInput("--tick must be between %s and %s", tickMin, tickMax)
	}
	capacity := c.Float64("capacity")
	if capacity < 0 || capacity > 4096 {
		return badInput("--capacity must be between 0 (all CPUs) and 4096")
	}
	if err := checkIdleBelow(c); err != nil {
		return err
	}
	state, httpAddr := c.String("state"), c.String("http")
	var open func() (agentHost, error)
	var err error
	if c.Bool("sim") {
		open, err = simHost(c, host, capacity)
		if !c.IsSet("state") {
			state = filepath.Join(".data", "agents", host+".json")
		}
		if !c.IsSet("http") {
			httpAddr = "" // several simulated hosts share a machine
		}
	} else {
		open, err = libvirtHost(c, capacity)
	}
	if err != nil {
		return err
	}
	signer, err := signing.CredsDir(c.String("creds")).Signer(wire.RoleAgent, host)
	if err != nil {
		return err
	}
	anchor, err := adminKey(c)
	if err != nil {
		return err
	}
	h, err := open()
	if err != nil {
		return err
	}
	s := stop.New()
	defer s.Stop()
	s.AddCloser(h.close)
	reg := prometheus.NewRegistry()
	env := daemonEnv(c, s, anchor, reg)
	if l, ok := h.enforcer.(interface{ SetLogger(*slog.Logger) }); ok {
		l.SetLogger(env.Logger) // its slow libvirt calls
	}
	a, err := daemon.StartAgent(c.Context, daemon.AgentConfig{Env: env, Host: host, Signer: signer, Enforcer: h.enforcer,
		Capacity: h.capacity, IdleBelow: c.Float64("idle-below"), StateFile: state, Tick: c.Duration("tick")})
	if err != nil {
		return err
	}
	if httpAddr != "" {
		if _, err := serveHTTP(s, httpAddr, reg, map[string]obs.HealthFunc{"nats": natsHealth(a.NC)}, a.Ready()); err != nil {
			return err
		}
	}
	env.Logger.Info(fmt.Sprintf("mrmarket agent %s: %s", host, h.about), "cpus", h.capacity, "nats", c.String("nats"), "state", state)
	if err := a.Run(c.Context); err != nil {
		return err
	}
	<-c.Context.Done()
	return nil
}

// libvirtFlags are the flags of a libvirt host (refused with --sim).
func libvirtFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "libvirt", Usage: "libvirt URI", Value: "qemu:///system", EnvVars: []string{"MRM_LIBVIRT_URI"}},
		&ucli.BoolFlag{Name: "hard-cap", Usage: "also cap each VM at its share with vcpu_quota (off: caps a former run left are removed)"},
		&ucli.StringFlag{Name: "disk-mode", Usage: "how disk shares are delivered: auto (throttle), throttle (per-VM caps of the measured bandwidth, " +
			"re-spread each tick), weights (blkio weights: only under BFQ), none", Value: "auto"},
		&ucli.StringFlag{Name: "disk-scheduler", Usage: "switch the block devices behind the managed domains' disks to this I/O scheduler at start (bfq, for --disk-mode weights; empty: leave them)"},
		&ucli.StringFlag{Name: "net-mode", Usage: "how network shares are delivered, both directions: auto (throttle), throttle (per-VM tap caps by tc " +
			"of the measured bandwidth, re-spread each tick; none when the host cannot shape taps), none", Value: "auto"},
		&ucli.UintFlag{Name: "link-kibps", Usage: "the link's speed per direction (KiB/s): network throttles never divide more (0: measured only)"},
		&ucli.UintFlag{Name: "disk-kibps", Usage: "the speed of the device the VMs' disks are on (KiB/s, reads and writes together; fio or dd with direct I/O " +
			"measures it): the disk throttle divides it (0: estimated from what the VMs move)"},
	}
}

// The libvirt agent's /readyz checks libvirt (daemon.Agent.Ready).
var _ daemon.Pinger = (*virt.Enforcer)(nil)

// libvirtHost checks the libvirt host's flags and returns how to open it.
func libvirtHost(c *ucli.Context, capacity float64) (func() (agentHost, error), error) {
	if err := onlyWith(c, "--sim", simOnly...); err != nil {
		return nil, err
	}
	if capacity == 0 {
		capacity = float64(runtime.NumCPU())
	}
	diskMode, netMode := c.String("disk-mode"), c.String("net-mode")
	switch diskMode {
	case "auto", wire.ModeThrottle, wire.ModeWeights, wire.ModeNone:
	default:
		return nil, wire.Errorf(wire.ErrBadRequest, "--disk-mode %q: want auto, throttle, weights or none", diskMode)
	}
	switch netMode {
	case "auto", wire.ModeThrottle, wire.ModeNone:
	default:
		return nil, wire.Errorf(wire.ErrBadRequest, "--net-mode %q: want auto, throttle or none", netMode)
	}
	return func() (agentHost, error) {
		cfg := virt.Config{URI: c.String("libvirt"), HostCPUs: capacity, HardCap: c.Bool("hard-cap"), LinkKiBps: c.Uint("link-kibps"),
			DiskKiBps: c.Uint("disk-kibps")}
		enf, err := virt.New(cfg)
		if err != nil {
			return agentHost{}, wire.Errorf(wire.ErrUnavailable, "%v", err)
		}
		devs, devErr := enf.DiskDevices("")
		if s := c.String("disk-scheduler"); s != "" && devErr == nil {
			for _, d := range devs {
				if err := virt.SetScheduler("", d.Name, s); err != nil {
					enf.Close()
					return agentHost{}, wire.Errorf(wire.ErrUnavailable, "--disk-scheduler: %v", err)
				}
			}
			devs, devErr = enf.DiskDevices("")
		}
		cfg.Disk, cfg.DiskWhy, err = chooseDiskMode(diskMode, devs, devErr)
		if err != nil {
			enf.Close()
			return agentHost{}, err
		}
		cfg.Net, cfg.NetWhy = wire.ModeThrottle, "per-VM tap caps (tc HTB; outbound through an IFB) of the measured bandwidth, re-spread each tick"
		if netMode == wire.ModeNone {
			cfg.Net, cfg.NetWhy = wire.ModeNone, "--net-mode none"
		} else if err := virt.CheckNetShaping(); err != nil {
			// Network shares nothing delivers are not shown as
			// delivered: without tc's shaping they are not governed.
			cfg.Net, cfg.NetWhy = wire.ModeNone, fmt.Sprintf("no tap shaping on this host: %v", err)
		}
		enf.SetModes(cfg.Disk, cfg.DiskWhy, cfg.Net, cfg.NetWhy)
		about := fmt.Sprintf("libvirt %s; disk shares: %s (%s); network shares: %s (%s)", c.String("libvirt"), cfg.Disk, cfg.DiskWhy, cfg.Net, cfg.NetWhy)
		return agentHost{enforcer: enf, capacity: capacity, about: about, close: func() { _ = enf.Close() }}, nil
	}, nil
}

// chooseDiskMode decides how disk shares are delivered, and says why, from
// the devices behind the managed domains' disks: weights only where every
// such device runs BFQ (the one scheduler that reads blkio weights), and
// only when asked, since even under BFQ they act only a while after a
// guest starts and invert for a while after a pause/resume
// (docs/PLATFORM.md); throttles otherwise. An operator is never shown disk shares
// nothing delivers: asking for weights where they cannot act is an error.
func chooseDiskMode(mode string, devs []virt.DiskDevice, devErr error) (string, string, error) {
	var schedulers []string
	weighs := devErr == nil
	for _, d := range devs {
		sched := d.Scheduler
		if sched == "" {
			sched = "scheduler unknown"
		}
		schedulers = append(schedulers, d.Name+" "+sched)
		weighs = weighs && d.Weighs()
	}
	seen := "no managed disk yet"
	if devErr != nil {
		seen = fmt.Sprintf("devices unknown: %v", devErr)
	} else if len(schedulers) > 0 {
		seen = strings.Join(schedulers, ", ")
	}
	cgroup := "cgroup v2 io controller absent"
	if virt.IOController("") {
		cgroup = "cgroup v2 io controller present"
	}
	switch mode {
	case wire.ModeNone:
		return wire.ModeNone, "--disk-mode none", nil
	case wire.ModeWeights:
		if !weighs || len(devs) == 0 {
			return "", "", wire.Errorf(wire.ErrBadRequest, "--disk-mode weights: blkio weights act only under BFQ, and the disks here are on %s (use --disk-scheduler bfq, or --disk-mode throttle)", seen)
		}
		return wire.ModeWeights, "blkio weights under BFQ: " + seen + "; " + cgroup, nil
	}
	return wire.ModeThrottle, "per-VM caps of the measured bandwidth, re-spread each tick; " + seen + "; " + cgroup, nil
}

// brokerCommand is `mrmarket broker`: the broker daemon.
func brokerCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "broker",
		Usage:     "run the broker: host prices, spend plans (run several: they share the load)",
		UsageText: "mrmarket broker --nats nats://nats-1:4222 --creds /etc/mrmarket/creds",
		Flags: []ucli.Flag{flagNATS(), flagCreds(), flagTLSCA(), flagAdminKey(),
			&ucli.DurationFlag{Name: "tick", Usage: "end plans and release their holds every", Value: defaultTick},
			&ucli.DurationFlag{Name: "settle", Usage: "wait after a plan's end for the agents' last captures", Value: 30 * time.Second},
			&ucli.StringFlag{Name: "http", Usage: "address for /metrics, /healthz and /readyz (empty: none)", Value: "127.0.0.1:9467"},
			&ucli.Float64Flag{Name: "deadline-share", Usage: "the share of its hosts an admitted job holds while it runs (0–0.95)", Value: 0.8},
			&ucli.StringFlag{Name: "job-order", Usage: "best-effort jobs' overlap order: maxsrpt, splitsrpt, klps or fifo", Value: "maxsrpt"},
		},
		Action: func(c *ucli.Context) error {
			if s := c.Float64("deadline-share"); !(s > 0 && s <= 0.95) {
				return badInput("--deadline-share must be in (0, 0.95], got %v", s)
			}
			switch c.String("job-order") {
			case "maxsrpt", "splitsrpt", "klps", "fifo":
			default:
				return badInput("--job-order %q: want maxsrpt, splitsrpt, klps or fifo", c.String("job-order"))
			}
			if c.Duration("tick") < tickMin || c.Duration("tick") > tickMax {
				return badInput("--tick must be between %s and %s", tickMin, tickMax)
			}
			signer, err := signing.CredsDir(c.String("creds")).Signer(wire.RoleBroker, "broker")
			if err != nil {
				return err
			}
			anchor, err := adminKey(c)
			if err != nil {
				return err
			}
			s := stop.New()
			defer s.Stop()
			reg := prometheus.NewRegistry()
			env := daemonEnv(c, s, anchor, reg)
			b, err := daemon.StartBroker(c.Context, daemon.BrokerConfig{Env: env, Signer: signer, Tick: c.Duration("tick"), Settle: c.Duration("settle"),
				DeadlineShare: c.Float64("deadline-share"), JobOrder: c.String("job-order")})
			if err != nil {
				return err
			}
			if addr := c.String("http"); addr != "" {
				if _, err := serveHTTP(s, addr, reg, map[string]obs.HealthFunc{"broker": b.Healthy}, b.Ready()); err != nil {
					return err
				}
			}
			env.Logger.Info("mrmarket broker on "+c.String("nats"), "replica", b.Replica())
			if err := b.Run(c.Context); err != nil {
				return err
			}
			<-c.Context.Done()
			return nil
		},
	}
}

// flagIdleBelow is the agents' idle threshold (mrmarket agent and up).
func flagIdleBelow() ucli.Flag {
	return &ucli.Float64Flag{Name: "idle-below", Value: 0.1,
		Usage: "a VM using less than this fraction of its entitlement (its share of the host, at most the CPUs it may run on) for 3 ticks is idle"}
}

func checkIdleBelow(c *ucli.Context) error {
	if f := c.Float64("idle-below"); !(f > 0 && f < 1) {
		return badInput("--idle-below must be between 0 and 1 (exclusive), got %v", f)
	}
	return nil
}
