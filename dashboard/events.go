package dashboard

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mrmarket/mrmarket/internal/retry"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// maxEvents is how many of the latest audit events a view shows, and
// readBack how many it reads back at its start to find them among the
// captures (every agent captures every tick).
const (
	maxEvents = 50
	readBack  = 1000
)

// eventLog is a view's tail of the audit stream (MRM_EVENTS), or why the
// market would not give it. Captures are counted apart: they are every
// host's every tick, and would bury the requests people make.
type eventLog struct {
	mu       sync.Mutex
	events   []wire.Event // oldest first, captures apart
	captures []capture    // oldest first, the last minute's
	refused  string
	trouble  string // why the stream is not followed right now
}

// capture is one capture event: when, and which host's agent.
type capture struct {
	at   time.Time
	host string
}

// captureWindow is how far back captures are counted.
const captureWindow = time.Minute

// refusal is the NATS server's refusal of something to a connection's
// principal (a permission violation, which it reports apart from the
// request, which then gets no answer).
type refusal struct {
	once sync.Once
	done chan struct{}
	err  error
}

func newRefusal() *refusal { return &refusal{done: make(chan struct{})} }

func (r *refusal) set(err error) {
	r.once.Do(func() {
		r.err = err
		close(r.done)
	})
}

// follow reads the audit stream on nc, as nc's principal, from its last
// readBack events on, until ctx ends. Every principal asks: the NATS server
// gives JetStream to the admin only, and its refusal is shown as the
// market's answer, not asked again.
func (l *eventLog) follow(ctx context.Context, nc *nats.Conn, refused *refusal) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		js, err := jetstream.New(nc)
		if err != nil {
			l.setTrouble(err)
			return
		}
		for r := retry.Start(ctx, connectRetry); r.Next(); {
			err := l.consume(ctx, js, refused)
			if ctx.Err() != nil {
				return
			}
			select {
			case <-refused.done:
				l.mu.Lock()
				l.refused, l.trouble = refused.err.Error(), ""
				l.mu.Unlock()
				return
			default:
			}
			l.setTrouble(err)
		}
	}()
	return func() { cancel(); <-done }
}

// consume follows the stream until ctx ends (nil) or it cannot (why).
func (l *eventLog) consume(ctx context.Context, js jetstream.JetStream, refused *refusal) error {
	ask, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	go func() { // a refused request gets no answer: stop waiting for one
		select {
		case <-refused.done:
			cancel()
		case <-ask.Done():
		}
	}()
	st, err := js.Stream(ask, wire.StreamEvents)
	if err != nil {
		return err
	}
	cfg := jetstream.OrderedConsumerConfig{}
	if last := st.CachedInfo().State.LastSeq; last > readBack {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, last-readBack+1
	}
	cons, err := st.OrderedConsumer(ask, cfg)
	if err != nil {
		return err
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var ev wire.Event
		if json.Unmarshal(m.Data(), &ev) != nil {
			ev = wire.Event{Op: "?", Component: "?"} // not ours: still shown, as unreadable
		}
		l.add(ev)
	})
	if err != nil {
		return err
	}
	l.setTrouble(nil)
	<-ctx.Done()
	cc.Stop()
	return nil
}

// add keeps ev, each id once (a publisher may store an event again after
// the stream's duplicate window), a capture as a count.
func (l *eventLog) add(ev wire.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ev.Op == "capture" {
		l.captures = append(l.captures, capture{at: ev.At, host: ev.Principal.Name})
		l.forgetCaptures(ev.At)
		return
	}
	for _, e := range l.events {
		if ev.ID != "" && e.ID == ev.ID {
			return
		}
	}
	l.events = append(l.events, ev)
	if len(l.events) > maxEvents {
		l.events = append(l.events[:0:0], l.events[len(l.events)-maxEvents:]...)
	}
}

func (l *eventLog) setTrouble(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.trouble = ""
	if err != nil {
		l.trouble = err.Error()
	}
}

// forgetCaptures drops the captures before captureWindow ago. l.mu is
// held.
func (l *eventLog) forgetCaptures(now time.Time) {
	i := 0
	for i < len(l.captures) && now.Sub(l.captures[i].at) > captureWindow {
		i++
	}
	if i > len(l.captures)/2 {
		l.captures = append(l.captures[:0:0], l.captures[i:]...)
	}
}

// latest are the events but captures, newest first; the captures of the
// last minute up to now, by host; and why there are none to show when the
// market refused them (or, while it cannot be read, why not).
func (l *eventLog) latest(now time.Time) (events []wire.Event, captures map[string]int, refused, trouble string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	events = make([]wire.Event, len(l.events))
	for i, e := range l.events {
		events[len(events)-1-i] = e
	}
	for _, c := range l.captures {
		if now.Sub(c.at) <= captureWindow {
			if captures == nil {
				captures = map[string]int{}
			}
			captures[c.host]++
		}
	}
	return events, captures, l.refused, l.trouble
}
