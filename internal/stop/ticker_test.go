package stop

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/mrmarket/mrmarket/internal/obs"
)

// lines is a slog handler keeping each record's message and attributes.
type lines struct {
	mu  sync.Mutex
	out []string
}

func (l *lines) Enabled(context.Context, slog.Level) bool { return true }
func (l *lines) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	l.mu.Lock()
	l.out = append(l.out, b.String())
	l.mu.Unlock()
	return nil
}
func (l *lines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *lines) WithGroup(string) slog.Handler      { return l }

// counted is the failed ticks of component that m counted.
func counted(t *testing.T, m *obs.Metrics, component string) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Errors.WithLabelValues(component, "tick").Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}

// TestTickerLogsBackOff: the first failure is logged with its error, then
// the 2nd, 4th and 8th in a row, and the recovery once; every failure is
// counted.
func TestTickerLogsBackOff(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := obs.NewMetrics(reg)
	l := &lines{}
	tk := Ticker{Component: "bank", Metrics: m, Logger: slog.New(l), Attrs: []any{"replica", "r1"}}
	boom := errors.New("boom")
	failures := 0
	for range 9 {
		failures = tk.round(context.Background(), func(context.Context, time.Time) error { return boom }, time.Now(), failures)
	}
	failures = tk.round(context.Background(), func(context.Context, time.Time) error { return nil }, time.Now(), failures)
	failures = tk.round(context.Background(), func(context.Context, time.Time) error { return nil }, time.Now(), failures)
	if failures != 0 {
		t.Fatalf("failures after a success: %d", failures)
	}
	want := []string{
		"ERROR bank: tick failed; the next tick retries err=boom replica=r1",
		"ERROR bank: tick failed again; the next tick retries failures=2 err=boom replica=r1",
		"ERROR bank: tick failed again; the next tick retries failures=4 err=boom replica=r1",
		"ERROR bank: tick failed again; the next tick retries failures=8 err=boom replica=r1",
		"INFO bank: tick recovered after 9 failures failures=9 replica=r1",
	}
	if !slices.Equal(l.out, want) {
		t.Fatalf("logged\n%s\nwant\n%s", strings.Join(l.out, "\n"), strings.Join(want, "\n"))
	}
	if n := counted(t, m, "bank"); n != 9 {
		t.Fatalf("failed ticks counted: %v, want 9", n)
	}
}

// TestTickerKeepsItsCadence: failing ticks do not slow the loop, and a
// tick failing because the loop is stopping is not a failure.
func TestTickerKeepsItsCadence(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := obs.NewMetrics(reg)
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var at []time.Time
	done := make(chan struct{})
	go func() {
		defer close(done)
		Ticker{Component: "broker", Period: 5 * time.Millisecond, Metrics: m}.Run(ctx, func(ctx context.Context, now time.Time) error {
			mu.Lock()
			at = append(at, now)
			n := len(at)
			mu.Unlock()
			if n == 20 {
				cancel()
				return ctx.Err()
			}
			return errors.New("down")
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("20 ticks of 5ms did not come within 10s: the loop slowed down")
	}
	if n := counted(t, m, "broker"); n != 19 {
		t.Fatalf("failed ticks counted: %v, want 19 (the one cut off by the stop is not)", n)
	}
}
