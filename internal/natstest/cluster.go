package natstest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/natsauth"
	"github.com/mrmarket/mrmarket/internal/natsutil"
	"github.com/mrmarket/mrmarket/internal/testpoll"
)

// Cluster is a NATS cluster of embedded nodes on 127.0.0.1, each started
// as `mrmarket nats serve` starts one (natsauth.Config's file through
// natsutil.StartNode), open (no users, no TLS) for tests of replication.
type Cluster struct {
	Nodes []*natsutil.Node // nil once Kill stopped it
	// URLs are the nodes' client URLs.
	URLs []string
}

// StartCluster starts n nodes that route to each other and waits until
// JetStream has a meta leader; they shut down when t ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	clients, routes := make([]int, n), make([]string, n)
	for i := range n {
		clients[i] = FreePort(t)
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", FreePort(t))
	}
	c := &Cluster{Nodes: make([]*natsutil.Node, n)}
	dir := t.TempDir()
	for i := range n {
		o := natsauth.ConfigOptions{
			Name: fmt.Sprintf("n%d", i+1), Listen: fmt.Sprintf("127.0.0.1:%d", clients[i]),
			StoreDir:    filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			ClusterName: "test", ClusterListen: strings.TrimPrefix(routes[i], "nats-route://"), Routes: routes,
			MaxPayload: natsutil.DefaultLimits.MaxPayload, MaxPending: natsutil.DefaultLimits.MaxPending,
			MaxSubs: natsutil.DefaultLimits.MaxSubs, MaxConn: natsutil.DefaultLimits.MaxConn,
			Open: true,
		}
		node, err := natsutil.StartNode(context.Background(), natsutil.NodeOptions{
			File: filepath.Join(dir, fmt.Sprintf("n%d.conf", i+1)),
			Render: func(context.Context) ([]byte, error) {
				var b bytes.Buffer
				err := natsauth.Config(&b, o)
				return b.Bytes(), err
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		c.Nodes[i] = node
		c.URLs = append(c.URLs, node.Server.ClientURL())
		t.Cleanup(func() { c.Kill(i) })
	}
	c.WaitMeta(t, 20*time.Second)
	return c
}

// URL is every node's client URL, comma-separated (nats.Connect takes it).
func (c *Cluster) URL() string { return strings.Join(c.URLs, ",") }

// Kill stops node i (no-op when stopped).
func (c *Cluster) Kill(i int) {
	if c.Nodes[i] != nil {
		c.Nodes[i].Shutdown()
		c.Nodes[i] = nil
	}
}

// Index is the index of the running node named name, or -1.
func (c *Cluster) Index(name string) int {
	for i, n := range c.Nodes {
		if n != nil && n.Server.Name() == name {
			return i
		}
	}
	return -1
}

// WaitMeta waits until every running node is routed to all the others and
// the JetStream API answers (a meta leader is elected).
func (c *Cluster) WaitMeta(t testing.TB, total time.Duration) {
	t.Helper()
	running := 0
	for _, n := range c.Nodes {
		if n != nil {
			running++
		}
	}
	testpoll.CheckFor(t, total, 20*time.Millisecond, func() error {
		for _, n := range c.Nodes {
			if n == nil {
				continue
			}
			if r := n.Server.NumRoutes(); r < running-1 {
				return fmt.Errorf("%s has %d routes of %d", n.Server.Name(), r, running-1)
			}
			if !n.Server.JetStreamIsClustered() {
				return fmt.Errorf("%s: JetStream not clustered yet", n.Server.Name())
			}
			if n.Server.JetStreamIsLeader() {
				return nil
			}
		}
		return fmt.Errorf("no JetStream meta leader yet")
	})
}

// Connect connects a client to every node's URL (it fails over); closed
// when t ends.
func (c *Cluster) Connect(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := natsutil.Connect(c.URL(), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// FreePort is a TCP port of 127.0.0.1 free a moment ago (for a cluster's
// routes, which every node must know before any starts).
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
