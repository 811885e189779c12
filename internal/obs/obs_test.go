package obs_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mrmarket/mrmarket/internal/obs"
)

var update = flag.Bool("update", false, "rewrite docs/METRICS.md from the metrics")

const metricsIntro = `
Every metric family mrmarket exports on ` + "`/metrics`" + ` (` + "`mrmarket up`" + `, and each daemon's
` + "`--http`" + `), generated from package obs by
` + "`go test ./internal/obs -run TestMetricsDoc -update`" + `; the test fails when this
file and the metrics disagree. Figures are in base units: credits (one credit is
a million micro-credits, the ledger's unit), seconds, bytes. Besides these, every
process exports client_golang's ` + "`go_*`" + ` (runtime: goroutines, GC, memory) and
` + "`process_*`" + ` (CPU seconds, resident memory, open file descriptors) families.

The bank's and the broker's gauges (` + "`mrm_bank_*`" + `, ` + "`mrm_host_state_age_seconds`" + `,
` + "`mrm_jobs_late`" + `) are read when scraped: the bank runs its ledger check (` + "`mrmarket ledger`" + `)
for each scrape; a scrape whose read fails leaves them out and counts
` + "`mrm_errors_total{kind=\"scrape\"}`" + `. A host whose agent stopped keeps its last state, and
its ` + "`mrm_host_state_age_seconds`" + ` grows: above a few ticks it is stale.

` + "`/healthz`" + ` says whether the process's components work; ` + "`/readyz`" + ` lists each
dependency — ` + "`nats`" + `, ` + "`store`" + ` (the bank's SQL store, the broker's plans bucket),
` + "`libvirt`" + ` (an agent's hypervisor; "not used" for simulated hosts) — one line each,
` + "`ok`" + ` or ` + "`down: why`" + `, with status 503 when one is down.
` + "`deploy/grafana/mrmarket.json`" + ` is a Grafana dashboard over these families; its
queries are checked against a running market (market's TestGrafanaDashboard).`

// TestMetricsDoc: docs/METRICS.md is what package obs exports.
func TestMetricsDoc(t *testing.T) {
	var got bytes.Buffer
	if err := obs.WriteMarkdown(&got, metricsIntro); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "docs", "METRICS.md")
	if *update {
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (write it with -update)", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("%s is out of date with the metrics: run go test ./internal/obs -run TestMetricsDoc -update\n--- generated\n%s", path, got.Bytes())
	}
}

// TestBaseUnits: every family is named in base units, as Prometheus's
// conventions want: no micro-credits, milliseconds or megabytes.
func TestBaseUnits(t *testing.T) {
	fams, err := obs.Families()
	if err != nil {
		t.Fatal(err)
	}
	if len(fams) < 20 {
		t.Fatalf("%d families: %+v", len(fams), fams)
	}
	for _, f := range fams {
		for _, bad := range []string{"micro", "_ms", "milli", "_mb", "kib", "mib"} {
			if strings.Contains(f.Name, bad) {
				t.Errorf("%s: not in base units (%s)", f.Name, bad)
			}
		}
		if f.Type == "counter" != strings.HasSuffix(f.Name, "_total") {
			t.Errorf("%s: a %s; counters, and only they, end in _total", f.Name, f.Type)
		}
		if f.Help == "" {
			t.Errorf("%s: no help", f.Name)
		}
	}
}

// served is fresh metrics on a registry of their own, served until the
// test ends.
func served(t *testing.T) (*obs.Metrics, *obs.Server) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := obs.NewMetrics(reg)
	srv, err := obs.Serve("127.0.0.1:0", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return m, srv
}

