package natsutil

import (
	"fmt"
	"sync"
	"time"
	_ "unsafe" // go:linkname

	"github.com/nats-io/nats-server/v2/server"
)

// Raft timers of the embedded nats-server's JetStream clustering.
//
// When the node leading a replicated stream dies without a word (SIGKILL,
// a lost machine), its followers wait for their election timeout before
// one campaigns: nats-server's is a random 4–9 s, not configurable, so
// every write to the streams that node led — plans, nonces, host states —
// pauses 4–9 s. A market operation then waits as long, past what a user
// should see (5 s, the fault test's bound). `mrmarket nats serve` therefore runs its
// node with shorter timers: heartbeats every 500 ms and elections after
// 1.5–3 s without one, so a dead leader is replaced within ~3.5 s. The
// timers only decide how soon a silent leader is given up on; raft's
// safety does not depend on them. A stock nats-server keeps its defaults
// (the gaps are then 4–9 s longer); nodes with different timers may share
// a cluster.
//
// A node whose process dies closes its routes, and then the survivors do
// not wait for these timers at all (leaders.go); they decide for a node
// that goes silent with its sockets open (a machine lost, a partition).
//
// The timers are package variables of nats-server (its own tests set them
// the same way), reached through go:linkname: the module version is pinned
// in go.mod and TestRaftTimers checks they are still there and still
// act.
var (
	//go:linkname raftHeartbeat github.com/nats-io/nats-server/v2/server.hbInterval
	raftHeartbeat time.Duration
	//go:linkname raftMinElection github.com/nats-io/nats-server/v2/server.minElectionTimeout
	raftMinElection time.Duration
	//go:linkname raftMaxElection github.com/nats-io/nats-server/v2/server.maxElectionTimeout
	raftMaxElection time.Duration
)

// RaftTimers are the heartbeat interval and election timeout range of
// every raft group of the servers this process starts.
type RaftTimers struct {
	Heartbeat, MinElection, MaxElection time.Duration
}

// FastFailover are the timers `mrmarket nats serve` runs with.
var FastFailover = RaftTimers{Heartbeat: 500 * time.Millisecond, MinElection: 1500 * time.Millisecond, MaxElection: 3 * time.Second}

var raftMu sync.Mutex

// CurrentRaftTimers are the timers in force.
func CurrentRaftTimers() RaftTimers {
	raftMu.Lock()
	defer raftMu.Unlock()
	return RaftTimers{raftHeartbeat, raftMinElection, raftMaxElection}
}

// SetRaftTimers sets the timers of the raft groups this process's servers
// start from now on (call it before starting any). An election timeout
// must leave room for at least two missed heartbeats.
func SetRaftTimers(t RaftTimers) error {
	if t.Heartbeat <= 0 || t.MinElection < 2*t.Heartbeat || t.MaxElection <= t.MinElection {
		return fmt.Errorf("raft timers: want 0 < heartbeat, 2×heartbeat ≤ min election < max election; got %+v", t)
	}
	raftMu.Lock()
	defer raftMu.Unlock()
	if (RaftTimers{raftHeartbeat, raftMinElection, raftMaxElection}) == t {
		return nil // no write: running servers read them unlocked
	}
	raftHeartbeat, raftMinElection, raftMaxElection = t.Heartbeat, t.MinElection, t.MaxElection
	return nil
}

// keep the server package linked in (the variables live there).
var _ = server.VERSION
