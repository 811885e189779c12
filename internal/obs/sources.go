package obs

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Gauges read when scraped. The bank's ledger and the broker's view of the
// hosts are the daemons' own state, not events: read at scrape time they
// are as fresh as the scrape and cost nothing between scrapes, where
// keeping gauges up to date would cost the ledger query on every tick. A
// daemon names its source once it serves (SetBank, SetBroker); until then,
// and after it failed to read, the gauges are absent rather than zero (a
// scrape of a bank whose store is down reports no escrow, and counts the
// failure as a "scrape" error of the component). When two daemons of a kind
// share one Metrics (tests), the last one started is read.

// BankFigures are the bank's gauges, in credits.
type BankFigures struct {
	Escrow     float64 // the escrow account's balance
	OpenHolds  int     // holds open
	Held       float64 // what the open holds still hold
	Violations int     // ledger invariants violated (bank.Ledger)
}

// HostAge is how old the broker's newest state of a host is.
type HostAge struct {
	Host string
	Age  time.Duration
}

// BrokerFigures are the broker's gauges.
type BrokerFigures struct {
	Hosts    []HostAge
	LateJobs int // deadline jobs running past their deadline
}

// sourceTimeout bounds one scrape's read of a source (the bank's ledger
// query).
const sourceTimeout = 5 * time.Second

var (
	descEscrow     = prometheus.NewDesc("mrm_bank_escrow_credits", "Balance of the bank's escrow account (what open holds reserve), credits.", nil, nil)
	descOpenHolds  = prometheus.NewDesc("mrm_bank_open_holds", "Holds open at the bank.", nil, nil)
	descHeld       = prometheus.NewDesc("mrm_bank_held_credits", "What the open holds still hold (amount less captured and released), credits.", nil, nil)
	descViolations = prometheus.NewDesc("mrm_bank_invariant_violations",
		"Ledger invariants violated now (balances and holds against grants, escrow against holds, the accounts' sum, each hold's captures); 0 when sound.", nil, nil)
	descHostAge = prometheus.NewDesc("mrm_host_state_age_seconds",
		"How old the broker's newest state of a host is (its agent publishes one each tick: a growing age is a stale host), seconds.", []string{"host"}, nil)
	descLateJobs = prometheus.NewDesc("mrm_jobs_late", "Deadline jobs running past their deadline.", nil, nil)
)

// sources is the collector of the gauges read when scraped.
type sources struct {
	bank   atomic.Pointer[func(context.Context) (BankFigures, error)]
	broker atomic.Pointer[func() BrokerFigures]
	failed func(component string)
}

// SetBank makes read the source of the bank's gauges until the returned
// func is called (a bank that stops; a later SetBank's source stays).
func (m *Metrics) SetBank(read func(context.Context) (BankFigures, error)) (unset func()) {
	if m == nil {
		return func() {}
	}
	return set(&m.sources.bank, read)
}

// SetBroker makes read the source of the broker's gauges until the
// returned func is called.
func (m *Metrics) SetBroker(read func() BrokerFigures) (unset func()) {
	if m == nil {
		return func() {}
	}
	return set(&m.sources.broker, read)
}

func set[F any](p *atomic.Pointer[F], read F) func() {
	mine := &read
	p.Store(mine)
	return func() { p.CompareAndSwap(mine, nil) }
}

func (s *sources) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descEscrow, descOpenHolds, descHeld, descViolations, descHostAge, descLateJobs} {
		ch <- d
	}
}

func (s *sources) Collect(ch chan<- prometheus.Metric) {
	if read := s.bank.Load(); read != nil {
		ctx, cancel := context.WithTimeout(context.Background(), sourceTimeout)
		f, err := (*read)(ctx)
		cancel()
		if err != nil {
			s.failed("bank")
		} else {
			ch <- prometheus.MustNewConstMetric(descEscrow, prometheus.GaugeValue, f.Escrow)
			ch <- prometheus.MustNewConstMetric(descOpenHolds, prometheus.GaugeValue, float64(f.OpenHolds))
			ch <- prometheus.MustNewConstMetric(descHeld, prometheus.GaugeValue, f.Held)
			ch <- prometheus.MustNewConstMetric(descViolations, prometheus.GaugeValue, float64(f.Violations))
		}
	}
	if read := s.broker.Load(); read != nil {
		f := (*read)()
		for _, h := range f.Hosts {
			ch <- prometheus.MustNewConstMetric(descHostAge, prometheus.GaugeValue, h.Age.Seconds(), h.Host)
		}
		ch <- prometheus.MustNewConstMetric(descLateJobs, prometheus.GaugeValue, float64(f.LateJobs))
	}
}
