package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/dashboard"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

// defaultDashboard is where `mrmarket dashboard` listens: beside up's
// metrics port (9464), which serves up's own dashboard.
const defaultDashboard = "127.0.0.1:9465"

func dashboardCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "dashboard",
		Usage: "serve the web dashboard: host prices over time, VMs and shares, balances, plans, deadline jobs, events — live",
		UsageText: "mrmarket dashboard [--listen " + defaultDashboard + "] [--nats URL] [--creds DIR]\n" +
			"   mrmarket dashboard login [--user alice] [--url http://" + defaultDashboard + "]",
		Description: "Serves the market as one principal sees it, in a browser, updated within a second or two of a change:\n" +
			"each host's price over time; each VM's owner, rate, share, CPU used and disk and network caps; balances\n" +
			"and holds; plans with budget, spent, released and time left; deadline jobs with deadline, predicted\n" +
			"finish, progress and risk; the audit events (admin). `mrmarket up` serves the same on its --http address.\n\n" +
			"It acts as the principals whose keys are in --creds (admin.nk, users/<name>.nk): every request to the\n" +
			"market is signed with the signed-in principal's key, so the market decides what each sees — a user\n" +
			"their own money and of the others' VMs one row per host, the admin everything. A browser signs in with a\n" +
			"one-time link that the principal's key signs: `mrmarket dashboard login [--user NAME]`, run where the key\n" +
			"is, prints it (valid 10 minutes, once); no key ever reaches the browser. It listens on 127.0.0.1 by\n" +
			"default, over plain HTTP: put TLS in front before listening elsewhere. /healthz and /metrics are served too.",
		Flags: []ucli.Flag{flagNATS(), flagCreds(), flagAdminKey(),
			&ucli.StringFlag{Name: "listen", Usage: "address to serve the dashboard on", Value: defaultDashboard},
			&ucli.StringSliceFlag{Name: "host-name", Usage: "a name the browser may reach it by, besides IP addresses and localhost (repeatable)"},
		},
		Action:      serveDashboard,
		Subcommands: []*ucli.Command{dashboardLoginCommand()},
	}
}

func dashboardLoginCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "login",
		Usage: "print a one-time link that signs a browser in to the dashboard as you",
		UsageText: "mrmarket dashboard login [--user alice] [--url http://127.0.0.1:9464]\n\n" +
			"Signs a sign-in token with the principal's key — --user's (users/<name>.nk in --creds), else the\n" +
			"admin's — and prints the link. The link signs in once, within 10 minutes, at a dashboard that holds\n" +
			"the same key. --url is the dashboard's address: up's --http (default http://127.0.0.1:9464), or\n" +
			"`mrmarket dashboard`'s --listen (http://" + defaultDashboard + ").",
		Flags: []ucli.Flag{flagCreds(), flagUser(),
			&ucli.StringFlag{Name: "url", Usage: "the dashboard's address", Value: "http://127.0.0.1:9464"},
		},
		Action: func(c *ucli.Context) error {
			signer, who, err := connPrincipal(c, credsDir(c))
			if err != nil {
				return err
			}
			if !strings.HasPrefix(c.String("url"), "http://") && !strings.HasPrefix(c.String("url"), "https://") {
				return badInput("--url %q: want http://host:port", c.String("url"))
			}
			tok, err := dashboard.LoginToken(signer, who)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(c.App.Writer, dashboard.LoginLink(c.String("url"), tok))
			return err
		},
	}
}

