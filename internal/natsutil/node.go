package natsutil

// A node of a NATS cluster (mrmarket nats serve).
//
// A node runs the embedded server from the very configuration file `mrmarket
// nats config` writes for a standalone nats-server (natsauth.Config): the
// node renders it, writes it, and starts the server from the file through
// nats-server's own parser (server.ProcessConfigFile). So an embedded node
// and a real nats-server given that file are configured by one code path,
// and the file on disk is always what the node runs (an operator can read
// it, or hand it to nats-server). Refresh renders it again (a principal was
// added at the bank), and when it changed writes it and reloads the server
// with it: new users connect at once, removed ones are disconnected. What a
// configuration file cannot say, the connections each user's key may hold
// (nats-server has no per-user limit), the node enforces itself
// (connlimit.go), from ConnLimits.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
)

// NodeOptions configure a node.
type NodeOptions struct {
	// File is where the configuration is written (mode 0600: it names
	// every principal's key).
	File string
	// Render returns the configuration (natsauth.Config's text), read
	// afresh on every Refresh.
	Render func(ctx context.Context) ([]byte, error)
	// Log makes the server log to stderr (a daemon); false keeps it quiet
	// (tests).
	Log bool
	// ConnLimits, when set, are the connection limits by key of the users
	// of the configuration Render returned last (natsauth.ConnLimits).
	ConnLimits func() map[string]int
}

// Node is a running node.
type Node struct {
	Server *server.Server
	o      NodeOptions
	mu     sync.Mutex
	last   []byte
}

// StartNode writes the configuration and starts a server from it,
// waiting until it accepts connections.
func StartNode(ctx context.Context, o NodeOptions) (*Node, error) {
	conf, err := o.Render(ctx)
	if err != nil {
		return nil, err
	}
	so, err := o.load(conf)
	if err != nil {
		return nil, err
	}
	ns, err := startWith(so)
	if err != nil {
		return nil, err
	}
	if o.Log {
		ns.ConfigureLogger()
	}
	if o.ConnLimits != nil {
		limitConnections(ns, o.ConnLimits(), o.logf)
	}
	if len(so.Routes) > 0 {
		go leaderWatch(ns, func(format string, args ...any) { o.logf(ns, format, args...) })
	}
	return &Node{Server: ns, o: o, last: conf}, nil
}

// logf logs on the server's log (when the node logs).
func (o NodeOptions) logf(ns *server.Server, format string, args ...any) {
	if o.Log && ns != nil {
		ns.Warnf(format, args...)
	}
}

// load writes conf to the file and parses it as nats-server does.
func (o NodeOptions) load(conf []byte) (*server.Options, error) {
	if err := writeFileAtomic(o.File, conf); err != nil {
		return nil, err
	}
	so, err := server.ProcessConfigFile(o.File)
	if err != nil {
		return nil, fmt.Errorf("natsutil: configuration %s: %w", o.File, err)
	}
	so.NoSigs = true // the daemon handles signals (and stops the node)
	so.NoLog = !o.Log
	if o.Log {
		so.Logtime = true
	}
	return so, nil
}

// Refresh renders the configuration again and, when it changed, writes it
// and reloads the server with it; it reports whether it reloaded.
func (n *Node) Refresh(ctx context.Context) (bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	conf, err := n.o.Render(ctx)
	if err != nil {
		return false, err
	}
	if bytes.Equal(conf, n.last) {
		return false, nil
	}
	so, err := n.o.load(conf)
	if err != nil {
		return false, err
	}
	if n.o.ConnLimits != nil {
		setConnLimits(n.Server, n.o.ConnLimits())
	}
	if err := n.Server.ReloadOptions(so); err != nil {
		return false, fmt.Errorf("natsutil: reloading %s: %w", n.o.File, err)
	}
	n.last = conf
	return true, nil
}

// Shutdown stops the node and waits until it has.
func (n *Node) Shutdown() {
	n.Server.Shutdown()
	n.Server.WaitForShutdown()
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("natsutil: writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("natsutil: writing %s: %w", path, err)
	}
	return nil
}
