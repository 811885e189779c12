package daemon

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/signing"
)

// AgentConfig configures one host's agent.
type AgentConfig struct {
	Env
	// Host is the host's id and Signer its agent's key (role agent).
	Host   string
	Signer *signing.Signer
	// Enforcer governs the host's VMs: libvirt's, or a simulated host's.
	Enforcer agent.Enforcer
	// Capacity, IdleBelow and StateFile are agent.Config's; a StateFile's
	// directory is created.
	Capacity  float64
	IdleBelow float64
	StateFile string
	// Tick is how often Run charges, reconciles and publishes.
	Tick time.Duration
	// Shared is agent.Config's: caches the agents of one process share.
	Shared *agent.Shared
}

// Agent is a host's agent, serving.
type Agent struct {
	*agent.Agent
	cfg AgentConfig
	NC  *nats.Conn
}

// StartAgent connects the host's agent, opens the hosts bucket, makes the
// agent (capturing through the bank, publishing the host's state signed,
// taking bids only from the broker) and serves its subjects.
func StartAgent(ctx context.Context, cfg AgentConfig) (*Agent, error) {
	nc, err := cfg.connect("mrmarket-agent-"+cfg.Host, cfg.Signer)
	if err != nil {
		return nil, err
	}
	// Its own handle: the agent writes its key over its own connection.
	assets, err := natsutil.OpenHosts(ctx, nc, cfg.AssetsWait)
	if err != nil {
		return nil, unavailable(err)
	}
	if cfg.StateFile != "" {
		if err := os.MkdirAll(filepath.Dir(cfg.StateFile), 0o750); err != nil {
			return nil, err
		}
	}
	signed, identities := cfg.bankClients(nc, cfg.Signer, "agent")
	a, err := agent.New(agent.Config{Host: cfg.Host, Enforcer: cfg.Enforcer, Capturer: signed, Identities: identities,
		Publisher: agent.NATSPublisher{NC: nc, KV: assets.Hosts, Signer: cfg.Signer}, AdminKey: cfg.AdminKey, Signer: cfg.Signer,
		Metrics: cfg.Metrics, Logger: cfg.Logger, Now: cfg.Now, Capacity: cfg.Capacity, IdleBelow: cfg.IdleBelow, StateFile: cfg.StateFile,
		Shared: cfg.Shared})
	if err != nil {
		return nil, err
	}
	stopServing, err := agent.Serve(nc, a)
	if err != nil {
		return nil, err
	}
	cfg.Stopper.AddCloser(stopServing)
	return &Agent{Agent: a, cfg: cfg, NC: nc}, nil
}

// Run ticks the agent every AgentConfig.Tick (agent.Run) in a task of the
// stopper, until ctx ends or the stopper stops.
func (a *Agent) Run(ctx context.Context) error {
	return a.cfg.Stopper.RunTask(ctx, "agent "+a.cfg.Host, func(ctx context.Context) { agent.Run(ctx, a.Agent, a.cfg.Tick) })
}
