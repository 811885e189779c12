package agent

import (
	"log/slog"
	"time"

	"github.com/mrmarket/mrmarket/internal/service"
)

// laps times the phases of one round (a tick, a bid change) on the wall
// clock, for the log of a slow one: when shares move late, where the
// round's time went (a lock, the bank, the state file, libvirt) is what
// an operator asks first. A nil *laps times nothing.
//
// Every tick of every host laps a dozen times and is almost never slow
// (a simulator runs millions of ticks), so a lap only records its name
// and time in an array on the caller's stack; they become log attributes
// only when a round is logged.
type laps struct {
	start, last time.Time
	phases      [maxPhases]phase
	n           int     // laps in phases
	more        []phase // laps beyond maxPhases (none in a tick or a bid change)
}

// phase is one lap: its name and how long it took.
type phase struct {
	name string
	took time.Duration
}

// maxPhases is room for the laps of a tick (a dozen, see Tick).
const maxPhases = 16

func startLaps() *laps {
	now := time.Now()
	return &laps{start: now, last: now}
}

// lap ends the phase named phase.
func (l *laps) lap(name string) {
	if l == nil {
		return
	}
	now := time.Now()
	p := phase{name, now.Sub(l.last)}
	if l.n < maxPhases {
		l.phases[l.n] = p
		l.n++
	} else {
		l.more = append(l.more, p)
	}
	l.last = now
}

// logIfSlow logs the round as one warning, with attrs() and each phase's
// time, if it took service.SlowRequest or more (the bar of a slow request,
// which a bid change is; a tick that long delays the next). attrs is a
// function so that a round that is not slow boxes none of them.
func (l *laps) logIfSlow(log *slog.Logger, msg string, attrs func() []any) {
	took := time.Since(l.start)
	if took < service.SlowRequest {
		return
	}
	all := append(attrs(), "took", took.Round(time.Millisecond))
	for _, p := range append(l.phases[:l.n:l.n], l.more...) {
		all = append(all, p.name, p.took.Round(time.Millisecond))
	}
	log.Warn(msg, all...)
}
