package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/internal/natsauth"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/stop"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

// natsCommand is `mrmarket nats`: the configuration of a standalone
// nats-server (or a cluster node) for the market.
func natsCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "nats",
		Usage: "configure a standalone nats-server (or cluster) for the market",
		Subcommands: []*ucli.Command{{
			Name:  "config",
			Usage: "print a nats-server configuration: TLS, JetStream, limits, and one NKey user per principal with its permissions",
			UsageText: "mrmarket nats config --data .data > mrmarket.conf && nats-server -c mrmarket.conf\n" +
				"   mrmarket nats config --store postgres://… --creds /etc/mrmarket/creds --tls /etc/mrmarket/tls --out /etc/nats/mrmarket.conf\n" +
				"   after `mrmarket bank principal add`, `revoke` or `rotate`: regenerate, then nats-server --signal reload (or use --follow)",
			Description: "The users are the principals of the bank's registry (--store) and the credentials in --creds\n" +
				"(admin.nk, bank.nk, broker.nk, agents/<host>.nk, users/<name>.nk). The TLS certificate and\n" +
				"CA in --tls are created when missing (names: 127.0.0.1, ::1, localhost, this host, --tls-name).\n" +
				"With --out and --follow the file is rewritten whenever a principal is added or revoked, and the\n" +
				"server whose pid is in --pid-file is told to reload (SIGHUP): a revoked key's connections close.",
			Flags: append(natsConfigFlags(),
				&ucli.StringFlag{Name: "out", Usage: "write the configuration to this file (atomically) instead of stdout"},
				&ucli.DurationFlag{Name: "follow", Usage: "with --out: check the registry this often and rewrite the file when it changes (0: once)"},
				&ucli.StringFlag{Name: "pid-file", Usage: "with --follow: the nats-server's pid file (nats-server -P); it is sent SIGHUP after each rewrite"},
			),
			Action: natsConfig,
		}, natsServeCommand(), natsAssetsCommand()},
	}
}

// natsAssetsCommand is `mrmarket nats assets`: the admin creates the
// market's streams and buckets, which the daemons may only open.
func natsAssetsCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "assets",
		Usage: "create (or raise the replicas of) the market's JetStream streams and buckets, as the admin",
		UsageText: "mrmarket nats assets --nats tls://nats-1:4222,tls://nats-2:4222,tls://nats-3:4222 --creds ./creds --tls-ca ./tls/ca.pem\n" +
			"   once the NATS nodes are up, before the banks, brokers and agents (they wait for these, up to a minute)",
		Description: "Connects with the admin's key (admin.nk in --creds): the only principal NATS lets create,\n" +
			"update, delete or purge a stream. Creates MRM_HOSTS, MRM_PLANS, MRM_NONCES and MRM_EVENTS, or\n" +
			"opens them and raises their replicas (3 on a cluster, 1 on one server, or --js-replicas).\n" +
			"Run it again after adding NATS nodes, or to make again a bucket that was deleted.",
		Flags:  []ucli.Flag{flagNATS(), flagCreds(), flagTLSCA(), flagJSReplicas(), flagJSON()},
		Action: natsAssets,
	}
}

func natsAssets(c *ucli.Context) error {
	replicas, err := jsReplicas(c)
	if err != nil {
		return err
	}
	url, keys := setting(c, "nats"), credsDir(c)
	admin, err := keys.Signer(wire.RoleAdmin, "admin")
	if err != nil {
		return fmt.Errorf("%w (the admin's key creates the assets)", err)
	}
	ca, err := checkCA(c, keys)
	if err != nil {
		return err
	}
	nc, err := natsutil.ConnectWith(url, natsutil.ConnectOptions{Name: "mrmarket-nats-assets", Signer: admin, CAFile: ca, Timeout: 3 * time.Second})
	if err != nil {
		return clientConnectError(url, ca, keys, err)
	}
	defer nc.Close()
	if err := natsutil.SetReplicas(nc, replicas); err != nil {
		return badInput("--js-replicas: %v", err)
	}
	assets, err := natsutil.EnsureAssets(c.Context, nc)
	if err != nil {
		return wire.Errorf(wire.ErrUnavailable, "%v", err)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, struct {
			Replicas map[string]int `json:"replicas"`
		}{assets.Replicas})
	}
	fmt.Fprintf(c.App.Writer, "mrmarket nats assets: %s\n", replicasText(assets.Replicas))
	return nil
}

