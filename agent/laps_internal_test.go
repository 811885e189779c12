package agent

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/mrmarket/mrmarket/internal/service"
)

// TestLapsLogOnlyASlowRound: a round under service.SlowRequest logs
// nothing (and asks for no attributes); a slow one logs its attributes,
// its time and every phase in order, more of them than the array holds
// included.
func TestLapsLogOnlyASlowRound(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	quick := startLaps()
	quick.lap("one")
	quick.logIfSlow(log, "slow", func() []any { t.Error("a quick round built its attributes"); return nil })
	if buf.Len() > 0 {
		t.Fatalf("a quick round logged %q", buf.String())
	}

	slow := startLaps()
	slow.start = slow.start.Add(-2 * service.SlowRequest)
	var names []string
	for i := range maxPhases + 2 {
		name := "p" + string(rune('a'+i))
		names = append(names, name)
		slow.lap(name)
	}
	slow.logIfSlow(log, "slow tick", func() []any { return []any{"host", "h1"} })
	line := buf.String()
	want := []string{"msg=\"slow tick\"", "host=h1", "took="}
	for _, n := range names {
		want = append(want, n+"=0s")
	}
	at := 0
	for _, w := range want {
		i := strings.Index(line[at:], w)
		if i < 0 {
			t.Fatalf("log line %q lacks %q after position %d", line, w, at)
		}
		at += i + len(w)
	}
	if n := strings.Count(line, "=0s"); n != len(names) {
		t.Errorf("log line %q: %d phases of 0s, want %d", line, n, len(names))
	}
}
