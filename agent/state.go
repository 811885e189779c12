package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Restart safety. With Config.StateFile set, the agent writes its bid book
// and capture totals to the file (atomically: a temporary file, fsync,
// rename) before it answers a bid change and after every capture, and New
// reads it back and enforces the shares at once. Captures are cumulative, so
// an agent restarted from a state older than its last capture re-sends
// totals the bank already has and nothing is charged twice; a bid change
// acknowledged to the broker is always in the file.
//
// Downtime is not charged. The file records when it was written (Saved, on
// the agent's clock: every tick and every bid change write it). An agent
// starting from it knows nobody enforced its bids since then, so each bid
// is excused the part of that gap inside its period: it keeps its end and
// charges floor(B·t/D) over the time t an agent enforced it, less than B
// if an agent was down (the broker releases the rest with the plan). The
// excused time is kept in the file, so a later restart keeps it.

// savedState is the state file's content.
type savedState struct {
	Version int          `json:"version"`
	Host    string       `json:"host"`
	Bids    []savedBid   `json:"bids"`
	Totals  []savedTotal `json:"totals"`
	Round   int64        `json:"round"`
	Ticks   int64        `json:"ticks"`
	// Saved is when the file was written, on the agent's clock.
	Saved time.Time `json:"saved,omitzero"`
}

// stateVersion is the state file's format: 2 keeps one bid per (VM, plan)
// and the time excused; version 1 files (one bid per VM) are read too.
const stateVersion = 2

type savedBid struct {
	wire.Bid
	Start   time.Time     `json:"start"`
	Base    money.Micro   `json:"base"`
	Excused time.Duration `json:"excused,omitempty"`
}

type savedTotal struct {
	Hold     string      `json:"hold"`
	VM       string      `json:"vm"`
	Total    money.Micro `json:"total"`
	Captured money.Micro `json:"captured"`
}

// save makes the book as it is now durable in the state file; a no-op
// without one. It is a group commit: one write at a time, each reading the
// book under mu only once it started (so a stale state never overwrites a
// newer one), and a caller that asks while one is being written waits for
// the next, which the first of the waiters writes for all of them.
func (a *Agent) save() error {
	if a.cfg.StateFile == "" {
		return nil
	}
	a.saveMu.Lock()
	defer a.saveMu.Unlock()
	a.saveWant++
	want := a.saveWant
	for a.saveDone < want {
		if a.saving {
			a.saved.Wait()
			continue
		}
		a.saving = true
		upTo := a.saveWant
		a.saveMu.Unlock()
		err := a.write()
		a.saveMu.Lock()
		a.saving = false
		a.saveDone, a.saveErr = upTo, err
		a.saved.Broadcast()
	}
	return a.saveErr
}

// stateWrites bounds the state files written at once in this process: the
// agents of up's thousand simulated hosts each save every tick, and each
// fsync in progress holds an OS thread.
var stateWrites = make(chan struct{}, 4)

// write writes the book to the state file.
func (a *Agent) write() error {
	a.mu.Lock()
	s := a.savedState()
	a.mu.Unlock()
	data, err := json.MarshalIndent(s, "", " ")
	if err != nil {
		return fmt.Errorf("agent %s: state file: %w", a.cfg.Host, err)
	}
	stateWrites <- struct{}{}
	defer func() { <-stateWrites }()
	if err := writeAtomic(a.cfg.StateFile, data); err != nil {
		return fmt.Errorf("agent %s: state file: %w", a.cfg.Host, err)
	}
	return nil
}

// savedState is the book as the state file keeps it; under mu.
func (a *Agent) savedState() savedState {
	s := savedState{Version: stateVersion, Host: a.cfg.Host, Round: a.round, Ticks: a.ticks, Saved: a.cfg.Now()}
	for _, b := range a.bids {
		s.Bids = append(s.Bids, savedBid{Bid: b.Bid, Start: b.start, Base: b.base, Excused: b.excused})
	}
	sort.Slice(s.Bids, func(i, j int) bool {
		if s.Bids[i].VM != s.Bids[j].VM {
			return s.Bids[i].VM < s.Bids[j].VM
		}
		return s.Bids[i].Plan < s.Bids[j].Plan
	})
	for k, t := range a.total {
		s.Totals = append(s.Totals, savedTotal{Hold: k.hold, VM: k.vm, Total: t, Captured: a.captured[k]})
	}
	sort.Slice(s.Totals, func(i, j int) bool {
		if s.Totals[i].Hold != s.Totals[j].Hold {
			return s.Totals[i].Hold < s.Totals[j].Hold
		}
		return s.Totals[i].VM < s.Totals[j].VM
	})
	return s
}

// writeAtomic replaces path with data: a temporary file, fsync, rename, so
// a crash leaves the old file or the new one, never a torn one.
func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".agent-state-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// load reads the state file, if there is one; New calls it before the
// agent is shared.
func (a *Agent) load() error {
	if a.cfg.StateFile == "" {
		return nil
	}
	data, err := os.ReadFile(a.cfg.StateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agent %s: reading state: %w", a.cfg.Host, err)
	}
	now := a.cfg.Now()
	var s savedState
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("agent %s: state file %s is corrupt: %w", a.cfg.Host, a.cfg.StateFile, err)
	}
	if s.Version < 1 || s.Version > stateVersion || s.Host != a.cfg.Host {
		return fmt.Errorf("agent %s: state file %s is for host %q (version %d)", a.cfg.Host, a.cfg.StateFile, s.Host, s.Version)
	}
	for _, b := range s.Bids {
		if err := b.Bid.Validate(); err != nil {
			return fmt.Errorf("agent %s: state file: %w", a.cfg.Host, err)
		}
		nb := &bid{Bid: b.Bid, start: b.Start, base: b.Base, excused: b.Excused}
		nb.excused += excused(nb, s.Saved, now)
		a.bids[nb.place()] = nb
		a.downtime = max(a.downtime, now.Sub(s.Saved))
	}
	for _, t := range s.Totals {
		k := legKey{t.Hold, t.VM}
		a.total[k], a.captured[k] = t.Total, t.Captured
	}
	a.round, a.ticks = s.Round, s.Ticks
	return nil
}

// excused is the part of the downtime from saved to now inside b's
// period: the time nobody enforced it.
func excused(b *bid, saved, now time.Time) time.Duration {
	if saved.IsZero() {
		return 0
	}
	from, to := saved, now
	if b.start.After(from) {
		from = b.start
	}
	if b.end().Before(to) {
		to = b.end()
	}
	if !to.After(from) {
		return 0
	}
	return to.Sub(from)
}
