package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/internal/money"
)

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

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }

func (t *table) flush() error { return t.tw.Flush() }

// output prints v as JSON with --json, otherwise calls human.
func output(c *ucli.Context, v any, human func(w io.Writer) error) error {
	if c.Bool("json") {
		return printJSON(c.App.Writer, v)
	}
	return human(c.App.Writer)
}

// show is output for a reply with its own printer.
func show[Rep any](c *ucli.Context, rep Rep, human func(w io.Writer, rep Rep) error) error {
	return output(c, rep, func(w io.Writer) error { return human(w, rep) })
}

// perHour renders a rate in micro-credits per second as credits per hour.
func perHour(rate float64) string {
	return fmt.Sprintf("%.4f/h", rate*3600/float64(money.PerCredit))
}

// humanDuration is d rounded for people: 56m15s, not 56m14.994691182s.
func humanDuration(d time.Duration) string {
	if d >= time.Second || d <= -time.Second {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

func pct(f float64) string { return fmt.Sprintf("%.2f%%", 100*f) }

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}
