package cli

import (
	"fmt"
	"maps"
	"net"
	neturl "net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

func demoCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "demo",
		Usage: "run the whole market in one process on a scripted scenario in simulated time",
		Description: "Starts an embedded NATS server, the bank on SQLite, the broker and two simulated\n" +
			"hosts in a temporary directory. alice spends twice bob's rate on VMs that share both\n" +
			"hosts; a background VM of user batch also pays on host-1. One simulated hour runs in\n" +
			"10-second ticks; then it prints prices, shares, spending and the ledger invariant.",
		Flags: outputFlags(),
		Action: func(c *ucli.Context) error {
			rep, err := market.RunDemo(c.Context)
			if err != nil {
				return err
			}
			if err := show(c, rep, printDemo); err != nil {
				return err
			}
			if len(rep.Ledger.Violations) > 0 {
				return wire.Errorf(wire.ErrInternal, "ledger invariant violated: %s", strings.Join(rep.Ledger.Violations, "; "))
			}
			return nil
		},
	}
}

func printDemo(w *out, rep *market.DemoReport) error {
	w.note("mrmarket demo: %d ticks of simulated time (%s), %s of wall time\n\n",
		rep.Ticks, span(rep.EndAt.D()), span(rep.Elapsed.D()))
	w.note("Spending:\n")
	t := w.table("  USER", "BUDGET", "DURATION", "VMS")
	for _, u := range []string{"alice", "bob", "batch"} {
		s := rep.Spends[u]
		t.row("  "+u, s.Budget.String(), span(s.Duration.D()), strings.Join(s.VMs, ","))
	}
	t.flush()

	w.note("\nAt t=%s — hosts (price = Σ rates):\n", span(rep.SnapshotAt.D()))
	t = w.table("  HOST", "PRICE")
	for _, h := range rep.Hosts {
		t.row("  "+h.Host, perHour(h.Price))
	}
	t.flush()
	w.note("\nAt t=%s — VMs (share = rate / price; CPU = what the simulated host gave it):\n", span(rep.SnapshotAt.D()))
	t = w.table("  HOST", "VM", "OWNER", "RATE", "SHARE", "CPU")
	for _, v := range rep.VMs {
		t.row("  "+v.Host, v.VM, v.Owner, perHour(v.Rate), pct(v.Share), pct(v.CPU))
	}
	t.flush()
	w.note("  alice's share / bob's share on host-2: %.4f (bids 2:1)\n", rep.Ratio)

	w.note("\nAt t=%s — plans ended, remainders released:\n", span(rep.EndAt.D()))
	t = w.table("  USER", "GRANTED", "SPENT", "BALANCE", "HELD")
	for _, u := range rep.Users {
		t.row("  "+u.User, u.Granted.String(), u.Spent.String(), u.Balance.String(), u.Held.String())
	}
	t.flush()
	w.note("\nLedger:\n")
	t = w.table("  ACCOUNT", "KIND", "BALANCE")
	for _, a := range rep.Ledger.Accounts {
		t.row("  "+a.ID, a.Kind, a.Balance.String())
	}
	t.flush()
	return printInvariant(w, rep.Ledger)
}

func upCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "up",
		Usage: "run a persistent local market: embedded NATS, bank, broker and simulated hosts",
		UsageText: "mrmarket up --data ./.data [--hosts 2] [--vms-per-host 2] [--users alice,bob]\n" +
			"   then, in another shell:  mrmarket vms; mrmarket bank grant --user alice --amount 100",
		Flags: []ucli.Flag{
			&ucli.StringFlag{Name: "data", Usage: "data directory (bank.db, nats/)", Value: ".data"},
			&ucli.IntFlag{Name: "hosts", Usage: "simulated hosts", Value: 2},
			&ucli.IntFlag{Name: "vms-per-host", Usage: "simulated VMs per host, owned round-robin by --users", Value: 2},
			&ucli.StringFlag{Name: "users", Usage: "comma-separated owners of the simulated VMs", Value: "alice,bob"},
			&ucli.StringFlag{Name: "listen", Usage: "NATS listen address of the embedded server", Value: "127.0.0.1:4222"},
			&ucli.StringFlag{Name: "nats", Usage: "join this NATS (cluster) instead of embedding one: URL[,URL,…], e.g. nats://n1:4222,nats://n2:4222,nats://n3:4222; " +
				"it must know the market's principals (mrmarket nats serve --data on this data directory); TLS verified with --tls-ca, else <data>/tls/ca.pem"},
			flagJSReplicas(),
			&ucli.StringFlag{Name: "http", Usage: "address for /metrics, /healthz and /readyz", Value: "127.0.0.1:9464"},
			&ucli.DurationFlag{Name: "tick", Usage: "agent tick period", Value: defaultTick},
			flagIdleBelow(),
		},
		Action: func(c *ucli.Context) error {
			var users []string
			for _, u := range strings.Split(c.String("users"), ",") {
				if u = strings.TrimSpace(u); u != "" {
					users = append(users, u)
				}
			}
			hosts, err := market.Layout(c.Int("hosts"), c.Int("vms-per-host"), users)
			if err != nil {
				return usageError{err}
			}
			if c.Duration("tick") < tickMin || c.Duration("tick") > tickMax {
				return badInput("--tick must be between %s and %s", tickMin, tickMax)
			}
			if err := checkIdleBelow(c); err != nil {
				return err
			}
			replicas, err := jsReplicas(c)
			if err != nil {
				return err
			}
			cfg := market.Config{
				Dir: c.String("data"), Hosts: hosts, Users: users, TickPeriod: c.Duration("tick"), AgentState: true,
				IdleBelow: c.Float64("idle-below"), JSReplicas: replicas, Logger: daemonLogger(c),
			}
			if url := c.String("nats"); url != "" {
				if c.IsSet("listen") {
					return badInput("--listen is the embedded server's; with --nats there is none")
				}
				if cfg.NATSURL, err = natsURLs(url); err != nil {
					return err
				}
				cfg.NATSCAFile = c.String("tls-ca")
			} else if cfg.NATSHost, cfg.NATSPort, err = splitHostPort(c.String("listen")); err != nil {
				return err
			}
			m, err := market.Start(c.Context, cfg)
			if err != nil {
				return err
			}
			defer m.Close()
			dash, err := upDashboard(c, m)
			if err != nil {
				return err
			}
			srv, err := obs.ServeWith(c.String("http"), m.Registry, m.Health(), dash)
			if err != nil {
				dash.Close()
				return err
			}
			srv.Ready(m.Ready()...)
			defer srv.Close()
			defer dash.Close() // before the server: it ends the live streams
			w := c.App.Writer
			fmt.Fprintf(w, "mrmarket is up: %d hosts, %d VMs each, data in %s\n", len(hosts), c.Int("vms-per-host"), c.String("data"))
			fmt.Fprintf(w, "  NATS     %s   (export MRM_NATS_URL=%s)\n", m.URL, m.URL)
			fmt.Fprintf(w, "  JetStream replicas: %s\n", replicasText(m.Replicas))
			fmt.Fprintf(w, "  creds    %s   (export MRM_CREDS=%s; each principal's NKey: it connects with it and signs every request that moves money)\n", m.Keys(), m.Keys())
			fmt.Fprintf(w, "  TLS CA   %s   (NATS requires TLS; the CLI finds the CA next to the creds, or export MRM_TLS_CA=%s)\n", m.CAFile, m.CAFile)
			fmt.Fprintf(w, "  metrics  http://%s/metrics   health  http://%s/healthz   ready  http://%s/readyz\n", srv.Addr(), srv.Addr(), srv.Addr())
			fmt.Fprintf(w, "  dashboard http://%s/\n", srv.Addr())
			printSignIn(w, dash, srv.Addr().String(), true)
			fmt.Fprintf(w, "try:\n  mrmarket vms\n  mrmarket bank grant --user %s --amount 100\n", users[0])
			if len(hosts) > 0 && len(hosts[0].VMs) > 0 {
				fmt.Fprintf(w, "  mrmarket spend --user %s --budget 10 --duration 10m --vm %s\n", hosts[0].VMs[0].Owner, hosts[0].VMs[0].ID)
			}
			fmt.Fprintf(w, "  mrmarket price; mrmarket balance --user %s; mrmarket ledger\nCtrl-C stops it.\n", users[0])
			m.Run(c.Context)
			fmt.Fprintln(w, "mrmarket: stopping")
			return nil
		},
	}
}

const (
	defaultTick = time.Second
	tickMin     = 10 * time.Millisecond
	tickMax     = 10 * time.Minute
)

// flagJSReplicas is --js-replicas of the commands that create the
// JetStream assets as the admin (up, nats assets).
func flagJSReplicas() *ucli.IntFlag {
	return &ucli.IntFlag{Name: "js-replicas", EnvVars: []string{natsutil.EnvReplicas},
		Usage: "replicas of the JetStream streams and buckets created (0: from the cluster — 3 on a cluster, 1 on one server)"}
}

// jsReplicas is --js-replicas, checked.
func jsReplicas(c *ucli.Context) (int, error) {
	n := c.Int("js-replicas")
	if n < 0 || n > natsutil.MaxReplicas {
		return 0, badInput("--js-replicas must be between 0 (from the cluster) and %d, got %d", natsutil.MaxReplicas, n)
	}
	return n, nil
}

// natsURLs checks a comma-separated list of NATS URLs (nats.go takes the
// list as it is and fails over between them).
func natsURLs(list string) (string, error) {
	var urls []string
	for _, u := range strings.Split(list, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		p, err := neturl.Parse(u)
		if err != nil || p.Host == "" || (p.Scheme != "nats" && p.Scheme != "tls") {
			return "", badInput("--nats %q: want nats://host:port or tls://host:port, comma-separated", u)
		}
		urls = append(urls, u)
	}
	if len(urls) == 0 {
		return "", badInput("--nats: no URL")
	}
	return strings.Join(urls, ","), nil
}

// replicasText says the replicas of the market's assets: "MRM_EVENTS R3, …".
func replicasText(r map[string]int) string {
	names := slices.Sorted(maps.Keys(r))
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s R%d", n, r[n])
	}
	return strings.Join(parts, ", ")
}

func splitHostPort(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, badInput("--listen %q: %v (want host:port)", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, badInput("--listen %q: port must be 1-65535", addr)
	}
	return h, port, nil
}
