package broker

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"runtime"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/service"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Host state intake. A state the broker acts on says which VMs a host runs
// and at what price; whoever could publish one for another host could
// claim its VMs or poison its price. So, when the broker knows identities
// (Config.Identities and Config.AdminKey), a state counts only if it is
// sealed for its host (signing.SealHostState) by a key the admin registered as
// that host's agent (checked through the registry, service.Certified),
// sealed no later than MaxSkew ahead of the broker's signing clock and —
// live, not from the bucket — no earlier than maxStateAge behind it. Any
// other state is refused and counted: "forged_state" (unsealed, bad seal,
// unknown key, another host's key), "state_time" (from the future, or
// stale). A state from the future is thereby refused before it can make the
// broker ignore the real agent's later ones, live and in the catch-up after
// a restart alike. A broker without identities (the simulator, unit tests)
// takes plain and sealed states; a sealed one must still open for its host.
//
// Within the signing window a state can still claim to be from the future:
// a stolen agent key may seal a state two minutes ahead, with a time two
// minutes ahead, which a broker keeping each host's newest state would keep
// over every real state until its time came. So with identities a host's
// states are ordered by when they were sealed, as the broker's signing
// clock reads when they arrive: a seal ahead of that clock counts as sealed
// on arrival (and the state is counted, "state_ahead"), and the host's next
// real state, sealed later, replaces it whatever time it claims. The times
// a state claims are then reported, not trusted for order. This costs an
// agent whose clock runs ahead nothing; refusing states sealed more than a
// tick ahead instead would drop every state of such a host.

// maxStateAge is how old a live state's seal may be: older ones are
// replays.
const maxStateAge = signing.MaxSkew

// stateWhoisSize is how many agents' identities the intake remembers.
const stateWhoisSize = 16384

// errStateUnverified is a state whose signer could not be looked up now
// (the bank did not answer): dropped, the next tick brings another.
var errStateUnverified = errors.New("host state signer not verified")

// stateIntake checks host states for the broker.
type stateIntake struct {
	b     *Broker
	ids   service.Identities // certified; nil: no identities
	cache *service.WhoisCache

	// sealed is when each host's state the broker holds was sealed (or,
	// sealed ahead, arrived), with identities; mu guards it and orders the
	// live states' workers and the catch-up.
	mu     sync.Mutex
	sealed map[string]time.Time
}

func newStateIntake(b *Broker) *stateIntake {
	in := &stateIntake{b: b, sealed: map[string]time.Time{}}
	if b.cfg.Identities != nil && b.cfg.AdminKey != "" {
		in.ids = b.identities()
		in.cache = service.NewWhoisCache(whoisTTL, stateWhoisSize)
	}
	return in
}

// identities is Config.Identities believed only with the admin's records
// (service.Certified); a refused answer is counted.
func (b *Broker) identities() service.Identities {
	return service.Certified(b.cfg.Identities, b.cfg.AdminKey, func(string, error) {
		b.cfg.Metrics.Error("broker", "forged_whois")
	})
}

// signingNow is the clock seals are checked against.
func (b *Broker) signingNow() time.Time {
	if b.cfg.SigningClock != nil {
		return b.cfg.SigningClock()
	}
	return time.Now()
}

// subscribe takes the live states. Checking a seal costs a signature
// verification, too slow for one subscription callback to keep up with a
// large market's hosts (docs/MEASUREMENTS.md), so with identities the
// states are checked by GOMAXPROCS workers, each host's always by the same one (its
// states stay in order). A worker behind keeps only each host's latest
// state waiting (latestStates): the callback never blocks, so NATS never
// drops states as a slow consumer's — which would drop whole hosts' —
// and a host's older state, superseded, is the one not checked. Without
// identities the callback observes them itself, as before. unsubscribe
// stops both.
func (in *stateIntake) subscribe(nc *nats.Conn) (unsubscribe func(), err error) {
	take := func(m *nats.Msg) {
		ctx, cancel := context.WithTimeout(context.Background(), rpc.DefaultTimeout)
		defer cancel()
		_ = in.take(ctx, m.Data, true) // refused states are counted
	}
	if in.ids == nil {
		sub, err := nc.Subscribe(wire.AllHostStates, take)
		if err != nil {
			return nil, err
		}
		return func() { _ = sub.Unsubscribe() }, nil
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	workers := make([]*latestStates, max(runtime.GOMAXPROCS(0), 1))
	for i := range workers {
		workers[i] = newLatestStates()
		wg.Add(1)
		go func(q *latestStates) {
			defer wg.Done()
			for {
				select {
				case <-q.ready:
					for m := q.next(); m != nil; m = q.next() {
						take(m)
					}
				case <-done:
					return
				}
			}
		}(workers[i])
	}
	sub, err := nc.Subscribe(wire.AllHostStates, func(m *nats.Msg) {
		h := fnv.New32a()
		_, _ = h.Write([]byte(m.Subject))
		if workers[h.Sum32()%uint32(len(workers))].put(m) {
			in.b.cfg.Metrics.Error("broker", "state_coalesced")
		}
	})
	if err != nil {
		close(done)
		wg.Wait()
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = sub.Unsubscribe()
			close(done)
			wg.Wait()
		})
	}, nil
}

