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
type laps struct {
	start, last time.Time
	phases      []any // name, duration, ...
}

func startLaps() *laps {
	now := time.Now()
	return &laps{start: now, last: now}
}

// lap ends the phase named phase.
func (l *laps) lap(phase string) {
	if l == nil {
		return
	}
	now := time.Now()
	l.phases = append(l.phases, phase, now.Sub(l.last).Round(time.Millisecond))
	l.last = now
}

// logIfSlow logs the round as one warning, with attrs and each phase's
// time, if it took service.SlowRequest or more (the bar of a slow request,
// which a bid change is; a tick that long delays the next).
func (l *laps) logIfSlow(log *slog.Logger, msg string, attrs ...any) {
	took := time.Since(l.start)
	if took < service.SlowRequest {
		return
	}
	log.Warn(msg, append(append(attrs, "took", took.Round(time.Millisecond)), l.phases...)...)
}
