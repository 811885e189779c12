// Package market wires a whole mrmarket into one process: an embedded NATS
// server (or an external one), the bank on SQLite, the broker, and one agent
// per simulated host, each built by package daemon exactly as the separate
// daemons are, on its own NATS connection. It is assembly only: every
// decision is made by the agent, bank and broker packages, and every
// daemon's wiring by package daemon. What is the market's own: the data
// directory (its lock, credentials and TLS), registering every principal
// before the embedded NATS server starts (it admits exactly them, each
// within its role's connection limit), the admin's part (it holds the
// admin's key: it creates the JetStream assets the daemons only open, and
// makes the plans bucket again if it is deleted), and driving time.
// Everything it starts belongs to one stop.Stopper, which Close stops.
//
// The simulated VMs run the jobs users submit to the deadline service, as
// the users' Hadoop clusters would, and report their progress (jobs.go).
//
// Two ways to drive time:
//   - Run ticks every component on the wall clock (mrmarket up).
//   - Tick(now) ticks every component once at a virtual time and waits until
//     the broker has heard every host's state, so a scripted scenario (mrmarket
//     demo, end-to-end tests) is deterministic.
package market

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/daemon"
	"github.com/mrmarket/mrmarket/internal/natsauth"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/stop"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// HostSpec is one simulated host: its id, CPUs, and VMs with their owners.
type HostSpec struct {
	ID   string
	CPUs float64
	VMs  []agent.VM
}

// Config configures a market.
type Config struct {
	// Dir is the data directory: nats/ (JetStream) and bank.db live there.
	Dir string
	// NATSURL connects to an external NATS (cluster) instead of starting
	// one: a URL, or several comma-separated (every node of a cluster, so
	// the components fail over). Its users must include the market's
	// principals (mrmarket nats serve/config --follow on the same data
	// directory); connections refused for authorization are retried for
	// NATSWait while the server learns them.
	NATSURL string
	// NATSWait bounds those retries; default 30s.
	NATSWait time.Duration
	// JSReplicas overrides the replicas of the JetStream assets the market
	// creates as the admin (natsutil.SetReplicas); 0: from the cluster.
	JSReplicas int
	// NATSHost and NATSPort are where the embedded server listens
	// (port -1 = a free port, 0 = 4222).
	NATSHost string
	NATSPort int
	// Hosts are the simulated hosts and their VMs.
	Hosts []HostSpec
	// Users get credentials and a principal record whether or not they own
	// a VM (the VMs' owners get theirs anyway): `up --users`.
	Users []string
	// Now is the clock; nil means the wall clock. With a virtual clock, drive
	// the market with Tick.
	Now func() time.Time
	// TickPeriod is the agents' tick on the wall clock (Run), default 1s.
	TickPeriod time.Duration
	// Settle is how long after a plan's end the broker waits before
	// releasing its remainder; default 3 ticks.
	Settle time.Duration
	// AgentState keeps each agent's bid book in Dir/agents across restarts
	// (mrmarket up); it costs an fsync per tick per agent.
	AgentState bool
	// NATSCAFile verifies an external NATS's TLS certificate (with
	// NATSURL); empty: Dir/tls/ca.pem when it exists, else no TLS.
	NATSCAFile string
	// IdleBelow is the agents' idle threshold, a fraction of a VM's
	// entitlement (agent.Config.IdleBelow); 0 means the agents' default.
	IdleBelow float64
	// Logger hears every component: plans started and ended, requests
	// refused, restarts, failed ticks (`mrmarket up` logs to stderr). nil
	// discards them: the demo prints only its report.
	Logger *slog.Logger
}

