package broker

import (
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
)

// Stale hosts. A host whose agent stopped keeps its last state here: its
// VMs' rates and shares as they were. The answers say so (Stale) once the
// agent has missed staleTicks of its ticks, its tick read from its states'
// times (their tick counter and clock), or the broker's own tick until two
// states have come (and at least staleAfter); and the broker logs when a
// host goes silent and when it is heard again. A host taken out for good is retired (retire.go).

// staleTicks is how many of its agent's ticks a host may miss before its
// state is shown as stale, and staleAfter the least silence that is: one
// late state, or a second's hiccup of a loaded machine, is not silence.
const (
	staleTicks = 3
	staleAfter = 5 * time.Second
)

// notePeriod learns the host's tick from two of its states in order; b.mu
// must be held.
func (b *Broker) notePeriod(old, st wire.HostState) {
	if n := st.Tick - old.Tick; n > 0 && st.Time.After(old.Time) {
		b.periods[st.Host] = st.Time.Sub(old.Time) / time.Duration(n)
	}
}

// stale reports whether st, its host's latest state, is stale at now; b.mu
// must be held.
func (b *Broker) stale(st wire.HostState, now time.Time) bool {
	period := max(b.periods[st.Host], b.cfg.Tick)
	return now.Sub(st.Time) > max(staleTicks*period, staleAfter)
}

// logStaleHosts logs each host that went stale, or was heard again, since
// the last call.
func (b *Broker) logStaleHosts(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for host, st := range b.hosts {
		_, retired := b.retired[host]
		stale := b.stale(st, now) && !retired
		switch {
		case stale && !b.staleSeen[host]:
			b.cfg.Logger.Warn("broker: host stale: no state from its agent", "host", host, "since", st.Time.UTC().Format(time.RFC3339),
				"replica", b.cfg.Replica)
		case !stale && b.staleSeen[host]:
			b.cfg.Logger.Info("broker: host heard again", "host", host, "replica", b.cfg.Replica)
		}
		b.staleSeen[host] = stale
	}
}
