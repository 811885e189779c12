package market_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

var (
	// A selector of one of the market's families: name{matchers}.
	selector = regexp.MustCompile(`\b((?:mrm|go|process)_[a-zA-Z0-9_]+)\s*(\{[^}]*\})?`)
	matcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	byClause = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	legend   = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
	labelVal = regexp.MustCompile(`^label_values\(\s*([a-zA-Z0-9_]+)\s*,\s*([a-zA-Z0-9_]+)\s*\)$`)
)

// targetLabels are the labels Prometheus adds to every series it scrapes.
var targetLabels = []string{"instance", "job"}

// hasLabel reports whether some series of name has label (and, with
// value, that value).
func (e exposed) hasLabel(name, label string, value *string) bool {
	for _, s := range e[name] {
		if v, ok := s[label]; ok && (value == nil || v == *value) {
			return true
		}
	}
	return false
}

// checkQuery lists what expr asks of the exposition that it does not
// show: a family, a label a matcher, a by clause or the legend names, or
// a value an equality matcher wants.
func (e exposed) checkQuery(expr, legendFormat string) []string {
	var bad []string
	sels := selector.FindAllStringSubmatch(expr, -1)
	if len(sels) == 0 {
		return []string{fmt.Sprintf("%q selects none of the market's families", expr)}
	}
	labels := map[string]bool{}
	for _, l := range targetLabels {
		labels[l] = true
	}
	for _, s := range sels {
		name := s[1]
		if len(e[name]) == 0 {
			bad = append(bad, fmt.Sprintf("%q: %s is not exposed", expr, name))
			continue
		}
		for _, series := range e[name] {
			for l := range series {
				labels[l] = true
			}
		}
		for _, m := range matcher.FindAllStringSubmatch(s[2], -1) {
			var want *string
			if m[2] == "=" && !strings.Contains(m[3], "$") {
				want = &m[3]
			}
			if !e.hasLabel(name, m[1], want) {
				bad = append(bad, fmt.Sprintf("%q: no series of %s with %s%s%q", expr, name, m[1], m[2], m[3]))
			}
		}
	}
	for _, b := range byClause.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(b[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !labels[l] {
				bad = append(bad, fmt.Sprintf("%q: grouped by %s, which its series lack", expr, l))
			}
		}
	}
	for _, l := range legend.FindAllStringSubmatch(legendFormat, -1) {
		if !labels[l[1]] {
			bad = append(bad, fmt.Sprintf("%q: legend names %s, which its series lack", expr, l[1]))
		}
	}
	return bad
}

// serve serves m's metrics and readiness until the test ends.
func serve(t *testing.T, m *market.Market) *obs.Server {
	t.Helper()
	srv, err := obs.Serve("127.0.0.1:0", m.Registry, m.Health())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	srv.Ready(m.Ready()...)
	return srv
}

// submitETL submits examples/etl.json for alice as job-etl, with the
// latest deadline its quote offers, and returns the job and that point.
func submitETL(t *testing.T, brc broker.Client) (wire.JobSpec, wire.QuotePoint) {
	t.Helper()
	ctx := context.Background()
	spec := exampleJob(t, "etl.json")
	q, err := brc.Quote(ctx, &wire.QuoteRequest{User: "alice", Job: spec})
	if err != nil {
		t.Fatal(err)
	}
	point := q.Curve[len(q.Curve)-1]
	if _, err := brc.Submit(ctx, &wire.SubmitRequest{ID: "job-etl", User: "alice", Job: spec, Deadline: point.Deadline, MaxPrice: point.Price}); err != nil {
		t.Fatal(err)
	}
	return spec, point
}

// advance runs n ticks of m, each tick later on clock.
func advance(t *testing.T, m *market.Market, clock *time.Time, tick time.Duration, n int) {
	t.Helper()
	for range n {
		*clock = clock.Add(tick)
		if err := m.Tick(context.Background(), *clock); err != nil {
			t.Fatal(err)
		}
	}
}

