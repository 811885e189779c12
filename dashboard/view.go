package dashboard

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/retry"
	"github.com/mrmarket/mrmarket/internal/rpc"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Who is a signed-in principal.
type Who struct {
	Role string `json:"role"`
	Name string `json:"name"`
}

// Admin reports whether who is the admin.
func (w Who) Admin() bool { return w.Role == wire.RoleAdmin }

// Snapshot is what one principal's view last read of the market, each
// part as the market answered that principal. A part that could not be
// read this time keeps its last figures, and Errors says why.
type Snapshot struct {
	Who     Who                `json:"who"`
	At      time.Time          `json:"at"`
	Hosts   []wire.HostPrice   `json:"hosts"`
	VMs     wire.VMsReply      `json:"vms"`
	Plans   []wire.Plan        `json:"plans"`
	Jobs    []wire.Job         `json:"jobs"`
	Balance *wire.BalanceReply `json:"balance,omitempty"`    // a user's own
	Ledger  *wire.LedgerReply  `json:"ledger,omitempty"`     // the admin's
	Holds   []wire.OpenHold    `json:"open_holds,omitempty"` // the admin's
	Events  []wire.Event       `json:"events,omitempty"`     // newest first, captures apart
	// Captures counts the audit stream's captures of the last minute, by
	// the host whose agent captured.
	Captures map[string]int `json:"captures_last_minute,omitempty"`
	// EventsRefused is why the audit stream is not shown: the market
	// refused it to this principal.
	EventsRefused string            `json:"events_refused,omitempty"`
	Errors        map[string]string `json:"errors,omitempty"`
}

// frame is a published view: the snapshot and its page sections rendered.
type frame struct {
	Snapshot
	Sections map[string]template.HTML
}

// view is one principal's window on the market: a NATS connection with its
// key, polled every Period, its history and its latest frame.
type view struct {
	d     *Dashboard
	who   rpc.As
	warm  bool
	ready chan struct{} // closed once the first frame is out

	mu       sync.Mutex
	frame    frame
	changed  chan struct{} // closed, and replaced, when the frame changes
	lastSeen time.Time
	done     bool
	unwell   error

	hist   history  // run's own
	events eventLog // the admin's audit stream
}

func newView(d *Dashboard, who rpc.As, warm bool) *view {
	v := &view{d: d, who: who, warm: warm, ready: make(chan struct{}), changed: make(chan struct{})}
	v.frame.Sections = map[string]template.HTML{}
	v.frame.Who = Who{Role: who.Role, Name: who.Name}
	v.hist.window, v.hist.period = d.cfg.History, d.cfg.Period
	return v
}

// connectRetry is how a view connects again while the market is not
// there: soon at first, then every 10 s, until no page wants it.
var connectRetry = retry.Options{InitialBackoff: 500 * time.Millisecond, MaxBackoff: 10 * time.Second, Multiplier: 2, Jitter: 0.2}

// run connects as the view's principal and polls until the dashboard
// closes or no page has wanted the view for viewIdle.
func (v *view) run(ctx context.Context) {
	defer v.stop()
	signer, err := v.d.cfg.Keys.Signer(v.who.Role, v.who.Name)
	if err != nil {
		v.failed(err)
		return
	}
	var nc *nats.Conn
	for r := retry.Start(ctx, connectRetry); r.Next() && !v.idle(); {
		if nc, err = v.d.cfg.Connect("mrmarket-dashboard-"+v.who.Name, signer); err == nil {
			break
		}
		v.failed(fmt.Errorf("cannot reach the market: %w", err))
	}
	if nc == nil {
		return
	}
	defer nc.Close()
	refused := newRefusal()
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			refused.set(err)
		}
	})
	c := clients{
		bank:   bank.Client{NC: nc, Signer: signer, AdminKey: v.d.cfg.AdminKey},
		broker: broker.Client{NC: nc, Signer: signer, AdminKey: v.d.cfg.AdminKey, Reader: v.who},
	}
	v.setUnwell(nil)
	stopEvents := v.events.follow(ctx, nc, refused)
	defer stopEvents()
	t := time.NewTicker(v.d.cfg.Period)
	defer t.Stop()
	for {
		v.poll(ctx, c)
		if !nc.IsConnected() {
			v.setUnwell(fmt.Errorf("NATS connection %s", nc.Status()))
		} else {
			v.setUnwell(nil)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if v.idle() {
			return
		}
	}
}

