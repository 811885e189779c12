// Package market wires a whole mrmarket into one process: an embedded NATS
// server (or an external one), the bank on SQLite, the broker, and one agent
// per simulated host, each component on its own NATS connection exactly as
// separate daemons would be. It is plumbing only: every decision is made by
// the agent, bank and broker packages it starts.
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
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
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
	// NATSURL connects to an external NATS instead of starting one.
	NATSURL string
	// NATSHost and NATSPort are where the embedded server listens
	// (port -1 = a free port, 0 = 4222).
	NATSHost string
	NATSPort int
	// Hosts are the simulated hosts and their VMs.
	Hosts []HostSpec
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
	conns    []*nats.Conn
	stops    []func()
	keys     wire.CredsDir
	admin    *wire.Signer // the trust anchor: seals every principal record
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
	reg := prometheus.NewRegistry()
	m = &Market{cfg: cfg, Sims: map[string]*agent.SimEnforcer{}, Registry: reg, Metrics: obs.NewMetrics(reg)}
	started := m // every `return nil, err` below clears m before this runs
	defer func() {
		if err != nil {
			started.Close()
		}
	}()
	if err := m.startNATS(); err != nil {
		return nil, err
	}
	assets, err := m.startBank(ctx, now)
	if err != nil {
		return nil, err
	}
	brokerSigner, err := m.registerIdentities(ctx)
	if err != nil {
		return nil, err
	}
	if err := m.startAgents(ctx, now, assets); err != nil {
		return nil, err
	}
	if err := m.startBroker(now, assets, brokerSigner); err != nil {
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
	return m, nil
}

// startNATS starts the embedded server, unless the market uses an
// external one.
func (m *Market) startNATS() error {
	m.URL = m.cfg.NATSURL
	if m.URL != "" {
		return nil
	}
	ns, err := natsutil.StartServer(natsutil.ServerOptions{Dir: filepath.Join(m.cfg.Dir, "nats"), Host: m.cfg.NATSHost, Port: m.cfg.NATSPort})
	if err != nil {
		return err
	}
	m.Server = ns
	m.URL = ns.ClientURL()
	return nil
}

// startBank opens the bank in the data directory and serves it on its own
// connection, which also makes sure the JetStream assets exist.
func (m *Market) startBank(ctx context.Context, now func() time.Time) (*natsutil.Assets, error) {
	nc, err := m.NC("mrmarket-bank")
	if err != nil {
		return nil, err
	}
	assets, err := natsutil.EnsureAssets(ctx, nc)
	if err != nil {
		return nil, err
	}
	bankSigner, err := m.anchor()
	if err != nil {
		return nil, err
	}
	m.Bank, err = bank.Open(filepath.Join(m.cfg.Dir, "bank.db"), bank.Options{Now: now, Metrics: m.Metrics,
		AdminKey: m.admin.Public(), Signer: bankSigner})
	if err != nil {
		return nil, err
	}
	bk := m.Bank
	m.stops = append(m.stops, func() { _ = bk.Close() })
	stop, err := bank.Serve(nc, m.Bank)
	if err != nil {
		return nil, err
	}
	m.stops = append(m.stops, stop)
	return assets, nil
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
	for _, h := range m.cfg.Hosts {
		for _, vm := range h.VMs {
			if _, err := m.register(ctx, wire.RoleUser, vm.Owner); err != nil {
				return nil, err
			}
		}
	}
	return brokerSigner, nil
}

// startAgents starts one agent per host, each on its own connection,
// capturing through the bank over NATS and keeping its bid book in the
// data directory if asked to.
func (m *Market) startAgents(ctx context.Context, now func() time.Time, assets *natsutil.Assets) error {
	stateFile := func(string) string { return "" }
	if m.cfg.AgentState {
		agentDir := filepath.Join(m.cfg.Dir, "agents")
		if err := os.MkdirAll(agentDir, 0o750); err != nil {
			return fmt.Errorf("market: %w", err)
		}
		stateFile = func(host string) string { return filepath.Join(agentDir, host+".json") }
	}
	for _, h := range m.cfg.Hosts {
		nc, err := m.NC("mrmarket-agent-" + h.ID)
		if err != nil {
			return err
		}
		agentSigner, err := m.register(ctx, wire.RoleAgent, h.ID)
		if err != nil {
			return err
		}
		sim := agent.NewSimEnforcer(now, h.CPUs, h.VMs...)
		a, err := agent.New(agent.Config{
			Host:       h.ID,
			Enforcer:   sim,
			Capturer:   bank.Client{NC: nc, Signer: agentSigner, AdminKey: m.AdminKey(), OnRefused: m.refused("agent")},
			Publisher:  agent.NATSPublisher{NC: nc, KV: assets.Hosts, Signer: agentSigner},
			AdminKey:   m.AdminKey(),
			Signer:     agentSigner,
			Metrics:    m.Metrics,
			Now:        now,
			Capacity:   h.CPUs,
			Identities: bank.Client{NC: nc, AdminKey: m.AdminKey()},
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
func (m *Market) startBroker(now func() time.Time, assets *natsutil.Assets, signer *wire.Signer) error {
	nc, err := m.NC("mrmarket-broker")
	if err != nil {
		return err
	}
	m.Broker, err = broker.New(broker.Config{
		NC: nc, Bank: bank.Client{NC: nc, Signer: signer, AdminKey: m.AdminKey(), OnRefused: m.refused("broker")}, Now: now,
		Settle: m.cfg.Settle, Metrics: m.Metrics, Signer: signer, Identities: bank.Client{NC: nc, AdminKey: m.AdminKey()}, AdminKey: m.AdminKey(),
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

// NC returns a new client connection to the market's NATS (closed with the market).
func (m *Market) NC(name string) (*nats.Conn, error) {
	nc, err := natsutil.Connect(m.URL, name)
	if err != nil {
		return nil, err
	}
	m.conns = append(m.conns, nc)
	return nc, nil
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
// captures, reconciles, publishes), then the bank (expires holds) and the
// broker (ends plans), after the broker has heard every host.
func (m *Market) Tick(ctx context.Context, now time.Time) error {
	if err := m.tickAgents(ctx, now); err != nil {
		return err
	}
	if err := m.awaitBroker(ctx, now); err != nil {
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

// Run ticks every component on the wall clock until ctx ends.
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
		}
	}
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
	if m.Server != nil {
		m.Server.Shutdown()
		m.Server.WaitForShutdown()
		m.Server = nil
	}
}
