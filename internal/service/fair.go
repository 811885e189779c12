package service

import (
	"container/list"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// Fair configures fair queuing (Options.Fair): a request waits first in a
// queue of the connection it came from, where its signature is checked,
// then in a queue of the principal that signed it, and two small pools of
// workers serve the connections and the principals in turn, so one
// principal's flood — or a flood of forgeries naming a principal — delays
// the others by at most one of its requests per turn instead of by the
// whole flood.
type Fair struct {
	// Workers check and serve requests concurrently (so many of each);
	// default DefaultWorkers. They start when there is work and stop when
	// there is none, so an idle service (one agent of thousands in a
	// process) holds no goroutine.
	Workers int
	// PerPrincipal bounds the requests one connection may have waiting to
	// be checked, and one principal waiting or running; past it a request
	// is refused at once with wire.ErrUnavailable ("busy, retry"). Default
	// DefaultPerPrincipal.
	PerPrincipal int
	// MaxQueues bounds the principals with requests waiting; past it the
	// requests of new ones share one overflow queue. Default
	// DefaultMaxQueues.
	MaxQueues int
	// Unordered lets a principal's requests to one endpoint run side by
	// side, each taking its turn. It is for a service that is served by a
	// queue group of replicas (so a principal's requests are not in order
	// across it anyway) and whose requests are idempotent by id: there a
	// retry must not wait for the attempt it retries, which may be stuck
	// on a dead server until its handler's time runs out. Without it a
	// principal's requests to one endpoint with the same order key
	// (wire.HeaderOrder; none by default) run one at a time in the order
	// sent.
	Unordered bool
}

// Fair queuing defaults.
const (
	DefaultWorkers      = 16
	DefaultPerPrincipal = 1024
	DefaultMaxQueues    = 4096
)

// ErrBusy refuses a request whose principal already has Fair.PerPrincipal
// requests waiting.
var ErrBusy = wire.Errorf(wire.ErrUnavailable, "busy, retry: too many requests waiting from this principal")

// The busy refusal, encoded once: it is what a flood is answered with.
var (
	busyBody        = wire.EncodeReply(nil, ErrBusy)
	busyStatus      = statusOf(wire.CodeUnavailable)
	busyDescription = describe(ErrBusy)
)

// overflowKey is the queue of principals past Fair.MaxQueues.
const overflowKey = "overflow"

// fairKey is whose queue a request waits in: the key that signed it —
// verified before it is queued there (handler), so a request can take a
// place only in its real signer's queue, and a forgery claiming another
// principal's key is refused, at the forger's cost, without touching that
// principal's queue; a request not yet checked, or unsigned, its
// connection, told by the reply subject's inbox (every reply subject of
// one connection's requests shares the prefix before the last token; with
// NATS authentication that inbox is the principal's own); a publish
// without reply the shared anonymous queue.
//
// The inbox is the sender's word: NATS does not check the reply subject a
// client names, so a forger may name its victim's inbox and wait in the
// victim's queue for its checks (and get none of the refusals). A client
// signing each request with a fresh key of its own still gets a turn per
// key (until MaxQueues; then the fresh keys share the overflow queue).
// NATS authentication (every connection a registered principal, with the
// server's per-connection and per-principal limits) bounds both.
func fairKey(signer, reply string) string {
	if signer != "" {
		return "key:" + signer
	}
	if i := strings.LastIndexByte(reply, '.'); i > 0 {
		return "conn:" + reply[:i]
	}
	return "anonymous"
}

// scheduler is one service's fair queues: per principal, and within a
// principal per endpoint, FIFO; one request at a time per (principal,
// endpoint) — so each sender's requests to an endpoint are handled in the
// order sent, as when every endpoint was served by one goroutine — and
// principals served round-robin by at most Workers goroutines.
type scheduler struct {
	cfg Fair
	// checks is where requests wait, by connection, for their signatures
	// to be checked before they join their signer's queue here (handler).
	// nil: this is checks.
	checks *scheduler

	mu     sync.Mutex
	queues map[laneKey]*principalQueue
	// ready are the principal queues with a runnable request, in turn
	// order, by lane: the bulk lane's (Endpoint.Bulk) are served only when
	// the other is empty.
	ready   [lanes]list.List
	running int    // workers
	seq     uint64 // Unordered: each request its own order key

	stats map[string]*endpointStats // by endpoint name, fixed at start
}

// The lanes a request waits in: Endpoint.Bulk's, and the others'.
const (
	laneFirst = iota
	laneBulk
	lanes
)

// laneKey is a principal's queue in one lane: its bulk requests and its
// others wait apart, each lane with its own bound (Fair.PerPrincipal).
type laneKey struct {
	lane int
	key  string
}

type principalQueue struct {
	key     laneKey
	pending int // waiting or running
	eps     map[orderKey]*endpointQueue
	ready   list.List // of *endpointQueue with a waiting request and none running
	inRing  bool
}

// orderKey is what a principal's requests are in order by: the endpoint,
// and the order key the request names.
type orderKey struct {
	e     *Endpoint
	order string
}

type endpointQueue struct {
	key     orderKey
	jobs    []func()
	busy    bool // a request is running
	inReady bool
}

// endpointStats are what micro cannot count for a queued request: its
// handler's refusals (replied by a worker, after micro's handler returned)
// and the requests refused busy.
type endpointStats struct {
	Errors  atomic.Int64
	Busy    atomic.Int64
	Expired atomic.Int64
}

// fairStats is an endpoint's $SRV.STATS data.
type fairStats struct {
	Errors int64 `json:"errors"` // refused by the handler, replied from the queue
	Busy   int64 `json:"busy"`   // refused because the principal's queue was full
	// Expired were dropped unserved: their senders' patience
	// (wire.HeaderPatience) ran out while they waited.
	Expired int64 `json:"expired"`
}

func newScheduler(cfg Fair, t Table) *scheduler {
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.PerPrincipal <= 0 {
		cfg.PerPrincipal = DefaultPerPrincipal
	}
	if cfg.MaxQueues <= 0 {
		cfg.MaxQueues = DefaultMaxQueues
	}
	s := &scheduler{cfg: cfg, queues: map[laneKey]*principalQueue{}, stats: map[string]*endpointStats{}}
	for i := range t {
		s.stats[t[i].Name] = &endpointStats{}
	}
	s.checks = &scheduler{cfg: cfg, queues: map[laneKey]*principalQueue{}, stats: s.stats}
	return s
}

// statsOf is micro's StatsHandler: the endpoint's queue counts.
func (s *scheduler) statsOf(ep *micro.Endpoint) any {
	st, ok := s.stats[ep.Name]
	if !ok {
		return nil
	}
	return fairStats{Errors: st.Errors.Load(), Busy: st.Busy.Load(), Expired: st.Expired.Load()}
}

// submit queues job for key on e, after key's earlier requests to e with
// the same order key (Unordered: after none); false when key's queue is
// full.
func (s *scheduler) submit(key string, e *Endpoint, order string, job func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.Unordered {
		s.seq++
		order = strconv.FormatUint(s.seq, 36)
	}
	lk := laneKey{laneFirst, key}
	if e.Bulk {
		lk.lane = laneBulk
	}
	q, ok := s.queues[lk]
	if !ok {
		if len(s.queues) >= s.cfg.MaxQueues {
			lk.key = overflowKey
			q = s.queues[lk]
		}
		if q == nil {
			q = &principalQueue{key: lk, eps: map[orderKey]*endpointQueue{}}
			s.queues[lk] = q
		}
	}
	if q.pending >= s.cfg.PerPrincipal {
		return false
	}
	k := orderKey{e, order}
	eq := q.eps[k]
	if eq == nil {
		eq = &endpointQueue{key: k}
		q.eps[k] = eq
	}
	eq.jobs = append(eq.jobs, job)
	q.pending++
	if !eq.busy && !eq.inReady {
		q.ready.PushBack(eq)
		eq.inReady = true
	}
	if !q.inRing && q.ready.Len() > 0 {
		s.ready[lk.lane].PushBack(q)
		q.inRing = true
	}
	if s.running < s.cfg.Workers {
		s.running++
		go s.work()
	}
	return true
}

// next is the lane to serve a request of: the first that has one; -1 when
// none has.
func (s *scheduler) next() int {
	for lane := range s.ready {
		if s.ready[lane].Len() > 0 {
			return lane
		}
	}
	return -1
}

// work serves queued requests, a principal at a time in turn, the bulk
// lane's only when the other's are served, until none is runnable.
func (s *scheduler) work() {
	s.mu.Lock()
	for lane := s.next(); lane >= 0; lane = s.next() {
		ready := &s.ready[lane]
		q := ready.Remove(ready.Front()).(*principalQueue)
		q.inRing = false
		eq := q.ready.Remove(q.ready.Front()).(*endpointQueue)
		eq.inReady = false
		job := eq.jobs[0]
		eq.jobs[0] = nil
		eq.jobs = eq.jobs[1:]
		eq.busy = true
		if q.ready.Len() > 0 { // its other endpoints wait for its next turn
			ready.PushBack(q)
			q.inRing = true
		}
		s.mu.Unlock()
		job()
		// Workers busy with a flood (signature checks) never block: each
		// yields its processor between requests, or another principal's
		// request, its turn come, would wait for a scheduling slice.
		runtime.Gosched()
		s.mu.Lock()
		eq.busy = false
		q.pending--
		if len(eq.jobs) > 0 {
			q.ready.PushBack(eq)
			eq.inReady = true
			if !q.inRing {
				s.ready[q.key.lane].PushBack(q)
				q.inRing = true
			}
		} else if !eq.inReady {
			delete(q.eps, eq.key) // an order key lives while it has requests
		}
		if q.pending == 0 {
			delete(s.queues, q.key)
		}
	}
	s.running--
	s.mu.Unlock()
}

// queuedReply answers a request from a worker, after micro's handler has
// returned (micro.Request may then no longer be used): the same bytes and
// headers micro's Respond and Error send, published on the reply subject.
type queuedReply struct {
	nc    *nats.Conn
	reply string
	stats *endpointStats
}

func (q queuedReply) Respond(data []byte, opts ...micro.RespondOpt) error {
	m := &nats.Msg{Subject: q.reply, Data: data}
	for _, o := range opts {
		o(m)
	}
	return q.nc.PublishMsg(m)
}

func (q queuedReply) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	if q.stats != nil {
		q.stats.Errors.Add(1)
	}
	m := &nats.Msg{Subject: q.reply, Data: data, Header: nats.Header{}}
	for _, o := range opts {
		o(m)
	}
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header.Set(micro.ErrorHeader, description)
	m.Header.Set(micro.ErrorCodeHeader, code)
	return q.nc.PublishMsg(m)
}
