package obs

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestLoggerLevelsAndFormats(t *testing.T) {
	var buf bytes.Buffer
	l, err := NewLogger(&buf, "warn", "json")
	if err != nil {
		t.Fatal(err)
	}
	l.Info("not at warn")
	l.Warn("broker: host stale", "host", "host-1")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil || strings.Count(buf.String(), "\n") != 1 {
		t.Fatalf("one JSON line at warn: %q (%v)", buf.String(), err)
	}
	at, err := time.Parse(time.RFC3339, line["time"].(string))
	if line["msg"] != "broker: host stale" || line["host"] != "host-1" || line["level"] != "WARN" || err != nil || at.Location() != time.UTC ||
		!strings.HasSuffix(line["time"].(string), "Z") {
		t.Fatalf("JSON line: %v (%v)", line, err)
	}
	buf.Reset()
	if l, err = NewLogger(&buf, "info", "text"); err != nil {
		t.Fatal(err)
	}
	l.Debug("not at info")
	l.Info("bank: transfer", "id", "t1")
	if got := buf.String(); !strings.HasPrefix(got, "time=") || !strings.Contains(got, "Z level=INFO msg=\"bank: transfer\" id=t1\n") {
		t.Fatalf("text line: %q", got)
	}
	for _, bad := range [][2]string{{"loud", "text"}, {"info", "yaml"}} {
		if _, err := NewLogger(&buf, bad[0], bad[1]); err == nil {
			t.Errorf("NewLogger(%q, %q) took it", bad[0], bad[1])
		}
	}
}
