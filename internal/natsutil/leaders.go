package natsutil

import (
	"time"
	_ "unsafe" // go:linkname

	"github.com/nats-io/nats-server/v2/server"
)

// A node whose process dies (a crash, SIGKILL, the OOM killer) closes its
// sockets: every other node loses its routes to it at once, while raft
// waits for the election timeout (1.5–3 s with FastFailover, 4–9 s by
// nats-server's default) before a follower campaigns, and a split vote
// costs another. Every write to a stream that node led pauses meanwhile.
// So each node watches its routes (leaderWatch), and when one to a peer is
// lost, one survivor of each raft group that peer led campaigns at once
// (raft's campaign timeout, 0.1–0.8 s): the member with the lowest server
// name among those still routed to it, so that the survivors do not split
// the vote. A peer lost without its sockets closing (a machine gone, a
// partition) is noticed by the timers, as before. Raft's safety does not
// rest on who campaigns or when: a campaign against a leader that is alive
// after all (a route that flapped) costs one leader change, no data.

// lookupRaftNode is the raft group a server runs under that name, if any
// (nats-server keeps the map unexported; pinned in go.mod, and
// TestCrashedLeaderReplacedAtOnce checks it still acts).
//
//go:linkname lookupRaftNode github.com/nats-io/nats-server/v2/server.(*Server).lookupRaftNode
func lookupRaftNode(s *server.Server, group string) server.RaftNode

// leaderWatchEvery is how often a node looks at its routes.
const leaderWatchEvery = 50 * time.Millisecond

// leaderWatch runs until ns shuts down: at each route to a peer lost, it
// campaigns for the groups that peer led where this node is the first
// survivor. logf hears what it did.
func leaderWatch(ns *server.Server, logf func(string, ...any)) {
	routed := routedPeers(ns)
	tick := time.NewTicker(leaderWatchEvery)
	defer tick.Stop()
	for range tick.C {
		if !ns.Running() {
			return
		}
		now := routedPeers(ns)
		var lost []string
		for name := range routed {
			if !now[name] {
				lost = append(lost, name)
			}
		}
		routed = now
		for _, peer := range lost {
			if groups := campaignFor(ns, peer, now); len(groups) > 0 {
				logf("route to %s lost: campaigning for the %d raft groups it led (%v)", peer, len(groups), groups)
			}
		}
	}
}

// routedPeers are the names of the servers ns has a route to.
func routedPeers(ns *server.Server) map[string]bool {
	peers := map[string]bool{}
	rz, err := ns.Routez(&server.RoutezOptions{})
	if err != nil {
		return peers
	}
	for _, r := range rz.Routes {
		peers[r.RemoteName] = true
	}
	return peers
}

// campaignFor starts a campaign in every raft group of ns that lost led
// and of whose survivors still routed (routed) ns has the lowest name; it
// returns those groups.
func campaignFor(ns *server.Server, lost string, routed map[string]bool) []string {
	az, err := ns.Accountz(&server.AccountzOptions{})
	if err != nil {
		return nil
	}
	self := ns.Name()
	var started []string
	for _, acc := range az.Accounts {
		st := ns.Raftz(&server.RaftzOptions{AccountFilter: acc})
		if st == nil {
			continue
		}
		for _, groups := range *st {
			for name, g := range groups {
				leader, ok := g.Peers[g.Leader]
				if g.State != "FOLLOWER" || !ok || leader.Name != lost {
					continue
				}
				first := self
				for _, p := range g.Peers {
					if routed[p.Name] && p.Name < first {
						first = p.Name
					}
				}
				if first != self {
					continue
				}
				if n := lookupRaftNode(ns, name); n != nil && n.Campaign() == nil {
					started = append(started, name)
				}
			}
		}
	}
	return started
}
