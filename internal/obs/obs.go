// Package obs is mrmarket's observability plumbing: the Prometheus metrics
// every daemon exports and the HTTP server that serves /metrics and /healthz.
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
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the market's metrics: price and shares per host, captures,
// and errors per component.
type Metrics struct {
	HostPrice     *prometheus.GaugeVec   // host
	VMShare       *prometheus.GaugeVec   // host, vm
	VMRate        *prometheus.GaugeVec   // host, vm
	ResourceMode  *prometheus.GaugeVec   // host, resource, mode
	VMCap         *prometheus.GaugeVec   // host, vm, resource
	Captures      *prometheus.CounterVec // host
	CapturedMicro *prometheus.CounterVec // host
	Ticks         *prometheus.CounterVec // host
	Requests      *prometheus.CounterVec // component, op, code
	Errors        *prometheus.CounterVec // component, kind
	PlansRunning  prometheus.Gauge
}

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		HostPrice: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mrm_host_price_micro_per_second", Help: "Sum of the funded spending rates on a host (seed 003 Eq. 1 y), micro-credits per second.",
		}, []string{"host"}),
		VMShare: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mrm_vm_share", Help: "Share of its host a VM is entitled to (0..1).",
		}, []string{"host", "vm"}),
		VMRate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mrm_vm_rate_micro_per_second", Help: "Spending rate of a VM's bid, micro-credits per second.",
		}, []string{"host", "vm"}),
		ResourceMode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mrm_host_resource_mode", Help: "1 for how a host delivers a resource's shares (mode: weights, throttle, none), 0 for the modes it does not use.",
		}, []string{"host", "resource", "mode"}),
		VMCap: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mrm_vm_cap_mb_per_second", Help: "A throttled resource's bandwidth cap on a VM (its share of the measured capacity, re-spread each tick), MB/s.",
		}, []string{"host", "vm", "resource"}),
		Captures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mrm_captures_total", Help: "Capture batches an agent sent and the bank accepted.",
		}, []string{"host"}),
		CapturedMicro: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mrm_captured_micro_total", Help: "Micro-credits captured from holds to a host's provider account.",
		}, []string{"host"}),
		Ticks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mrm_agent_ticks_total", Help: "Agent ticks run.",
		}, []string{"host"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mrm_requests_total", Help: "Requests served, by component, operation and reply code (ok or an error code).",
		}, []string{"component", "op", "code"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mrm_errors_total", Help: "Errors by component and kind.",
		}, []string{"component", "kind"}),
		PlansRunning: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mrm_plans_running", Help: "Spend plans the broker is running.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.HostPrice, m.VMShare, m.VMRate, m.ResourceMode, m.VMCap, m.Captures, m.CapturedMicro,
			m.Ticks, m.Requests, m.Errors, m.PlansRunning)
	}
	return m
}

// Request counts one served request; err nil counts as "ok".
func (m *Metrics) Request(component, op string, code string) {
	if m == nil {
		return
	}
	m.Requests.WithLabelValues(component, op, code).Inc()
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

// Server serves /metrics and /healthz.
type Server struct {
	srv  *http.Server
	addr net.Addr
}

// Serve listens on addr ("127.0.0.1:0" for a free port) and serves the
// registry's metrics on /metrics and the health checks on /healthz (200 "ok",
// or 503 with the failing checks).
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
	mux := http.NewServeMux()
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
	s := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, addr: ln.Addr()}
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