// Layout makes hosts host-1…host-n, each with perHost VMs named
// h<i>-vm<k>, owned round-robin by users.
func Layout(hosts, perHost int, users []string) ([]HostSpec, error) {
	if hosts < 1 || hosts > 10000 {
		return nil, fmt.Errorf("hosts must be between 1 and 10000, got %d", hosts)
	}
	if perHost < 0 || perHost > 1000 {
		return nil, fmt.Errorf("VMs per host must be between 0 and 1000, got %d", perHost)
	}
	if len(users) == 0 && perHost > 0 {
		return nil, errors.New("at least one user is needed to own the VMs")
	}
	for _, u := range users {
		if err := wire.CheckName("user", u); err != nil {
			return nil, err
		}
	}
	specs := make([]HostSpec, hosts)
	for h := range specs {
		specs[h] = HostSpec{ID: fmt.Sprintf("host-%d", h+1), CPUs: 1}
		for k := range perHost {
			specs[h].VMs = append(specs[h].VMs, agent.VM{
				ID:    fmt.Sprintf("h%d-vm%d", h+1, k+1),
				Owner: users[k%len(users)],
			})
		}
	}
	return specs, nil
}

// Market is a running market.
type Market struct {
	cfg      Config
	URL      string
	Server   *server.Server // nil with an external NATS
	Bank     *bank.Bank
	Broker   *broker.Broker
	Agents   []*agent.Agent
	Sims     map[string]*agent.SimEnforcer // by host
	Registry *prometheus.Registry
	Metrics  *obs.Metrics
	// CAFile is the CA that verifies the NATS server's certificate: the
	// embedded server's own (Dir/tls/ca.pem), or Config.NATSCAFile.
	CAFile string
	// Replicas are the replica counts of the JetStream assets the market
	// created or opened as the admin, by name (MRM_HOSTS, …).
	Replicas map[string]int
	conns    []*nats.Conn
	stopper  *stop.Stopper
	env      daemon.Env // what every component is built with
	bankd    *daemon.Bank
	brokerd  *daemon.Broker
	agentsd  []*daemon.Agent
	// shared are the caches the agents share (agent.Config.Shared).
	shared *agent.Shared
	// stops are closed with the market, last added first, before the
	// connections they use: the job runner's consumer adds its own.
	stops    []func()
	keys     signing.CredsDir
	agentKey map[string]*signing.Signer // by host, registered before NATS starts
	// agentStop stops each agent alone (RestartAgent), by host; runCtx is
	// Run's, for an agent restarted while the market runs.
	agentStop map[string]*stop.Stopper
	runMu     sync.Mutex
	runCtx    context.Context

	// natsMu guards the embedded server's options across reloads (a
	// principal added at the bank) and Close.
	natsMu   sync.Mutex
	natsOpts natsutil.ServerOptions
	admin    *signing.Signer // the trust anchor: seals every principal record
	adminNC  *nats.Conn      // the admin's connection: the JetStream assets
	jobs     *jobRunner      // the simulated Hadoop that runs admitted jobs (jobs.go)
}

// Keys are the market's credentials (admin, broker, agents, the VM owners),
// in the data directory's creds/.
func (m *Market) Keys() signing.CredsDir { return m.keys }