// clients are the market's services as the view's principal reaches them:
// every request signed with its key alone.
type clients struct {
	bank   bank.Client
	broker broker.Client
}

// read sets *dst from get, or leaves it and says why in errs.
func read[T any](errs map[string]string, what string, dst *T, get func() (T, error)) {
	r, err := get()
	if err != nil {
		errs[what] = err.Error()
		return
	}
	*dst = r
}

// poll reads the market as the view's principal and publishes a frame.
// The requests are the same for every user — the market decides what each
// answer holds (a user's plans, jobs and VMs are its own; others' VMs come
// only as per-host aggregates) — and the admin's money is the ledger and
// the open holds, which the bank answers only the admin.
func (v *view) poll(ctx context.Context, c clients) {
	ctx, cancel := context.WithTimeout(ctx, max(3*v.d.cfg.Period, 3*time.Second))
	defer cancel()
	v.mu.Lock()
	s := v.frame.Snapshot
	v.mu.Unlock()
	s.At, s.Errors = time.Now(), map[string]string{}
	read(s.Errors, "hosts", &s.Hosts, func() ([]wire.HostPrice, error) {
		rep, err := c.broker.Price(ctx, &wire.PriceRequest{})
		return rep.Hosts, err
	})
	read(s.Errors, "VMs", &s.VMs, func() (wire.VMsReply, error) { return c.broker.VMs(ctx, &wire.VMsRequest{}) })
	read(s.Errors, "plans", &s.Plans, func() ([]wire.Plan, error) {
		rep, err := c.broker.Plans(ctx, &wire.PlansRequest{})
		return rep.Plans, err
	})
	read(s.Errors, "jobs", &s.Jobs, func() ([]wire.Job, error) {
		rep, err := c.broker.Jobs(ctx, &wire.JobsRequest{})
		return rep.Jobs, err
	})
	if v.who.Role == wire.RoleAdmin {
		read(s.Errors, "ledger", &s.Ledger, func() (*wire.LedgerReply, error) {
			rep, err := c.bank.Ledger(ctx)
			return &rep, err
		})
		read(s.Errors, "holds", &s.Holds, func() ([]wire.OpenHold, error) {
			rep, err := c.bank.OpenHolds(ctx, &wire.OpenHoldsRequest{Before: s.At.Add(time.Hour)})
			return rep.Holds, err
		})
	} else {
		read(s.Errors, "balance", &s.Balance, func() (*wire.BalanceReply, error) {
			rep, err := c.bank.Balance(ctx, &wire.BalanceRequest{User: v.who.Name})
			return &rep, err
		})
	}
	var trouble string
	s.Events, s.Captures, s.EventsRefused, trouble = v.events.latest(s.At)
	if trouble != "" {
		s.Errors["audit stream"] = trouble
	}
	if len(s.Errors) == 0 {
		s.Errors = nil
	}
	if _, failed := s.Errors["hosts"]; !failed {
		v.d.prices.record(s.At, s.Hosts)
	}
	v.hist.record(s, s.Errors)
	v.publish(s)
}

// failed publishes a frame that says why the view has no figures.
func (v *view) failed(err error) {
	v.d.cfg.Logger.Warn("dashboard view", "role", v.who.Role, "name", v.who.Name, "err", err)
	v.setUnwell(err)
	v.mu.Lock()
	s := v.frame.Snapshot
	v.mu.Unlock()
	s.At, s.Errors = time.Now(), map[string]string{"market": err.Error()}
	v.publish(s)
}

// publish renders s and makes it the view's frame, waking the live
// streams when a section changed.
func (v *view) publish(s Snapshot) {
	sections := renderSections(s, &v.hist, v.d.prices.snapshot())
	v.mu.Lock()
	changed := len(sections) != len(v.frame.Sections)
	for id, html := range sections {
		if v.frame.Sections[id] != html {
			changed = true
		}
	}
	v.frame = frame{Snapshot: s, Sections: sections}
	if changed {
		close(v.changed)
		v.changed = make(chan struct{})
	}
	v.mu.Unlock()
	select {
	case <-v.ready:
	default:
		close(v.ready)
	}
}

// current is the latest frame.
func (v *view) current() frame {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.frame
}

// watch is the latest frame and a channel closed when the next one differs.
func (v *view) watch() (frame, <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.lastSeen = time.Now()
	return v.frame, v.changed
}