// latestStates are the live states waiting for one worker: each host's
// latest only, hosts in the order their first waiting state came.
type latestStates struct {
	mu      sync.Mutex
	waiting map[string]*nats.Msg // by subject (host)
	order   []string
	ready   chan struct{} // a state waits
}

func newLatestStates() *latestStates {
	return &latestStates{waiting: map[string]*nats.Msg{}, ready: make(chan struct{}, 1)}
}

// put queues m, in place of its host's state still waiting if any (it
// reports so: that one is superseded, never checked).
func (q *latestStates) put(m *nats.Msg) (superseded bool) {
	q.mu.Lock()
	_, superseded = q.waiting[m.Subject]
	if !superseded {
		q.order = append(q.order, m.Subject)
	}
	q.waiting[m.Subject] = m
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return superseded
}

// next takes the state waiting longest; nil when none is.
func (q *latestStates) next() *nats.Msg {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.order) == 0 {
		return nil
	}
	subject := q.order[0]
	q.order[0] = ""
	q.order = q.order[1:]
	m := q.waiting[subject]
	delete(q.waiting, subject)
	return m
}

// take checks a published state (live: from the subject, else from the
// bucket) and observes it if it counts; the error says why not.
func (in *stateIntake) take(ctx context.Context, data []byte, live bool) error {
	m, err := signing.DecodeHostState(data)
	if err != nil {
		in.b.cfg.Metrics.Error("broker", "bad_state")
		return err
	}
	if err := in.check(ctx, m, live); err != nil {
		switch {
		case errors.Is(err, signing.ErrStateTime):
			in.b.cfg.Metrics.Error("broker", "state_time")
		case errors.Is(err, errStateUnverified):
			in.b.cfg.Metrics.Error("broker", "state_unverified")
		default:
			in.b.cfg.Metrics.Error("broker", "forged_state")
		}
		return err
	}
	if in.ids == nil {
		in.b.Observe(m.State)
		return nil
	}
	in.observeSealed(m.State, m.Sealed.At())
	return nil
}

// observeSealed takes st, sealed at sealed, unless the broker holds a
// state of its host sealed later (see the top of this file).
func (in *stateIntake) observeSealed(st wire.HostState, sealed time.Time) {
	if now := in.b.signingNow(); sealed.After(now) {
		sealed = now
		in.b.cfg.Metrics.Error("broker", "state_ahead")
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if last, ok := in.sealed[st.Host]; ok && sealed.Before(last) {
		return
	}
	in.b.mu.Lock()
	defer in.b.mu.Unlock()
	if at, ok := in.b.retired[st.Host]; ok && !sealed.After(at) {
		return // checked before its agent's key was revoked, arriving after
	}
	in.sealed[st.Host] = sealed
	in.b.setHost(st)
}

func (in *stateIntake) check(ctx context.Context, m signing.HostStateMsg, live bool) error {
	if in.ids == nil {
		if m.Sealed != nil {
			_, err := signing.Open(*m.Sealed, signing.HostStatePurpose(m.State.Host))
			return err
		}
		return nil
	}
	maxAge := time.Duration(0)
	if live {
		maxAge = maxStateAge
	}
	now := in.b.signingNow()
	key, err := signing.OpenHostState(m, now, maxAge)
	if err != nil {
		return err
	}
	p, ok := in.cache.Get(key, now)
	if !ok {
		if p, err = in.ids.Whois(ctx, key); err != nil {
			if errors.Is(err, wire.ErrForbidden) || errors.Is(err, wire.ErrNotFound) {
				return fmt.Errorf("%w: %v", signing.ErrStateSigner, err)
			}
			return fmt.Errorf("%w: %v", errStateUnverified, err)
		}
		in.cache.Put(key, p, now)
	}
	if p.Role != wire.RoleAgent || p.Name != m.State.Host {
		return fmt.Errorf("%w: %s sealed by %s %s", signing.ErrStateSigner, m.State.Host, p.Role, p.Name)
	}
	return nil
}