// serveDashboard is `mrmarket dashboard`: the dashboard of the market at
// --nats, acting as the principals of --creds.
func serveDashboard(c *ucli.Context) error {
	keys := credsDir(c)
	anchor := clientAdminKey(c)
	if anchor == "" {
		return badInput("no admin key: pass --admin-key (or MRM_ADMIN_KEY) or put admin.pub in --creds %s: "+
			"the dashboard believes only answers the bank and brokers the admin sealed", keys)
	}
	held := heldPrincipals(keys)
	if len(held) == 0 {
		return badInput("--creds %s holds no admin.nk and no users/<name>.nk: the dashboard could act as nobody", keys)
	}
	url, ca := setting(c, "nats"), tlsCA(c, keys)
	cfg := dashboard.Config{Keys: keys, AdminKey: anchor, Hosts: c.StringSlice("host-name"), Logger: daemonLogger(c),
		Connect: func(name string, s *signing.Signer) (*nats.Conn, error) {
			nc, err := natsutil.ConnectWith(url, natsutil.ConnectOptions{Name: name, Signer: s, CAFile: ca})
			if err != nil {
				return nil, connectError(url, err)
			}
			return nc, nil
		}}
	if slices.Contains(held, wire.RoleAdmin) {
		cfg.Warm = []rpc.As{{Role: wire.RoleAdmin, Name: wire.RoleAdmin}}
	}
	d, err := dashboard.New(cfg)
	if err != nil {
		return err
	}
	srv, err := obs.ServeWith(c.String("listen"), prometheus.NewRegistry(), map[string]obs.HealthFunc{"dashboard": d.Healthy}, d)
	if err != nil {
		d.Close()
		return err
	}
	defer srv.Close()
	defer d.Close() // before the server: it ends the live streams, which the server's Close would wait on
	w := c.App.Writer
	fmt.Fprintf(w, "mrmarket dashboard on http://%s/ for the market at %s, acting as: %s\n", srv.Addr(), url, strings.Join(held, ", "))
	// The admin's link only to a person's terminal: run as a service, this
	// output is a journal that others may read within the link's lifetime.
	printSignIn(w, d, srv.Addr().String(), slices.Contains(held, wire.RoleAdmin) && isTerminal(w))
	<-c.Context.Done()
	return nil
}

// heldPrincipals names the principals whose keys are in keys: the admin
// and the users.
func heldPrincipals(keys signing.CredsDir) []string {
	var held []string
	if _, err := keys.Signer(wire.RoleAdmin, wire.RoleAdmin); err == nil {
		held = append(held, wire.RoleAdmin)
	}
	ents, _ := os.ReadDir(filepath.Join(string(keys), "users"))
	for _, e := range ents {
		if name, ok := strings.CutSuffix(e.Name(), ".nk"); ok && !e.IsDir() && wire.CheckName("user", name) == nil {
			held = append(held, name)
		}
	}
	return held
}

// printSignIn tells how to sign in to d at addr: the admin's one-time
// link when d holds the admin's key, and the command that makes others.
func printSignIn(w io.Writer, d *dashboard.Dashboard, addr string, admin bool) {
	base := "http://" + addr
	if admin {
		if link, err := d.LoginLink(base, rpc.As{Role: wire.RoleAdmin, Name: wire.RoleAdmin}); err == nil {
			fmt.Fprintf(w, "  sign in as the admin (once, within %.0f minutes): %s\n", dashboard.LoginTTL.Minutes(), link)
		}
	}
	fmt.Fprintf(w, "  sign in later, or as a user: mrmarket dashboard login --url %s [--user NAME]\n", base)
}

// upDashboard is up's dashboard of market m, served on up's --http
// address: it acts as the market's admin and users (m's credentials), and
// its admin view starts with the market.
func upDashboard(c *ucli.Context, m *market.Market) (*dashboard.Dashboard, error) {
	return dashboard.New(dashboard.Config{Keys: m.Keys(), AdminKey: m.AdminKey(), Logger: daemonLogger(c),
		Warm: []rpc.As{{Role: wire.RoleAdmin, Name: wire.RoleAdmin}},
		Connect: func(name string, s *signing.Signer) (*nats.Conn, error) {
			return natsutil.ConnectWith(m.URL, natsutil.ConnectOptions{Name: name, Signer: s, CAFile: m.CAFile})
		}})
}