// natsConfigFlags are the flags of the configuration, shared by `nats
// config` and `nats serve`.
func natsConfigFlags() []ucli.Flag {
	return []ucli.Flag{
		&ucli.StringFlag{Name: "data", Usage: "a market data directory: its creds/, tls/ and bank.db", Value: ".data"},
		&ucli.StringFlag{Name: "creds", Usage: "credentials directory (default <data>/creds)"},
		&ucli.StringFlag{Name: "tls", Usage: "TLS directory: ca.pem, server.pem, server-key.pem (default <data>/tls; created when missing)"},
		&ucli.StringSliceFlag{Name: "tls-name", Usage: "another name or IP of the server in its certificate (repeat)"},
		&ucli.BoolFlag{Name: "no-tls", Usage: "no TLS (not recommended)"},
		&ucli.StringFlag{Name: "store", Usage: "the bank's store to read principals from (default sqlite:<data>/bank.db when it exists)", EnvVars: []string{"MRM_BANK_STORE"}},
		&ucli.StringFlag{Name: "listen", Usage: "client listen address", Value: "0.0.0.0:4222"},
		&ucli.StringFlag{Name: "name", Usage: "server name (unique per cluster node)", Value: "mrmarket"},
		&ucli.StringFlag{Name: "store-dir", Usage: "JetStream directory (default <data>/nats-server)"},
		&ucli.StringFlag{Name: "cluster-name", Usage: "cluster name", Value: "mrmarket"},
		&ucli.StringFlag{Name: "cluster-listen", Usage: "route listen address (makes this a cluster node), e.g. 0.0.0.0:6222"},
		&ucli.StringSliceFlag{Name: "route", Usage: "a node's route URL, nats-route://host:6222 (repeat; every node of the cluster, this one included, is fine)"},
	}
}

// natsServeCommand is `mrmarket nats serve`: one node of the market's
// NATS (cluster), the embedded nats-server run from the configuration
// `nats config` writes, so a cluster needs no other binary.
func natsServeCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "serve",
		Usage: "run one NATS server (a cluster node) for the market: JetStream, routes, the principals' NKey users and TLS",
		UsageText: "mrmarket nats serve --data .data --name n1 --listen 0.0.0.0:4222 --cluster-listen 0.0.0.0:6222 \\\n" +
			"     --route nats-route://n1:6222 --route nats-route://n2:6222 --route nats-route://n3:6222 --tls-name n1 --tls-name n2 --tls-name n3\n" +
			"   (the same on n2 and n3 with their --name; then: mrmarket up --nats nats://n1:4222,nats://n2:4222,nats://n3:4222)",
		Description: "Writes the configuration `mrmarket nats config` prints to --conf and runs the embedded\n" +
			"nats-server from that file: what it runs is what a real nats-server given the file runs.\n" +
			"Every --follow it reads the principals again; when they changed it rewrites the file and\n" +
			"reloads (new principals connect, revoked keys are disconnected). It holds each principal's key\n" +
			"to its role's connection limit (closing the connections beyond: nats-server has none per user).\n" +
			"The streams and buckets are the admin's to create: mrmarket nats assets. JetStream clustering needs\n" +
			"--route on every node (listing every node, itself included, is the simplest). Nodes share\n" +
			"one TLS directory (copy <data>/tls to every node; --tls-name every node's name when it is\n" +
			"first created): routes use the same certificate, verified both ways.",
		Flags: append(natsConfigFlags(),
			&ucli.StringFlag{Name: "conf", Usage: "where the configuration is written (default <data>/nats-<name>.conf)"},
			&ucli.DurationFlag{Name: "follow", Usage: "check the registry this often and reload when it changes (0: never)", Value: 5 * time.Second},
			&ucli.BoolFlag{Name: "quiet", Usage: "no server log on stderr"},
			&ucli.DurationFlag{Name: "election-timeout", Value: natsutil.FastFailover.MinElection,
				Usage: "JetStream raft: elect a new leader after this long (to twice it) without the old one's heartbeat, when its routes stay open (a dead process's close, and a survivor campaigns at once); 0: nats-server's 4–9 s"},
		),
		Action: natsServe,
	}
}

