// Package stop is the daemons' one lifecycle and their one periodic loop.
//
// # Stopper
//
// A Stopper owns what a process started: tasks (goroutines, each named)
// and closers (connections, services, stores). Stop quiesces first: no task
// starts any more, every running task's context is cancelled, and Stop
// waits until each has returned; only then do the closers run, in reverse
// order of registration, so a connection closes after the service that
// answers on it and a store after everything that wrote to it. Stop is
// idempotent, and a second caller waits for the first to finish. This is
// CockroachDB's pkg/util/stop in miniature: tasks that end on quiesce,
// closers after them, nothing started once stopping.
//
// Tasks observe quiescing through their context (cancelled by Stop or by
// the context they were started with, whichever ends first) rather than a
// channel of their own: the code they run already ends on ctx.Done().
//
// # Ticker
//
// Every periodic loop of the daemons (the agents' rounds, the bank's hold
// expiry and income, the broker's plan ends, up's simulated jobs, a NATS
// node following its registry) is a Ticker. Its policy is decided once,
// here:
//
//   - The cadence never changes. A tick is both the repair pass and the
//     heartbeat of a level-triggered loop: it works from what is, not from
//     what happened, so a failed tick is retried by the next one, on time.
//     Backing off the loop would delay the repair and silence the heartbeat
//     (an agent's published state is how the broker knows the host lives).
//   - Every failure is counted: Metrics.Error(component, "tick").
//   - Logging backs off: the first failure in a row is logged at once with
//     its error, then only the 2nd, 4th, 8th… consecutive one (with the
//     count), and the first success after failures is logged once ("tick
//     recovered after N failures"). A loop failing every second for an
//     hour writes a dozen lines, not thousands, and its end is visible.
//   - A tick that fails because its context ended (the daemon stopping) is
//     neither counted nor logged.
package stop

import (
	"context"
	"errors"
	"slices"
	"sync"
)

// ErrStopping is RunTask's answer once Stop has begun: the task never ran.
var ErrStopping = errors.New("stop: stopping, no new task")

// Stopper runs tasks and closes what they used, in order (see the package
// doc). The zero value is not usable: New makes one.
type Stopper struct {
	mu       sync.Mutex
	stopping bool
	quiesce  context.CancelFunc // cancels every task's context
	base     context.Context    // parent of every task's context
	running  map[string]int     // tasks by name, for Running
	closers  []func()
	tasks    sync.WaitGroup
	stopped  chan struct{}
}

// New returns a Stopper with no task and no closer.
func New() *Stopper {
	base, quiesce := context.WithCancel(context.Background())
	return &Stopper{base: base, quiesce: quiesce, running: map[string]int{}, stopped: make(chan struct{})}
}

// RunTask runs f in a goroutine of its own, named name, with a context that
// ends when ctx ends or the stopper quiesces. Once Stop has begun it returns
// ErrStopping and f never runs.
func (s *Stopper) RunTask(ctx context.Context, name string, f func(ctx context.Context)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return ErrStopping
	}
	s.running[name]++
	s.tasks.Add(1)
	tctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(s.base, cancel)
	go func() {
		defer s.done(name)
		defer cancel()
		defer unhook()
		f(tctx)
	}()
	return nil
}

func (s *Stopper) done(name string) {
	s.mu.Lock()
	if s.running[name]--; s.running[name] == 0 {
		delete(s.running, name)
	}
	s.mu.Unlock()
	s.tasks.Done()
}

// Running names the tasks still running, sorted, a name once per task.
func (s *Stopper) Running() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for name, n := range s.running {
		for range n {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// AddCloser registers f to run after every task ended, before the closers
// registered earlier. Once Stop has begun, f runs at once: what it closes
// was opened too late to be used.
func (s *Stopper) AddCloser(f func()) {
	s.mu.Lock()
	if !s.stopping {
		s.closers = append(s.closers, f)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	f()
}

// Stop quiesces (no new task; every task's context cancelled; waits for
// the tasks to return), then runs the closers in reverse order. A second
// call waits for the first to finish.
func (s *Stopper) Stop() {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		<-s.stopped
		return
	}
	s.stopping = true
	s.mu.Unlock()
	defer close(s.stopped)
	s.quiesce()
	s.tasks.Wait()
	s.mu.Lock()
	closers := s.closers
	s.closers = nil
	s.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
}

// Stopped is closed once Stop has finished.
func (s *Stopper) Stopped() <-chan struct{} { return s.stopped }
