package obs

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
)

// Logs. A process has one logger (daemon.Env.Logger), made here: a line
// per event on w, text (key=value, what a person tails) or JSON (what a
// log shipper reads), at a level and above. Times are UTC in RFC 3339 to
// the millisecond, the format the CLI shows times in.

// LogFormats and LogLevels are what NewLogger takes.
var (
	LogFormats = []string{"text", "json"}
	LogLevels  = []string{"debug", "info", "warn", "error"}
)

// CheckLogFlags says what is wrong with a level or format, if anything.
func CheckLogFlags(level, format string) error {
	if !slices.Contains(LogLevels, strings.ToLower(level)) {
		return fmt.Errorf("log level %q: want one of %s", level, strings.Join(LogLevels, ", "))
	}
	if !slices.Contains(LogFormats, strings.ToLower(format)) {
		return fmt.Errorf("log format %q: want one of %s", format, strings.Join(LogFormats, ", "))
	}
	return nil
}

// NewLogger is a process's logger on w (CheckLogFlags says what it takes).
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	if err := CheckLogFlags(level, format); err != nil {
		return nil, err
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lv, ReplaceAttr: utcMillis}
	if strings.EqualFold(format, "json") {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

// utcMillis writes a line's time in UTC to the millisecond.
func utcMillis(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 && a.Value.Kind() == slog.KindTime {
		a.Value = slog.StringValue(a.Value.Time().UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	}
	return a
}