// Start starts the market. On error everything started so far is stopped.
func Start(ctx context.Context, cfg Config) (m *Market, err error) {
	if cfg.Dir == "" {
		return nil, errors.New("market: a data directory is required")
	}
	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("market: data directory: %w", err)
	}
	if cfg.TickPeriod <= 0 {
		cfg.TickPeriod = time.Second
	}
	if cfg.Settle <= 0 {
		cfg.Settle = 3 * cfg.TickPeriod
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	unlock, err := lockDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	m = &Market{cfg: cfg, Sims: map[string]*agent.SimEnforcer{}, Registry: reg, Metrics: obs.NewMetrics(reg), stopper: stop.New(),
		shared: agent.NewShared()}
	m.stopper.AddCloser(unlock) // last: everything on the directory is closed
	m.env = daemon.Env{Stopper: m.stopper, Connect: m.connect, Metrics: m.Metrics, Logger: cfg.Logger, Now: now, AssetsWait: 10 * time.Second}
	started := m // every `return nil, err` below clears m before this runs
	defer func() {
		if err != nil {
			started.Close()
		}
	}()
	// Identities first: the NATS server admits exactly the registered
	// principals, each with its role's permissions (package natsauth).
	if err := m.openBank(); err != nil {
		return nil, err
	}
	brokerSigner, err := m.registerIdentities(ctx)
	if err != nil {
		return nil, err
	}
	if err := m.registerAgents(ctx); err != nil {
		return nil, err
	}
	if err := m.startNATS(ctx); err != nil {
		return nil, err
	}
	if err := m.ensureAssets(ctx); err != nil {
		return nil, err
	}
	if err := m.serveBank(ctx); err != nil {
		return nil, err
	}
	if err := m.startAgents(ctx, now); err != nil {
		return nil, err
	}
	if err := m.startBroker(ctx, brokerSigner); err != nil {
		return nil, err
	}
	// Every agent publishes its first state so the broker knows the VMs.
	t0 := now()
	if err := m.tickAgents(ctx, t0); err != nil {
		return nil, err
	}
	if err := m.awaitBroker(ctx, t0); err != nil {
		return nil, err
	}
	if err := m.startJobs(ctx); err != nil {
		return nil, err
	}
	m.stopper.AddCloser(func() {
		for i := len(m.stops) - 1; i >= 0; i-- {
			m.stops[i]()
		}
	})
	return m, nil
}

// NATSTables are the service tables' listings that NATS permissions are
// generated from (natsauth.Users).
func NATSTables() natsauth.Tables {
	return natsauth.Tables{Bank: bank.Endpoints(nil).List(), Broker: broker.Endpoints(nil).List(), Agent: agent.Endpoints(nil).List()}
}