// dashboard is what the test reads of a Grafana dashboard.
type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr   string `json:"expr"`
			Legend string `json:"legendFormat"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// TestGrafanaDashboard: every query of deploy/grafana/mrmarket.json — its
// families, the labels it matches, groups by and names in legends, and the
// values it matches exactly — is what a running market exposes on
// /metrics, once it has done what the panels show: grants, spends on
// every host, captures, a throttled host's caps, a deadline job admitted,
// a refused request and an error.
func TestGrafanaDashboard(t *testing.T) {
	ctx := context.Background()
	const tick = 5 * time.Second
	m, clock, bc, brc := upMarket(t, tick)
	srv := serve(t, m)
	sim := m.Sims["host-1"]
	sim.SetThrottled(true, false)
	sim.SetIO("h1-vm1", agent.IOUse{Disk: 50})
	sim.SetIO("h1-vm2", agent.IOUse{Disk: 50})
	grant(t, bc, "alice", "100")
	grant(t, bc, "bob", "100")
	if _, err := brc.Spend(ctx, &wire.SpendRequest{ID: "p-bob", User: "bob", Budget: credits(t, "10"), Duration: wire.Duration(time.Hour),
		VMs: []string{"h1-vm2", "h2-vm2", "h3-vm2"}, Strategy: wire.StrategyFair}); err != nil {
		t.Fatal(err)
	}
	advance(t, m, clock, tick, 3)
	submitETL(t, brc)
	advance(t, m, clock, tick, 1)
	// A refused request, and a state no agent sealed (an error).
	if _, err := bc.Balance(ctx, &wire.BalanceRequest{User: "a.b"}); err == nil {
		t.Fatal("a bad user name was answered")
	}
	agentNC, err := m.NCAs(wire.RoleAgent, "host-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := agentNC.Publish(wire.HostStateSubject("host-1"), []byte("not a state")); err != nil {
		t.Fatal(err)
	}
	if err := agentNC.Flush(); err != nil {
		t.Fatal(err)
	}

	var e exposed
	for deadline := time.Now().Add(10 * time.Second); ; {
		code, body := httpGet(t, srv, "/metrics")
		if code != 200 {
			t.Fatalf("/metrics: %d", code)
		}
		if e = parseExposition(body); len(e["mrm_errors_total"]) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the bad state is taken by a worker of the broker's
	}

	data, err := os.ReadFile(filepath.Join("..", "deploy", "grafana", "mrmarket.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			n++
			for _, b := range e.checkQuery(tg.Expr, tg.Legend) {
				t.Errorf("panel %q: %s", p.Title, b)
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("variable %s: %v", v.Name, err)
		}
		lv := labelVal.FindStringSubmatch(q.Query)
		if lv == nil || !e.hasLabel(lv[1], lv[2], nil) {
			t.Errorf("variable %s: %q is not label_values of an exposed family and label", v.Name, q.Query)
		}
		n++
	}
	if n < 20 {
		t.Fatalf("%d queries in the dashboard", n)
	}
	// The check itself finds what is not there.
	for _, q := range []struct{ expr, legend string }{
		{`mrm_captured_micro_total`, ""},
		{`mrm_vm_share{owner="alice"}`, ""},
		{`mrm_job_deadlines_total{outcome="late"}`, ""},
		{`sum by (vm) (mrm_host_price_credits_per_second)`, ""},
		{`mrm_host_price_credits_per_second`, "{{vm}}"},
		{`rate(node_cpu_seconds_total[5m])`, ""},
	} {
		if bad := e.checkQuery(q.expr, q.legend); len(bad) == 0 {
			t.Errorf("%q (legend %q) passes the check", q.expr, q.legend)
		}
	}
	// And what the panels plot has values: the hosts and their VMs.
	for _, name := range []string{"mrm_host_price_credits_per_second", "mrm_host_state_age_seconds", "mrm_vm_cap_bytes_per_second"} {
		var hosts []string
		for _, s := range e[name] {
			hosts = append(hosts, s["host"])
		}
		if !slices.Contains(hosts, "host-1") {
			t.Errorf("%s: no host-1 in %v", name, hosts)
		}
	}
}
