// Package obs is mrmarket's observability plumbing: the Prometheus metrics
// every daemon exports and the HTTP server that serves /metrics, /healthz and /readyz.
//
// Metrics live on a registry passed in, never the global one, so several
// components (or several test markets) can live in one process. A nil
// *Metrics is valid and records nothing.
package obs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the market's metrics: price and shares per host, captures,
// requests and their latency, errors per component, the deadline service's
// jobs, and what is read when scraped (sources.go: the bank's ledger, the
// hosts' staleness). Every figure is in base units, as Prometheus names
// them: credits (not micro-credits), seconds, bytes.
type Metrics struct {
	HostPrice       *prometheus.GaugeVec     // host
	VMShare         *prometheus.GaugeVec     // host, vm
	VMRate          *prometheus.GaugeVec     // host, vm
	ResourceMode    *prometheus.GaugeVec     // host, resource, mode
	VMCap           *prometheus.GaugeVec     // host, vm, resource
	VMShortfall     *prometheus.GaugeVec     // host, vm, resource
	Captures        *prometheus.CounterVec   // host
	CapturedCredits *prometheus.CounterVec   // host
	Ticks           *prometheus.CounterVec   // host
	Requests        *prometheus.CounterVec   // component, op, code
	RequestSeconds  *prometheus.HistogramVec // component, op
	Errors          *prometheus.CounterVec   // component, kind
	PlansRunning    prometheus.Gauge
	JobsAdmitted    *prometheus.CounterVec // kind
	JobDeadlines    *prometheus.CounterVec // outcome
	JobLateness     prometheus.Histogram
	sources         *sources
}

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		HostPrice: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mrm_host_price_credits_per_second",
			Help: "Sum of the funded spending rates on a host (Sandholm & Lai's price y, Eq. 1), credits per second.",
		}, []string{"host"}),
		VMShare: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mrm_vm_share", Help: "Share of its host a VM is entitled to (0..1).",
		}, []string{"host", "vm"}),
		VMRate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mrm_vm_rate_credits_per_second", Help: "Spending rate of a VM's bids, credits per second.",
		}, []string{"host", "vm"}),
		ResourceMode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mrm_host_resource_mode", Help: "1 for how a host delivers a resource's shares (mode: weights, throttle, none), 0 for the modes it does not use.",
		}, []string{"host", "resource", "mode"}),
		VMCap: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mrm_vm_cap_bytes_per_second",
			Help: "A throttled resource's bandwidth cap on a VM (its share of the measured capacity, re-spread each tick), bytes per second.",
		}, []string{"host", "vm", "resource"}),
		VMShortfall: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mrm_vm_share_shortfall",
			Help: "How far a VM that wanted more of a resource got less than its share entitles it to (entitled part less delivered part, 0..1; a series only while it is short); resource cpu, disk or net.",
		}, []string{"host", "vm", "resource"}),
		Captures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mrm_captures_total", Help: "Capture batches an agent sent and the bank accepted.",
		}, []string{"host"}),
		CapturedCredits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mrm_captured_credits_total", Help: "Credits captured from holds to a host's provider account.",
		}, []string{"host"}),
		Ticks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mrm_agent_ticks_total", Help: "Agent ticks run.",
		}, []string{"host"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mrm_requests_total", Help: "Requests served, by component, operation and reply code (ok or an error code).",
		}, []string{"component", "op", "code"}),
		RequestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mrm_request_duration_seconds", Buckets: requestBuckets,
			Help: "Time from a request's arrival to its reply (queued and handled, refusals included), by component and operation, seconds.",
		}, []string{"component", "op"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mrm_errors_total", Help: "Errors by component and kind.",
		}, []string{"component", "kind"}),
		PlansRunning: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mrm_plans_running", Help: "Spend plans the broker is running.",
		}),
		sources: &sources{},
	}
	m.sources.failed = func(component string) { m.Error(component, "scrape") }
	m.newJobMetrics()
	if reg != nil {
		reg.MustRegister(append(m.own(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))...)
	}
	return m
}

// own are mrmarket's own collectors (the mrm_ families), in the order
// docs/METRICS.md lists them.
func (m *Metrics) own() []prometheus.Collector {
	return []prometheus.Collector{m.HostPrice, m.VMShare, m.VMRate, m.ResourceMode, m.VMCap, m.VMShortfall, m.Captures, m.CapturedCredits,
		m.Ticks, m.Requests, m.RequestSeconds, m.Errors, m.PlansRunning, m.JobsAdmitted, m.JobDeadlines, m.JobLateness, m.sources}
}

// Request counts one served request, by its reply code ("ok" or a wire
// error code), and its latency: took, from its arrival to its reply.
func (m *Metrics) Request(component, op, code string, took time.Duration) {
	if m == nil {
		return
	}
	m.Requests.WithLabelValues(component, op, code).Inc()
	m.RequestSeconds.WithLabelValues(component, op).Observe(took.Seconds())
}

// Error counts one error of a component.
func (m *Metrics) Error(component, kind string) {
	if m == nil {
		return
	}
	m.Errors.WithLabelValues(component, kind).Inc()
}

// HealthFunc reports nil when the component is healthy.
type HealthFunc func() error

// Server serves /metrics, /healthz and /readyz.
type Server struct {
	srv   *http.Server
	addr  net.Addr
	ready readiness
}

// Serve listens on addr ("127.0.0.1:0" for a free port) and serves the
// registry's metrics on /metrics, the health checks on /healthz (200 "ok",
// or 503 with the failing checks) and the dependencies on /readyz (see
// Server.Ready).
func Serve(addr string, gather prometheus.Gatherer, checks map[string]HealthFunc) (*Server, error) {
	return ServeWith(addr, gather, checks, nil)
}

// ServeWith is Serve with pages answering every other path (up's
// dashboard); nil answers them not found.
func ServeWith(addr string, gather prometheus.Gatherer, checks map[string]HealthFunc, pages http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("obs: listening on %s: %w", addr, err)
	}
	s := &Server{addr: ln.Addr()}
	mux := http.NewServeMux()
	mux.Handle("/readyz", &s.ready)
	mux.Handle("/metrics", promhttp.HandlerFor(gather, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		var failed []string
		for name, check := range checks {
			if err := check(); err != nil {
				failed = append(failed, name+": "+err.Error())
			}
		}
		if len(failed) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			for _, f := range failed {
				fmt.Fprintln(w, f)
			}
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if pages != nil {
		mux.Handle("/", pages)
	}
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the listener is gone; Close reports nothing more useful
		}
	}()
	return s, nil
}

// Addr is where the server listens.
func (s *Server) Addr() net.Addr { return s.addr }

// Close stops the server.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}
