package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/internal/money"
)

// Printing. Every command prints through show: with --json the reply as it
// came over the wire (its money fields name their unit: *_micro are
// micro-credits, *_micro_per_s micro-credits per second), otherwise for
// people — credits, credits per hour, durations rounded to the second, and
// tables whose header line --no-headers leaves out, with the lines around
// them (out.note): with it, only the tables' rows are printed.

// out is where a command prints for people, and how.
type out struct {
	io.Writer
	noHeaders bool
}

// table starts a tab-aligned table on o, with its header unless
// --no-headers.
func (o *out) table(header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(o, 0, 0, 2, ' ', 0)}
	if !o.noHeaders {
		t.row(header...)
	}
	return t
}

// note prints a line that is not a table's row — a preamble, a summary, a
// blank line between tables — unless --no-headers asks for the rows alone.
func (o *out) note(format string, args ...any) error {
	if o.noHeaders {
		return nil
	}
	_, err := fmt.Fprintf(o, format, args...)
	return err
}

// show prints rep: JSON with --json, otherwise human's rendering.
func show[Rep any](c *ucli.Context, rep Rep, human func(o *out, rep Rep) error) error {
	if c.Bool("json") {
		return printJSON(c.App.Writer, rep)
	}
	return human(&out{Writer: c.App.Writer, noHeaders: c.Bool("no-headers")}, rep)
}

func flagJSON() *ucli.BoolFlag {
	return &ucli.BoolFlag{Name: "json", Usage: "print JSON (the wire messages: amounts in *_micro fields, rates in *_micro_per_s) instead of a table"}
}

func flagNoHeaders() *ucli.BoolFlag {
	return &ucli.BoolFlag{Name: "no-headers", Usage: "print tables without their header line"}
}

// outputFlags are the flags of a command that prints a reply, then its own.
func outputFlags(own ...ucli.Flag) []ucli.Flag {
	return append([]ucli.Flag{flagJSON(), flagNoHeaders()}, own...)
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table is a tab-aligned table.
type table struct {
	tw *tabwriter.Writer
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }

func (t *table) flush() error { return t.tw.Flush() }

// perHour renders a rate in micro-credits per second as credits per hour.
func perHour(rate float64) string {
	return fmt.Sprintf("%.4f/h", rate*3600/float64(money.PerCredit))
}

func pct(f float64) string { return fmt.Sprintf("%.2f%%", 100*f) }

// stamp is a time for people, in the one format the CLI shows and reads:
// RFC 3339 in UTC to the second — as events, the services' messages and
// --deadline have it, so a time shown can be given back.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// span is a duration for people: whole seconds (56m15s, not
// 56m14.994691182s; milliseconds below a second) without zero tails (1h,
// not 1h0m0s).
func span(d time.Duration) string {
	if d > -time.Second && d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// isTerminal reports whether w is a terminal (a character device): where a
// progress bar redrawn in place is for a person to watch, rather than
// noise in a file or a pipe.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