// startNATS starts the embedded server, unless the market uses an
// external one: TLS with the data directory's CA and server certificate
// (created on first start, reused after), and one NKey user per registered
// principal with its role's permissions.
func (m *Market) startNATS(ctx context.Context) error {
	m.URL = m.cfg.NATSURL
	if m.URL != "" {
		m.CAFile = m.cfg.NATSCAFile
		if ca := natsauth.TLSDir(filepath.Join(m.cfg.Dir, "tls")).CA; m.CAFile == "" && fileExists(ca) {
			m.CAFile = ca
		}
		return nil
	}
	files, err := natsauth.EnsureTLS(filepath.Join(m.cfg.Dir, "tls"), m.cfg.NATSHost)
	if err != nil {
		return err
	}
	tlsConf, err := natsauth.ServerConfig(files)
	if err != nil {
		return err
	}
	users, limits, err := m.natsUsers(ctx)
	if err != nil {
		return err
	}
	m.natsMu.Lock()
	defer m.natsMu.Unlock()
	m.natsOpts = natsutil.ServerOptions{Dir: filepath.Join(m.cfg.Dir, "nats"), Host: m.cfg.NATSHost, Port: m.cfg.NATSPort, Users: users, TLS: tlsConf,
		ConnLimits: limits, Logger: m.cfg.Logger}
	ns, err := natsutil.StartServer(m.natsOpts)
	if err != nil {
		return err
	}
	m.stopper.AddCloser(m.stopNATS)
	m.Server = ns
	m.URL = ns.ClientURL()
	m.CAFile = files.CA
	return nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// natsUsers are the NATS users of every principal the bank knows, and
// their connection limits.
func (m *Market) natsUsers(ctx context.Context) ([]*server.NkeyUser, map[string]int, error) {
	ps, err := m.Bank.Principals(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("market: listing principals for NATS: %w", err)
	}
	return natsauth.Users(NATSTables(), ps), natsauth.ConnLimits(ps), nil
}

// principalAdded reloads the embedded server's users when the bank stores
// a principal, so it connects at once, without a restart. It runs before
// the bank answers the request that added it.
func (m *Market) principalAdded(wire.Principal) {
	m.natsMu.Lock()
	defer m.natsMu.Unlock()
	if m.Server == nil {
		return // not started yet (it starts with every principal) or external
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	users, limits, err := m.natsUsers(ctx)
	if err == nil {
		m.natsOpts.Users, m.natsOpts.ConnLimits = users, limits
		err = natsutil.Reload(m.Server, m.natsOpts)
	}
	if err != nil {
		m.Metrics.Error("nats", "reload_users")
	}
}

// openBank opens the bank in the data directory; its principals become
// the NATS server's users.
func (m *Market) openBank() error {
	bankSigner, err := m.anchor()
	if err != nil {
		return err
	}
	m.env.AdminKey = m.admin.Public()
	m.bankd, err = daemon.OpenBank(daemon.BankConfig{Env: m.env, Store: filepath.Join(m.cfg.Dir, "bank.db"), Signer: bankSigner,
		OnPrincipal: m.principalAdded, Tick: m.cfg.TickPeriod})
	if err != nil {
		return err
	}
	m.Bank = m.bankd.Bank
	return nil
}

// ensureAssets creates (or opens, raising their replicas) the JetStream
// assets as the admin, on a connection of its own kept for making the
// plans bucket again should it be deleted (the broker may not).
func (m *Market) ensureAssets(ctx context.Context) error {
	nc, err := m.connect("mrmarket-admin-assets", m.admin)
	if err != nil {
		return err
	}
	m.stopper.AddCloser(nc.Close)
	if m.cfg.JSReplicas != 0 {
		if err := natsutil.SetReplicas(nc, m.cfg.JSReplicas); err != nil {
			return err
		}
	}
	assets, err := natsutil.EnsureAssets(ctx, nc)
	if err != nil {
		return wire.Errorf(wire.ErrUnavailable, "%v", err)
	}
	m.adminNC, m.Replicas = nc, assets.Replicas
	m.conns = append(m.conns, nc)
	return nil
}

// recreatePlans makes the assets again as the admin: the broker found its
// plans bucket deleted.
func (m *Market) recreatePlans(ctx context.Context) error {
	_, err := natsutil.EnsureAssets(ctx, m.adminNC)
	return err
}

// serveBank serves the bank on its own connection.
func (m *Market) serveBank(ctx context.Context) error {
	signer, err := m.bankSigner(ctx)
	if err != nil {
		return err
	}
	if err := m.bankd.Serve(ctx, signer); err != nil {
		return err
	}
	m.conns = append(m.conns, m.bankd.NC)
	return nil
}

// bankSigner is the key the bank connects with: its own (role bank) when
// it is registered.
func (m *Market) bankSigner(ctx context.Context) (*signing.Signer, error) {
	if s, err := m.keys.Signer(wire.RoleBank, "bank"); err == nil {
		if p, err := m.Bank.Whois(ctx, s.Public()); err == nil && p.Role == wire.RoleBank {
			return s, nil
		}
	}
	return nil, fmt.Errorf("market: the bank's key (creds/bank.nk) is not registered with role %s", wire.RoleBank)
}

// anchor loads (creating them if missing) the admin's credentials, the
// trust anchor, writing its public key to creds/admin.pub, and the bank's
// own; it returns the bank's signer.
func (m *Market) anchor() (*signing.Signer, error) {
	m.keys = signing.CredsDir(filepath.Join(m.cfg.Dir, "creds"))
	admin, err := m.keys.Ensure(wire.RoleAdmin, "admin")
	if err != nil {
		return nil, err
	}
	if err := m.keys.WriteAdminKey(admin); err != nil {
		return nil, fmt.Errorf("market: %w", err)
	}
	m.admin = admin
	return m.keys.Ensure(wire.RoleBank, "bank")
}

// AdminKey is the market's trust anchor, the admin's public key.
func (m *Market) AdminKey() string { return m.admin.Public() }

// register makes sure (role, name) has credentials in the data directory
// and is a principal of the bank, with the admin's record of it.
func (m *Market) register(ctx context.Context, role, name string) (*signing.Signer, error) {
	s, err := m.keys.Ensure(role, name)
	if err != nil {
		return nil, err
	}
	_, err = m.Bank.AddPrincipal(ctx, &wire.PrincipalRequest{Key: s.Public(), Name: name, Role: role,
		Cert: signing.SealPrincipal(m.admin, s.Public(), name, role)})
	return s, err
}

// registerIdentities registers the admin, the bank, the broker and every
// VM owner; it returns the broker's signer. (Agents register as they
// start.)
func (m *Market) registerIdentities(ctx context.Context) (*signing.Signer, error) {
	for _, p := range [][2]string{{wire.RoleAdmin, "admin"}, {wire.RoleBank, "bank"}} {
		if _, err := m.register(ctx, p[0], p[1]); err != nil {
			return nil, err
		}
	}
	brokerSigner, err := m.register(ctx, wire.RoleBroker, "broker")
	if err != nil {
		return nil, err
	}
	for _, u := range m.cfg.Users {
		if _, err := m.register(ctx, wire.RoleUser, u); err != nil {
			return nil, err
		}
	}
	for _, h := range m.cfg.Hosts {
		for _, vm := range h.VMs {
			if _, err := m.register(ctx, wire.RoleUser, vm.Owner); err != nil {
				return nil, err
			}
		}
	}
	return brokerSigner, nil
}

// registerAgents registers every host's agent before NATS starts, so the
// server admits them from the start.
func (m *Market) registerAgents(ctx context.Context) error {
	m.agentKey = map[string]*signing.Signer{}
	for _, h := range m.cfg.Hosts {
		s, err := m.register(ctx, wire.RoleAgent, h.ID)
		if err != nil {
			return err
		}
		m.agentKey[h.ID] = s
	}
	return nil
}

// startAgents starts one agent per host, each on its own connection,
// keeping its bid book in the data directory if asked to.
func (m *Market) startAgents(ctx context.Context, now func() time.Time) error {
	m.agentStop = map[string]*stop.Stopper{}
	for _, h := range m.cfg.Hosts {
		m.Sims[h.ID] = agent.NewSimEnforcer(now, h.CPUs, h.VMs...)
		a, err := m.startAgent(ctx, h)
		if err != nil {
			return err
		}
		m.agentsd = append(m.agentsd, a)
		m.Agents = append(m.Agents, a.Agent)
		m.conns = append(m.conns, a.NC)
	}
	return nil
}

// startAgent starts h's agent with its key and simulated host, under a
// stopper of its own (stopped with the market, or by RestartAgent).
func (m *Market) startAgent(ctx context.Context, h HostSpec) (*daemon.Agent, error) {
	stateFile := ""
	if m.cfg.AgentState {
		stateFile = filepath.Join(m.cfg.Dir, "agents", h.ID+".json")
	}
	env := m.env
	env.Stopper = stop.New()
	m.stopper.AddCloser(env.Stopper.Stop)
	m.agentStop[h.ID] = env.Stopper
	return daemon.StartAgent(ctx, daemon.AgentConfig{Env: env, Host: h.ID, Signer: m.agentKey[h.ID], Enforcer: m.Sims[h.ID],
		Capacity: h.CPUs, IdleBelow: m.cfg.IdleBelow, StateFile: stateFile, Tick: m.cfg.TickPeriod,
		Shared: m.shared})
}

// AgentConn is host's agent's own NATS connection (nil for no such host).
func (m *Market) AgentConn(host string) *nats.Conn {
	for _, a := range m.agentsd {
		if a.Host() == host {
			return a.NC
		}
	}
	return nil
}

// RestartAgent stops host's agent and starts it again with the key its
// credentials file holds now, on the same simulated host (and bid book,
// with Config.AgentState): what an operator's restart does after rotating
// the agent's key (mrmarket bank principal rotate). Not concurrent with
// Tick.
func (m *Market) RestartAgent(ctx context.Context, host string) error {
	i := slices.IndexFunc(m.Agents, func(a *agent.Agent) bool { return a.Host() == host })
	if i < 0 {
		return fmt.Errorf("market: no host %q", host)
	}
	s, err := m.keys.Signer(wire.RoleAgent, host)
	if err != nil {
		return err
	}
	m.agentStop[host].Stop()
	m.agentKey[host] = s
	spec := m.cfg.Hosts[slices.IndexFunc(m.cfg.Hosts, func(h HostSpec) bool { return h.ID == host })]
	a, err := m.startAgent(ctx, spec)
	if err != nil {
		return err
	}
	if j := slices.Index(m.conns, m.agentsd[i].NC); j >= 0 {
		m.conns[j] = a.NC
	}
	m.agentsd[i], m.Agents[i] = a, a.Agent
	m.runMu.Lock()
	defer m.runMu.Unlock()
	if m.runCtx != nil {
		return a.Run(m.runCtx)
	}
	return nil
}

// startBroker starts the broker on its own connection, signing its holds
// and bids as the broker and checking users' signatures through the bank.
func (m *Market) startBroker(ctx context.Context, signer *signing.Signer) error {
	b, err := daemon.StartBroker(ctx, daemon.BrokerConfig{Env: m.env, Signer: signer, Tick: m.cfg.TickPeriod, Settle: m.cfg.Settle, Replica: "broker-1",
		RecreatePlans: m.recreatePlans})
	if err != nil {
		return err
	}
	m.brokerd, m.Broker = b, b.Broker
	m.conns = append(m.conns, b.NC)
	return nil
}

// NC returns a new client connection to the market's NATS as the admin,
// who may send every request (a client that signs as several principals,
// like the demo's); closed with the market.
func (m *Market) NC(name string) (*nats.Conn, error) {
	return m.NCAs(wire.RoleAdmin, "admin")
}

// NCAs returns a new connection as principal (role, name), whose
// credentials are in Keys: the server grants it that role's permissions
// only. Closed with the market.
func (m *Market) NCAs(role, name string) (*nats.Conn, error) {
	s, err := m.keys.Signer(role, name)
	if err != nil {
		return nil, err
	}
	nc, err := m.connect("mrmarket-"+role+"-"+name, s)
	if err != nil {
		return nil, err
	}
	m.conns = append(m.conns, nc)
	m.stopper.AddCloser(nc.Close)
	return nc, nil
}

// connect connects as signer, verifying the server with CAFile (the
// daemons' daemon.Connect; whoever asked closes the connection). An
// external server that refuses the key (it has not reloaded the principal
// the market just registered) is asked again for NATSWait.
func (m *Market) connect(name string, signer *signing.Signer) (*nats.Conn, error) {
	wait := m.cfg.NATSWait
	if wait <= 0 {
		wait = 30 * time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		nc, err := natsutil.ConnectWith(m.URL, natsutil.ConnectOptions{Name: name, Signer: signer, CAFile: m.CAFile, Logger: m.cfg.Logger})
		if err == nil {
			return nc, nil
		}
		if m.Server != nil || !errors.Is(err, nats.ErrAuthorization) || time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (m *Market) tickAgents(ctx context.Context, now time.Time) error {
	var errs []error
	for _, a := range m.Agents {
		if _, err := a.Tick(ctx, now); err != nil {
			errs = append(errs, fmt.Errorf("agent %s: %w", a.Host(), err))
		}
	}
	return errors.Join(errs...)
}

// awaitBroker waits until the broker has heard every host's state of time
// now (states travel over NATS asynchronously).
func (m *Market) awaitBroker(ctx context.Context, now time.Time) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		prices, err := m.Broker.Price(&wire.PriceRequest{})
		if err == nil && heardAll(prices.Hosts, len(m.Agents), now) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("market: broker did not hear all %d hosts' states of %s within 10s", len(m.Agents), now.Format(time.RFC3339))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func heardAll(hosts []wire.HostPrice, n int, now time.Time) bool {
	if len(hosts) < n {
		return false
	}
	for _, h := range hosts {
		if h.Updated.Before(now) && !h.Retired { // a retired host's agent is silenced
			return false
		}
	}
	return true
}

// Tick runs one round at virtual time now: every agent ticks (charges,
// captures, reconciles, publishes); after the broker has heard every host,
// the simulated Hadoop runs the admitted jobs up to now and reports their
// progress (jobs.go), then the bank (expires holds) and the broker (ends
// plans) tick.
func (m *Market) Tick(ctx context.Context, now time.Time) error {
	if err := m.tickAgents(ctx, now); err != nil {
		return err
	}
	if err := m.awaitBroker(ctx, now); err != nil {
		return err
	}
	if err := m.jobs.step(ctx, now, true); err != nil {
		return err
	}
	if _, err := m.Bank.Tick(ctx, now); err != nil {
		return fmt.Errorf("bank: %w", err)
	}
	if err := m.Broker.Tick(ctx, now); err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	return nil
}

// Run ticks every component on the wall clock, each in its own loop as
// separate daemons do (the agents, the bank, the broker, and the simulated
// jobs), until ctx ends. The loops end then, or when the market closes;
// Close waits for them.
func (m *Market) Run(ctx context.Context) {
	m.runMu.Lock()
	m.runCtx = ctx
	m.runMu.Unlock()
	runs := []func(context.Context) error{m.bankd.Run, m.brokerd.Run}
	for _, a := range m.agentsd {
		runs = append(runs, a.Run)
	}
	for _, run := range runs {
		if run(ctx) != nil {
			return // closing
		}
	}
	jobs := stop.Ticker{Component: "jobs", Period: m.cfg.TickPeriod, Now: m.now, Metrics: m.Metrics, Logger: m.cfg.Logger}
	if m.stopper.RunTicker(ctx, "jobs", jobs, func(ctx context.Context, now time.Time) error { return m.jobs.step(ctx, now, false) }) != nil {
		return
	}
	<-ctx.Done()
}

// now is the market's clock.
func (m *Market) now() time.Time {
	if m.cfg.Now != nil {
		return m.cfg.Now()
	}
	return time.Now()
}

// Health reports every component's health, for /healthz.
func (m *Market) Health() map[string]obs.HealthFunc {
	checks := map[string]obs.HealthFunc{
		"bank":   m.Bank.Healthy,
		"broker": m.Broker.Healthy,
		"nats": func() error {
			for _, nc := range m.conns {
				if !nc.IsConnected() {
					return fmt.Errorf("connection %s is %s", nc.Opts.Name, nc.Status())
				}
			}
			return nil
		},
	}
	return checks
}

// Ready is what the market depends on, for /readyz: NATS (every
// connection of its daemons), the store (the bank's ledger and the
// broker's plans bucket); its hosts are simulated, so it uses no libvirt.
func (m *Market) Ready() []obs.Dependency {
	return []obs.Dependency{
		{Name: obs.DepNATS, Check: m.Health()["nats"]},
		{Name: obs.DepStore, Check: func() error { return errors.Join(m.Bank.Healthy(), m.brokerd.StoreReady()) }},
		{Name: obs.DepLibvirt, Unused: "simulated hosts"},
	}
}

// HostIDs lists the simulated hosts in order.
func (m *Market) HostIDs() []string {
	ids := make([]string, 0, len(m.Agents))
	for _, a := range m.Agents {
		ids = append(ids, a.Host())
	}
	sort.Strings(ids)
	return ids
}

// Close stops the market: its loops first, then everything it started,
// in reverse order of start (stop.Stopper).
func (m *Market) Close() { m.stopper.Stop() }

// stopNATS shuts the embedded server down.
func (m *Market) stopNATS() {
	m.natsMu.Lock()
	defer m.natsMu.Unlock()
	if m.Server != nil {
		m.Server.Shutdown()
		m.Server.WaitForShutdown()
		m.Server = nil
	}
}
