package market_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// exposed is what a /metrics scrape shows: each series' labels, by
// metric name (a histogram's as name_bucket, name_sum, name_count).
type exposed map[string][]map[string]string

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// parseExposition reads Prometheus's text format.
func parseExposition(body string) exposed {
	out := exposed{}
	for _, line := range strings.Split(body, "\n") {
		m := sampleLine.FindStringSubmatch(line)
		if m == nil || strings.HasPrefix(line, "#") {
			continue
		}
		labels := map[string]string{}
		for _, p := range labelPair.FindAllStringSubmatch(m[2], -1) {
			labels[p[1]] = p[2]
		}
		out[m[1]] = append(out[m[1]], labels)
	}
	return out
}

// fmtCredits is m as the exposition writes credits.
func fmtCredits(m money.Micro) string { return strconv.FormatFloat(m.Credits(), 'g', -1, 64) }

// sampleValue is the value of the sample series (name{labels}) in body.
func sampleValue(t *testing.T, body, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no %s in /metrics", series)
	return 0
}

// httpGet is path on srv: its status and body.
func httpGet(t *testing.T, srv *obs.Server, path string) (int, string) {
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

// TestMetricsInBaseUnits: a running market's /metrics has the requests'
// latency histograms, the Go and process collectors, the bank's gauges
// (escrow equal to what its open holds hold, no invariant violated) and
// money in credits; /readyz lists NATS, the store and libvirt (unused:
// simulated hosts) and answers 503 naming the store once it is down.
func TestMetricsInBaseUnits(t *testing.T) {
	m, srv, bc := servedMarket(t)
	led := checkLedger(t, bc)
	_, body := httpGet(t, srv, "/metrics")
	e := parseExposition(body)
	for _, want := range []string{
		`mrm_request_duration_seconds_bucket{component="bank",op="grant",le="+Inf"} 1`,
		`mrm_request_duration_seconds_count{component="broker",op="spend"} 1`,
		"mrm_bank_invariant_violations 0\n",
		"mrm_bank_open_holds 1\n",
		"mrm_bank_escrow_credits " + fmtCredits(led.OpenHolds) + "\n",
		"mrm_bank_held_credits " + fmtCredits(led.OpenHolds) + "\n",
		`mrm_host_state_age_seconds{host="host-1"} 0`,
		`mrm_jobs_admitted_total{kind="deadline"} 0`,
		"mrm_jobs_late 0\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
		if len(e[name]) == 0 {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	// Money in credits: alice's budget of 10 credits over a minute is at
	// most 10/60 credits per second on her VM, and a tick captured under
	// the 10 credits.
	if rate := sampleValue(t, body, `mrm_vm_rate_credits_per_second{host="host-1",vm="a1"}`); rate <= 0 || rate > 10.0/60 {
		t.Errorf("a1's rate %v credits/s for 10 credits over a minute", rate)
	}
	if c := sampleValue(t, body, `mrm_captured_credits_total{host="host-1"}`); c <= 0 || c > 10 {
		t.Errorf("captured %v credits of a 10-credit budget", c)
	}

	code, ready := httpGet(t, srv, "/readyz")
	if code != http.StatusOK || ready != "nats ok\nstore ok\nlibvirt not used: simulated hosts\n" {
		t.Fatalf("/readyz: %d %q", code, ready)
	}
	if err := m.Bank.Close(); err != nil {
		t.Fatal(err)
	}
	code, ready = httpGet(t, srv, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(ready, "\nstore down: ") || !strings.HasPrefix(ready, "nats ok\n") {
		t.Fatalf("/readyz with the bank's store closed: %d %q", code, ready)
	}
}

// TestJobMetricsCountEachJobOnce: a deadline job admitted and run to its
// end by the market's simulated Hadoop counts once as admitted and once as
// met (lateness 0), and a done report sent again counts nothing more.
func TestJobMetricsCountEachJobOnce(t *testing.T) {
	ctx := context.Background()
	const tick = 5 * time.Second
	m, clock, bc, brc := upMarket(t, tick)
	srv := serve(t, m)
	grant(t, bc, "alice", "100")
	spec, point := submitETL(t, brc)
	for clock.Before(point.Deadline) && jobOf(t, brc, "alice", "job-etl").Status != wire.JobDone {
		advance(t, m, clock, tick, 1)
	}
	if j := jobOf(t, brc, "alice", "job-etl"); j.Status != wire.JobDone {
		t.Fatalf("job not done by its deadline: %+v", j)
	}
	if _, err := brc.Progress(ctx, &wire.ProgressRequest{User: "alice", Job: spec.Name, Progress: 1, Done: true}); err == nil {
		t.Fatal("a done job took a progress report")
	}
	_, body := httpGet(t, srv, "/metrics")
	for _, want := range []string{
		`mrm_jobs_admitted_total{kind="deadline"} 1`, `mrm_jobs_admitted_total{kind="best_effort"} 0`,
		`mrm_job_deadlines_total{outcome="met"} 1`, `mrm_job_deadlines_total{outcome="missed"} 0`,
		`mrm_job_lateness_seconds_bucket{le="0"} 1`, "mrm_job_lateness_seconds_count 1\n", "mrm_jobs_late 0\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