func (v *view) touch() {
	v.mu.Lock()
	v.lastSeen = time.Now()
	v.mu.Unlock()
}

// idle: no page has asked for a cold view for viewIdle.
func (v *view) idle() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return !v.warm && time.Since(v.lastSeen) > viewIdle
}

func (v *view) stop() {
	v.mu.Lock()
	v.done = true
	v.mu.Unlock()
	select {
	case <-v.ready:
	default:
		close(v.ready)
	}
}

func (v *view) stopped() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.done
}

func (v *view) setUnwell(err error) {
	v.mu.Lock()
	v.unwell = err
	v.mu.Unlock()
}

func (v *view) healthy() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.unwell
}

// point is one value of a series at a time.
type point struct {
	T time.Time
	V float64
}

// history is the money chart's figures of the view's principal over the
// last window (the prices are the dashboard's: priceHistory).
type history struct {
	window time.Duration
	period time.Duration // between readings
	money  [3][]point    // credits: see moneySeries
}

// record adds s's money figures at s.At, when they were read this time.
func (h *history) record(s Snapshot, errs map[string]string) {
	vals, ok := moneyFigures(s, errs)
	if ok {
		for i := range h.money {
			h.money[i] = trim(append(h.money[i], point{s.At, vals[i]}), h.window)
		}
	}
}

// priceHistory is each host's price over the last window, as every view
// read it. Host prices are public — the broker tells every principal every
// host's — so the dashboard keeps one history for all, and a user's chart
// reaches back to the dashboard's start rather than to their sign-in.
type priceHistory struct {
	mu     sync.Mutex
	window time.Duration
	byHost map[string][]point // credits per hour
}

// record adds the prices read at at; a reading older than the host's last
// (another view's, answered sooner) adds nothing.
func (p *priceHistory) record(at time.Time, hosts []wire.HostPrice) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byHost == nil {
		p.byHost = map[string][]point{}
	}
	for _, h := range hosts {
		ps := p.byHost[h.Host]
		if len(ps) > 0 && !at.After(ps[len(ps)-1].T) {
			continue
		}
		p.byHost[h.Host] = trim(append(ps, point{at, perHour(h.Price)}), p.window)
	}
}

// snapshot is every host's points now; each slice is only ever appended to
// or replaced, so the caller may read it while record goes on.
func (p *priceHistory) snapshot() map[string][]point {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string][]point, len(p.byHost))
	for h, ps := range p.byHost {
		out[h] = slices.Clip(ps)
	}
	return out
}

// trim drops points older than window before the last.
func trim(ps []point, window time.Duration) []point {
	if len(ps) == 0 {
		return ps
	}
	cut := ps[len(ps)-1].T.Add(-window)
	i, _ := slices.BinarySearchFunc(ps, cut, func(p point, t time.Time) int { return p.T.Compare(t) })
	if i > 0 && i > len(ps)/2 { // copy rarely: only once half is stale
		return slices.Clone(ps[i:])
	}
	return ps
}

// moneySeries name the money chart's series: a user's own balance, held
// and spent; the admin's users' balances, open holds and what the hosts
// were paid.
var moneySeries = map[bool][3]string{
	false: {"balance", "held by plans", "spent"},
	true:  {"in users' accounts", "held by plans", "paid to hosts"},
}

// moneyFigures are the money chart's values in s, in credits.
func moneyFigures(s Snapshot, errs map[string]string) ([3]float64, bool) {
	if s.Who.Admin() {
		if _, failed := errs["ledger"]; failed || s.Ledger == nil {
			return [3]float64{}, false
		}
		var users, hosts money.Micro
		for _, a := range s.Ledger.Accounts {
			switch a.Kind {
			case wire.AccountUser:
				users += a.Balance
			case wire.AccountProvider:
				hosts += a.Balance
			}
		}
		return [3]float64{users.Credits(), s.Ledger.OpenHolds.Credits(), hosts.Credits()}, true
	}
	if _, failed := errs["balance"]; failed || s.Balance == nil {
		return [3]float64{}, false
	}
	b := s.Balance
	return [3]float64{b.Balance.Credits(), b.Held.Credits(), b.Spent.Credits()}, true
}

// perHour is a rate in micro-credits per second as credits per hour.
func perHour(microPerSecond float64) float64 {
	return microPerSecond * 3600 / float64(money.PerCredit)
}
