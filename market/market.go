// Package market wires a whole mrmarket into one process: an embedded NATS
// server (or an external one), the bank on SQLite, the broker, and one agent
// per simulated host, each component on its own NATS connection exactly as
// separate daemons would be. It is plumbing only: every decision is made by
// the agent, bank and broker packages it starts.
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
	"maps"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/natsauth"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/obs"
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
	// JSReplicas overrides the replicas of the JetStream assets the bank
	// and broker create (natsutil.SetReplicas); 0: from the cluster.
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
	// Replicas are the replica counts of the JetStream assets the bank
	// and broker created or opened, by name (MRM_HOSTS, …).
	Replicas map[string]int
	conns    []*nats.Conn
	stops    []func()
	keys     wire.CredsDir
	agentKey map[string]*wire.Signer // by host, registered before NATS starts

	// natsMu guards the embedded server's options across reloads (a
	// principal added at the bank) and Close.
	natsMu   sync.Mutex
	natsOpts natsutil.ServerOptions
	admin    *wire.Signer // the trust anchor: seals every principal record
	unlock   func()       // releases the data directory (lock.go)
	jobs     *jobRunner   // the simulated Hadoop that runs admitted jobs (jobs.go)
}

// Keys are the market's credentials (admin, broker, agents, the VM owners),
// in the data directory's creds/.
func (m *Market) Keys() wire.CredsDir { return m.keys }

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
	m = &Market{cfg: cfg, Sims: map[string]*agent.SimEnforcer{}, Registry: reg, Metrics: obs.NewMetrics(reg), unlock: unlock}
	started := m // every `return nil, err` below clears m before this runs
	defer func() {
		if err != nil {
			started.Close()
		}
	}()
	// Identities first: the NATS server admits exactly the registered
	// principals, each with its role's permissions (package natsauth).
	if err := m.openBank(now); err != nil {
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
	if err := m.serveBank(ctx); err != nil {
		return nil, err
	}
	if err := m.startAgents(ctx, now); err != nil {
		return nil, err
	}
	if err := m.startBroker(ctx, now, brokerSigner); err != nil {
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
	users, err := m.natsUsers(ctx)
	if err != nil {
		return err
	}
	m.natsMu.Lock()
	defer m.natsMu.Unlock()
	m.natsOpts = natsutil.ServerOptions{Dir: filepath.Join(m.cfg.Dir, "nats"), Host: m.cfg.NATSHost, Port: m.cfg.NATSPort, Users: users, TLS: tlsConf}
	ns, err := natsutil.StartServer(m.natsOpts)
	if err != nil {
		return err
	}
	m.Server = ns
	m.URL = ns.ClientURL()
	m.CAFile = files.CA
	return nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// natsUsers are the NATS users of every principal the bank knows.
func (m *Market) natsUsers(ctx context.Context) ([]*server.NkeyUser, error) {
	ps, err := m.Bank.Principals(ctx)
	if err != nil {
		return nil, fmt.Errorf("market: listing principals for NATS: %w", err)
	}
	return natsauth.Users(NATSTables(), ps), nil
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
	users, err := m.natsUsers(ctx)
	if err == nil {
		m.natsOpts.Users = users
		err = natsutil.Reload(m.Server, m.natsOpts)
	}
	if err != nil {
		m.Metrics.Error("nats", "reload_users")
	}
}

// openBank opens the bank in the data directory; its principals become
// the NATS server's users.
func (m *Market) openBank(now func() time.Time) error {
	bankSigner, err := m.anchor()
	if err != nil {
		return err
	}
	m.Bank, err = bank.Open(filepath.Join(m.cfg.Dir, "bank.db"), bank.Options{Now: now, Metrics: m.Metrics, OnPrincipal: m.principalAdded,
		AdminKey: m.admin.Public(), Signer: bankSigner})
	if err != nil {
		return err
	}
	bk := m.Bank
	m.stops = append(m.stops, func() { _ = bk.Close() })
	return nil
}

// serveBank serves the bank on its own connection, which also makes sure
// the JetStream assets the bank owns exist.
func (m *Market) serveBank(ctx context.Context) error {
	signer, err := m.bankSigner(ctx)
	if err != nil {
		return err
	}
	nc, err := m.connect("mrmarket-bank", signer)
	if err != nil {
		return err
	}
	if err := m.setReplicas(nc); err != nil {
		return err
	}
	assets, err := natsutil.EnsureBankAssets(ctx, nc)
	if err != nil {
		return err
	}
	m.noteReplicas(assets)
	stop, err := bank.Serve(nc, m.Bank)
	if err != nil {
		return err
	}
	m.stops = append(m.stops, stop)
	return nil
}

// bankSigner is the key the bank connects with: its own (role bank) when
// it is registered.
func (m *Market) bankSigner(ctx context.Context) (*wire.Signer, error) {
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
func (m *Market) anchor() (*wire.Signer, error) {
	m.keys = wire.CredsDir(filepath.Join(m.cfg.Dir, "creds"))
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
func (m *Market) register(ctx context.Context, role, name string) (*wire.Signer, error) {
	s, err := m.keys.Ensure(role, name)
	if err != nil {
		return nil, err
	}
	_, err = m.Bank.AddPrincipal(ctx, &wire.PrincipalRequest{Key: s.Public(), Name: name, Role: role,
		Cert: wire.SealPrincipal(m.admin, s.Public(), name, role)})
	return s, err
}

// registerIdentities registers the admin, the bank, the broker and every
// VM owner; it returns the broker's signer. (Agents register as they
// start.)
func (m *Market) registerIdentities(ctx context.Context) (*wire.Signer, error) {
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
	m.agentKey = map[string]*wire.Signer{}
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
// capturing through the bank over NATS and keeping its bid book in the
// data directory if asked to.
func (m *Market) startAgents(ctx context.Context, now func() time.Time) error {
	stateFile := func(string) string { return "" }
	if m.cfg.AgentState {
		agentDir := filepath.Join(m.cfg.Dir, "agents")
		if err := os.MkdirAll(agentDir, 0o750); err != nil {
			return fmt.Errorf("market: %w", err)
		}
		stateFile = func(host string) string { return filepath.Join(agentDir, host+".json") }
	}
	for _, h := range m.cfg.Hosts {
		agentSigner := m.agentKey[h.ID]
		nc, err := m.connect("mrmarket-agent-"+h.ID, agentSigner)
		if err != nil {
			return err
		}
		// Its own handle: the agent writes its key over its own connection.
		hosts, err := natsutil.OpenHosts(ctx, nc, 10*time.Second)
		if err != nil {
			return err
		}
		sim := agent.NewSimEnforcer(now, h.CPUs, h.VMs...)
		a, err := agent.New(agent.Config{
			Host:       h.ID,
			Enforcer:   sim,
			Capturer:   bank.Client{NC: nc, Signer: agentSigner, AdminKey: m.AdminKey(), OnRefused: m.refused("agent"), Attempt: bank.DaemonAttempt},
			Publisher:  agent.NATSPublisher{NC: nc, KV: hosts.Hosts, Signer: agentSigner},
			AdminKey:   m.AdminKey(),
			Signer:     agentSigner,
			Metrics:    m.Metrics,
			Now:        now,
			Capacity:   h.CPUs,
			IdleBelow:  m.cfg.IdleBelow,
			Identities: bank.Client{NC: nc, AdminKey: m.AdminKey(), Attempt: bank.DaemonAttempt},
			StateFile:  stateFile(h.ID),
		})
		if err != nil {
			return err
		}
		stop, err := agent.Serve(nc, a)
		if err != nil {
			return err
		}
		m.stops = append(m.stops, stop)
		m.Agents = append(m.Agents, a)
		m.Sims[h.ID] = sim
	}
	return nil
}

// startBroker starts the broker on its own connection, signing its holds
// and bids as the broker and checking users' signatures through the bank.
func (m *Market) startBroker(ctx context.Context, now func() time.Time, signer *wire.Signer) error {
	nc, err := m.connect("mrmarket-broker", signer)
	if err != nil {
		return err
	}
	if err := m.setReplicas(nc); err != nil {
		return err
	}
	assets, err := natsutil.EnsureBrokerAssets(ctx, nc)
	if err != nil {
		return err
	}
	m.noteReplicas(assets)
	m.Broker, err = broker.New(broker.Config{
		NC: nc, Bank: bank.Client{NC: nc, Signer: signer, AdminKey: m.AdminKey(), OnRefused: m.refused("broker"), Attempt: bank.DaemonAttempt}, Now: now,
		Settle: m.cfg.Settle, Metrics: m.Metrics, Signer: signer, Identities: bank.Client{NC: nc, AdminKey: m.AdminKey(), Attempt: bank.DaemonAttempt}, AdminKey: m.AdminKey(),
		Tick: m.cfg.TickPeriod, Plans: assets.Plans, Replica: "broker-1",
	})
	if err != nil {
		return err
	}
	m.stops = append(m.stops, m.Broker.Close)
	stop, err := broker.Serve(nc, m.Broker)
	if err != nil {
		return err
	}
	m.stops = append(m.stops, stop)
	return nil
}

// refused counts a bank reply component ignored (unsigned, or not by the
// bank).
func (m *Market) refused(component string) func(error) {
	return func(error) { m.Metrics.Error(component, "untrusted_reply") }
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
	return m.connect("mrmarket-"+role+"-"+name, s)
}

// noteReplicas records the replicas of the assets a component created.
func (m *Market) noteReplicas(a *natsutil.Assets) {
	if m.Replicas == nil {
		m.Replicas = map[string]int{}
	}
	maps.Copy(m.Replicas, a.Replicas)
}

// setReplicas applies Config.JSReplicas to the assets created over nc.
func (m *Market) setReplicas(nc *nats.Conn) error {
	if m.cfg.JSReplicas == 0 {
		return nil // from the cluster (or MRM_JS_REPLICAS)
	}
	if err := natsutil.SetReplicas(nc, m.cfg.JSReplicas); err != nil {
		return fmt.Errorf("market: %w", err)
	}
	return nil
}

// connect connects as signer, verifying the server with CAFile. An
// external server that refuses the key (it has not reloaded the principal
// the market just registered) is asked again for NATSWait.
func (m *Market) connect(name string, signer *wire.Signer) (*nats.Conn, error) {
	wait := m.cfg.NATSWait
	if wait <= 0 {
		wait = 30 * time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		nc, err := natsutil.ConnectWith(m.URL, natsutil.ConnectOptions{Name: name, Signer: signer, CAFile: m.CAFile})
		if err == nil {
			m.conns = append(m.conns, nc)
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
		if h.Updated.Before(now) {
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

// Run ticks every component on the wall clock until ctx ends: the agents
// each on its own, the bank, the broker and the simulated jobs in turn.
func (m *Market) Run(ctx context.Context) {
	for _, a := range m.Agents {
		go agent.Run(ctx, a, m.cfg.TickPeriod)
	}
	t := time.NewTicker(m.cfg.TickPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if _, err := m.Bank.Tick(ctx, now); err != nil {
				m.Metrics.Error("bank", "tick")
			}
			if err := m.Broker.Tick(ctx, now); err != nil {
				m.Metrics.Error("broker", "tick")
			}
			if err := m.jobs.step(ctx, m.now(), false); err != nil && ctx.Err() == nil {
				m.Metrics.Error("jobs", "step")
			}
		}
	}
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

// HostIDs lists the simulated hosts in order.
func (m *Market) HostIDs() []string {
	ids := make([]string, 0, len(m.Agents))
	for _, a := range m.Agents {
		ids = append(ids, a.Host())
	}
	sort.Strings(ids)
	return ids
}

// Close stops everything in reverse order of start.
func (m *Market) Close() {
	for i := len(m.stops) - 1; i >= 0; i-- {
		m.stops[i]()
	}
	m.stops = nil
	for _, nc := range m.conns {
		nc.Close()
	}
	m.conns = nil
	m.natsMu.Lock()
	defer m.natsMu.Unlock()
	defer func() {
		if m.unlock != nil { // last: everything on the directory is closed
			m.unlock()
			m.unlock = nil
		}
	}()
	if m.Server != nil {
		m.Server.Shutdown()
		m.Server.WaitForShutdown()
		m.Server = nil
	}
}
