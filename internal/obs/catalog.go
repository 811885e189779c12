package obs

import (
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Family is one metric family mrmarket exports: what docs/METRICS.md lists.
type Family struct {
	Name, Type, Unit, Help string
	Labels                 []string
}

// descFields reads a description's name, help and labels from its String:
// client_golang keeps them unexported, and its String is the one public
// view of them (TestMetricsDoc fails if that changes).
var descFields = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", help: "((?:[^"\\]|\\.)*)", (?:unit: "[^"]*", )?constLabels: \{[^}]*\}, variableLabels: \{([^}]*)\}\}$`)

// Families lists every mrm_ family, as a fresh Metrics describes them.
func Families() ([]Family, error) {
	var out []Family
	for _, c := range NewMetrics(nil).own() {
		kind := "gauge"
		switch c.(type) {
		case *prometheus.CounterVec:
			kind = "counter"
		case *prometheus.HistogramVec, prometheus.Histogram:
			kind = "histogram"
		}
		ch := make(chan *prometheus.Desc, 16)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			f := descFields.FindStringSubmatch(d.String())
			if f == nil {
				return nil, fmt.Errorf("obs: cannot read %s", d)
			}
			fam := Family{Name: f[1], Type: kind, Unit: unitOf(f[1]), Help: strings.ReplaceAll(f[2], `\"`, `"`)}
			if f[3] != "" {
				fam.Labels = strings.Split(f[3], ",")
			}
			out = append(out, fam)
		}
	}
	return out, nil
}

// unitOf is a family's unit, from its name's suffix as Prometheus names
// them.
func unitOf(name string) string {
	name = strings.TrimSuffix(name, "_total")
	for _, u := range []struct{ suffix, unit string }{
		{"_credits_per_second", "credits/s"}, {"_bytes_per_second", "bytes/s"}, {"_seconds", "seconds"},
		{"_credits", "credits"}, {"_bytes", "bytes"}, {"_share", "ratio (0..1)"}, {"_mode", "1 or 0"},
	} {
		if strings.HasSuffix(name, u.suffix) {
			return u.unit
		}
	}
	return "count"
}

// WriteMarkdown writes docs/METRICS.md: intro, then one row per family.
func WriteMarkdown(w io.Writer, intro string) error {
	fams, err := Families()
	if err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Metrics\n%s\n\n| name | type | unit | labels | meaning |\n|---|---|---|---|---|\n", intro)
	for _, f := range fams {
		labels := "—"
		if len(f.Labels) > 0 {
			labels = "`" + strings.Join(f.Labels, "`, `") + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", f.Name, f.Type, f.Unit, labels, strings.ReplaceAll(f.Help, "|", `\|`))
	}
	_, err = io.WriteString(w, b.String())
	return err
}