func natsServe(c *ucli.Context) error {
	render, limits, opts, err := natsRenderer(c)
	if err != nil {
		return err
	}
	if e := c.Duration("election-timeout"); e != 0 {
		// A dead leader's streams pause until a follower's election
		// timeout: see natsutil.RaftTimers.
		if err := natsutil.SetRaftTimers(natsutil.RaftTimers{Heartbeat: e / 3, MinElection: e, MaxElection: 2 * e}); err != nil {
			return badInput("--election-timeout %s: %v", e, err)
		}
	}
	conf := orDefault(c.String("conf"), filepath.Join(c.String("data"), "nats-"+opts.Name+".conf"))
	node, err := natsutil.StartNode(c.Context, natsutil.NodeOptions{File: conf, Render: render, ConnLimits: limits, Log: !c.Bool("quiet")})
	if err != nil {
		return wire.Errorf(wire.ErrUnavailable, "%v", err)
	}
	s := stop.New()
	defer s.Stop()
	s.AddCloser(node.Shutdown)
	log := daemonLogger(c)
	about := []any{"clients", node.Server.ClientURL(), "config", conf}
	if addr := node.Server.ClusterAddr(); addr != nil {
		about = append(about, "routes", addr.String(), "cluster", opts.ClusterName, "jetstream", opts.StoreDir)
	}
	log.Info("mrmarket nats serve: node "+opts.Name, about...)
	if every := c.Duration("follow"); every > 0 {
		// A failed refresh keeps the node on its last good configuration;
		// the next one tries again.
		follow := stop.Ticker{Component: "nats serve", Period: every, Logger: log}
		err := s.RunTicker(c.Context, "nats serve follow", follow, func(ctx context.Context, _ time.Time) error {
			if _, err := node.Refresh(ctx); err != nil {
				return fmt.Errorf("keeping the last configuration: %w", err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	<-c.Context.Done()
	log.Info("mrmarket nats serve: stopping")
	return nil
}

// natsRenderer reads the configuration flags and returns what renders the
// configuration of the principals as they are now (`nats config` prints
// it, `nats serve` runs it), the connection limits of the principals it
// rendered last (what `nats serve` enforces beyond the file), and the
// options without the users.
func natsRenderer(c *ucli.Context) (func(context.Context) ([]byte, error), func() map[string]int, natsauth.ConfigOptions, error) {
	data := c.String("data")
	opts := natsauth.ConfigOptions{
		Name: c.String("name"), Listen: c.String("listen"), StoreDir: orDefault(c.String("store-dir"), filepath.Join(data, "nats-server")),
		MaxPayload: natsutil.DefaultLimits.MaxPayload, MaxPending: natsutil.DefaultLimits.MaxPending,
		MaxSubs: natsutil.DefaultLimits.MaxSubs, MaxConn: natsutil.DefaultLimits.MaxConn,
	}
	if l := c.String("cluster-listen"); l != "" {
		opts.ClusterName, opts.ClusterListen, opts.Routes = c.String("cluster-name"), l, c.StringSlice("route")
	} else if len(c.StringSlice("route")) > 0 {
		return nil, nil, opts, badInput("--route needs --cluster-listen (the node's own route address)")
	}
	if !c.Bool("no-tls") {
		files, err := natsauth.EnsureTLS(orDefault(c.String("tls"), filepath.Join(data, "tls")), c.StringSlice("tls-name")...)
		if err != nil {
			return nil, nil, opts, err
		}
		for _, f := range []*string{&files.CA, &files.Cert, &files.Key} {
			if abs, err := filepath.Abs(*f); err == nil {
				*f = abs
			}
		}
		if opts.ClusterListen != "" {
			if err := natsauth.CheckRouteCert(files); err != nil {
				return nil, nil, opts, err
			}
		}
		opts.TLS = files
	}
	if abs, err := filepath.Abs(opts.StoreDir); err == nil {
		opts.StoreDir = abs
	}
	keys := signing.CredsDir(orDefault(c.String("creds"), filepath.Join(data, "creds")))
	var mu sync.Mutex
	var limits map[string]int
	render := func(ctx context.Context) ([]byte, error) {
		store := c.String("store")
		if store == "" { // looked for each time: a node may start before the bank
			if db := filepath.Join(data, "bank.db"); fileExists(db) {
				store = "sqlite:" + db
			}
		}
		ps, err := configPrincipals(ctx, store, keys)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		limits = natsauth.ConnLimits(ps)
		mu.Unlock()
		o := opts
		o.Users = natsauth.Users(market.NATSTables(), ps)
		o.Who = map[string]string{}
		for _, p := range ps {
			o.Who[p.Key] = p.Role + " " + p.Name
		}
		var buf bytes.Buffer
		err = natsauth.Config(&buf, o)
		return buf.Bytes(), err
	}
	connLimits := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return limits
	}
	return render, connLimits, opts, nil
}

func natsConfig(c *ucli.Context) error {
	r, _, _, err := natsRenderer(c)
	if err != nil {
		return err
	}
	render := func() ([]byte, error) { return r(c.Context) }
	out := c.String("out")
	if out == "" {
		if c.Duration("follow") > 0 {
			return badInput("--follow needs --out")
		}
		conf, err := render()
		if err != nil {
			return err
		}
		_, err = c.App.Writer.Write(conf)
		return err
	}
	var last []byte
	for {
		conf, err := render()
		if err != nil {
			return err
		}
		if !bytes.Equal(conf, last) {
			if err := writeAtomic(out, conf); err != nil {
				return err
			}
			if last != nil {
				if err := signalReload(c.String("pid-file")); err != nil {
					return err
				}
			}
			fmt.Fprintf(c.App.ErrWriter, "mrmarket nats config: wrote %s\n", out)
			last = conf
		}
		if c.Duration("follow") <= 0 {
			return nil
		}
		select {
		case <-c.Context.Done():
			return nil
		case <-time.After(c.Duration("follow")):
		}
	}
}

// configPrincipals are the live principals of the bank's store (when
// given) and of the credentials in keys; the registry's role wins for a
// key in both, and a key the registry revoked is left out even when its
// credentials file is still there.
func configPrincipals(ctx context.Context, store string, keys signing.CredsDir) ([]wire.Principal, error) {
	byKey := map[string]wire.Principal{}
	revoked := map[string]bool{}
	if store != "" {
		b, err := bank.Open(store, bank.Options{})
		if err != nil {
			return nil, wire.Errorf(wire.ErrUnavailable, "reading principals: %v", err)
		}
		rep, err := b.ListPrincipals(ctx, &wire.PrincipalsRequest{})
		b.Close()
		if err != nil {
			return nil, wire.Errorf(wire.ErrUnavailable, "reading principals: %v", err)
		}
		for _, p := range rep.Principals {
			if p.Revoked != nil {
				revoked[p.Key] = true
				continue
			}
			byKey[p.Key] = wire.Principal{Key: p.Key, Name: p.Name, Role: p.Role}
		}
	}
	add := func(path, role, name string) {
		s, err := signing.LoadSigner(path)
		if err != nil || revoked[s.Public()] {
			return
		}
		if _, ok := byKey[s.Public()]; !ok {
			byKey[s.Public()] = wire.Principal{Key: s.Public(), Name: name, Role: role}
		}
	}
	add(filepath.Join(string(keys), "admin.nk"), wire.RoleAdmin, "admin")
	add(filepath.Join(string(keys), "bank.nk"), wire.RoleBank, "bank")
	add(filepath.Join(string(keys), "broker.nk"), wire.RoleBroker, "broker")
	for dir, role := range map[string]string{"agents": wire.RoleAgent, "users": wire.RoleUser} {
		ents, _ := os.ReadDir(filepath.Join(string(keys), dir))
		for _, e := range ents {
			if name, ok := strings.CutSuffix(e.Name(), ".nk"); ok && !e.IsDir() && wire.CheckName(role, name) == nil {
				add(filepath.Join(string(keys), dir, e.Name()), role, name)
			}
		}
	}
	out := make([]wire.Principal, 0, len(byKey))
	for _, p := range byKey {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// signalReload tells the nats-server whose pid is in pidFile to reload its
// configuration (what nats-server --signal reload does).
func signalReload(pidFile string) error {
	if pidFile == "" {
		return nil
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return fmt.Errorf("--pid-file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return fmt.Errorf("--pid-file %s: not a pid", pidFile)
	}
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		return fmt.Errorf("reloading nats-server %d: %w", pid, err)
	}
	return nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