func scrape(t *testing.T, srv *obs.Server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + srv.Addr().String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestServeExports: a request's latency lands in its histogram, the Go and
// process collectors are there, and the gauges read when scraped appear
// only with a source, and only while it reads.
func TestServeExports(t *testing.T) {
	m, srv := served(t)
	m.Request("bank", "grant", "ok", 3*time.Millisecond)
	_, body := scrape(t, srv, "/metrics")
	for _, want := range []string{
		`mrm_request_duration_seconds_bucket{component="bank",op="grant",le="0.0025"} 0`,
		`mrm_request_duration_seconds_bucket{component="bank",op="grant",le="0.005"} 1`,
		`mrm_request_duration_seconds_count{component="bank",op="grant"} 1`,
		`mrm_requests_total{code="ok",component="bank",op="grant"} 1`,
		`mrm_jobs_admitted_total{kind="deadline"} 0`,
		`mrm_job_deadlines_total{outcome="missed"} 0`,
		"go_goroutines ", "go_memstats_alloc_bytes ", "process_resident_memory_bytes ", "process_cpu_seconds_total ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, "mrm_bank_escrow_credits") {
		t.Errorf("bank gauges without a bank:\n%s", body)
	}
	fail := errors.New("store down")
	var bankErr error
	unset := m.SetBank(func(context.Context) (obs.BankFigures, error) {
		return obs.BankFigures{Escrow: 2.5, OpenHolds: 1, Held: 2.5}, bankErr
	})
	if _, body = scrape(t, srv, "/metrics"); !strings.Contains(body, "mrm_bank_escrow_credits 2.5\n") || !strings.Contains(body, "mrm_bank_invariant_violations 0\n") {
		t.Errorf("bank gauges missing:\n%s", body)
	}
	bankErr = fail
	if _, body = scrape(t, srv, "/metrics"); strings.Contains(body, "mrm_bank_escrow_credits") {
		t.Errorf("a failed read shows gauges:\n%s", body)
	}
	bankErr = nil // the failure is counted while the scrape that failed is gathered: the next one shows it
	if _, body = scrape(t, srv, "/metrics"); !strings.Contains(body, `mrm_errors_total{component="bank",kind="scrape"} 1`) {
		t.Errorf("a failed read is not counted:\n%s", body)
	}
	unsetLater := m.SetBank(func(context.Context) (obs.BankFigures, error) { return obs.BankFigures{Escrow: 7}, nil })
	unset() // an earlier bank stopping leaves the later one's source
	if _, body = scrape(t, srv, "/metrics"); !strings.Contains(body, "mrm_bank_escrow_credits 7\n") {
		t.Errorf("the later bank's source was unset:\n%s", body)
	}
	unsetLater()
	m.SetBroker(func() obs.BrokerFigures {
		return obs.BrokerFigures{Hosts: []obs.HostAge{{Host: "host-1", Age: 1500 * time.Millisecond}}, LateJobs: 2}
	})
	if _, body = scrape(t, srv, "/metrics"); strings.Contains(body, "mrm_bank_escrow_credits") ||
		!strings.Contains(body, `mrm_host_state_age_seconds{host="host-1"} 1.5`) || !strings.Contains(body, "mrm_jobs_late 2\n") {
		t.Errorf("broker gauges:\n%s", body)
	}
}

// TestReadyz: /readyz lists every dependency, 503 while none is declared
// and while one is down.
func TestReadyz(t *testing.T) {
	srv, err := obs.Serve("127.0.0.1:0", prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if code, body := scrape(t, srv, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("undeclared: %d %q", code, body)
	}
	var storeErr error
	srv.Ready(obs.Dependency{Name: obs.DepNATS, Check: func() error { return nil }},
		obs.Dependency{Name: obs.DepStore, Check: func() error { return storeErr }},
		obs.Dependency{Name: obs.DepLibvirt, Unused: "simulated hosts"})
	if code, body := scrape(t, srv, "/readyz"); code != http.StatusOK || body != "nats ok\nstore ok\nlibvirt not used: simulated hosts\n" {
		t.Fatalf("ready: %d %q", code, body)
	}
	storeErr = errors.New("connection refused")
	if code, body := scrape(t, srv, "/readyz"); code != http.StatusServiceUnavailable ||
		body != "nats ok\nstore down: connection refused\nlibvirt not used: simulated hosts\n" {
		t.Fatalf("store down: %d %q", code, body)
	}
}

// TestJobMetrics: a deadline job done by its deadline counts as met with
// no lateness, one done after it as missed and how late; a best-effort job
// (no deadline) counts as neither.
func TestJobMetrics(t *testing.T) {
	m, srv := served(t)
	deadline := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	m.JobAdmitted(true)
	m.JobAdmitted(true)
	m.JobAdmitted(false)
	m.JobFinished(deadline, deadline.Add(-time.Minute))
	m.JobFinished(deadline, deadline.Add(45*time.Second))
	m.JobFinished(time.Time{}, deadline)
	_, body := scrape(t, srv, "/metrics")
	for _, want := range []string{
		`mrm_jobs_admitted_total{kind="deadline"} 2`, `mrm_jobs_admitted_total{kind="best_effort"} 1`,
		`mrm_job_deadlines_total{outcome="met"} 1`, `mrm_job_deadlines_total{outcome="missed"} 1`,
		`mrm_job_lateness_seconds_bucket{le="0"} 1`, `mrm_job_lateness_seconds_bucket{le="30"} 1`,
		`mrm_job_lateness_seconds_bucket{le="60"} 2`, "mrm_job_lateness_seconds_sum 45\n", "mrm_job_lateness_seconds_count 2\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
