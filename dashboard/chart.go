package dashboard

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strings"
	"time"
)

// Charts are drawn here, as SVG in the page (no script draws them, and no
// library is shipped): a line chart of series over time with its axes,
// ticks, unit and grid, and small bars for fractions in tables. Colours
// are attributes, text is escaped, and every number is formatted here.

// series is one line of a chart.
type series struct {
	Name   string
	Color  string
	Points []point // in time order
}

// chart is a line chart of series over [From, To].
type chart struct {
	Title    string // what it shows, for screen readers
	Unit     string // the y axis's label
	From, To time.Time
	Series   []series
	Width    int // in SVG user units, as wide as the page draws it; 0: defaultChartW
}

// Chart geometry (SVG user units).
const (
	defaultChartW, chartH              = 720, 250
	padLeft, padRight, padTop, padBott = 64, 18, 14, 46
)

// palette is Okabe and Ito's colour-blind-safe set, darkened where needed
// to stand 3:1 against a white card (lines are graphics, not text).
var palette = []string{"#0072b2", "#c34a00", "#00855f", "#b0488a", "#8a6a00", "#3a8fc2", "#444444"}

// svg draws the chart.
func (c chart) svg() template.HTML {
	var b strings.Builder
	chartW := c.Width
	if chartW <= 0 {
		chartW = defaultChartW
	}
	plotW, plotH := float64(chartW-padLeft-padRight), float64(chartH-padTop-padBott)
	top := 0.0
	for _, s := range c.Series {
		for _, p := range s.Points {
			top = max(top, p.V)
		}
	}
	step, top := niceScale(top)
	span := c.To.Sub(c.From)
	if span <= 0 {
		span = time.Second
	}
	x := func(t time.Time) float64 { return padLeft + plotW*float64(t.Sub(c.From))/float64(span) }
	y := func(v float64) float64 { return padTop + plotH*(1-v/top) }

	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s">`, chartW, chartH, html.EscapeString(c.Title))
	fmt.Fprintf(&b, `<title>%s</title>`, html.EscapeString(c.Title))
	decimals := tickDecimals(step)
	for v := 0.0; v <= top+step/2; v += step {
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, padLeft, chartW-padRight, y(v), y(v))
		fmt.Fprintf(&b, `<text class="tick" x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%.*f</text>`, padLeft-8, y(v), decimals, v)
	}
	tstep, layout := timeTicks(span)
	for t := c.From.Truncate(tstep); !t.After(c.To); t = t.Add(tstep) {
		if t.Before(c.From) {
			continue
		}
		fmt.Fprintf(&b, `<line class="tickmark" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/>`, x(t), x(t), padTop+plotH, padTop+plotH+5)
		fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, x(t), padTop+plotH+18, t.UTC().Format(layout))
	}
	fmt.Fprintf(&b, `<line class="axis" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, padLeft, chartW-padRight, padTop+plotH, padTop+plotH)
	fmt.Fprintf(&b, `<text class="axis-label" x="%.1f" y="%d" text-anchor="middle">time (UTC)</text>`, padLeft+plotW/2, chartH-4)
	fmt.Fprintf(&b, `<text class="axis-label" transform="translate(14 %.1f) rotate(-90)" text-anchor="middle">%s</text>`,
		padTop+plotH/2, html.EscapeString(c.Unit))
	for i, s := range c.Series {
		pts := thin(clip(s.Points, c.From), c.From, span, int(plotW/2))
		if len(pts) == 0 {
			continue
		}
		// A step line: each figure holds until the next reading. Every
		// other line is dashed, so one drawn over another equal to it
		// still shows.
		fmt.Fprintf(&b, `<path class="line" stroke="%s"%s d="M%.1f %.1f`, s.Color, dashes(i), x(pts[0].T), y(pts[0].V))
		for i, p := range pts[1:] {
			if p.V != pts[i].V || i == len(pts)-2 {
				fmt.Fprintf(&b, `H%.1fV%.1f`, x(p.T), y(p.V))
			}
		}
		b.WriteString(`"/>`)
		last := pts[len(pts)-1]
		fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`, x(last.T), y(last.V), s.Color)
	}
	if len(c.Series) == 0 {
		fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.1f" text-anchor="middle">no data yet</text>`, padLeft+plotW/2, padTop+plotH/2)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// dashes is the dash pattern of the i-th line: none, or dashed.
func dashes(i int) string {
	if i%2 == 1 {
		return ` stroke-dasharray="7 4"`
	}
	return ""
}

// niceScale is a tick step and the axis's top for values up to top: about
// five steps of 1, 2, 2.5 or 5 times a power of ten.
func niceScale(top float64) (step, axisTop float64) {
	if top <= 0 || math.IsNaN(top) || math.IsInf(top, 0) {
		return 0.25, 1
	}
	raw := top / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if step = m * mag; step >= raw {
			break
		}
	}
	return step, math.Ceil(top/step-1e-9) * step
}

// tickDecimals is how many decimals show a tick step.
func tickDecimals(step float64) int {
	d := 0
	for s := step; s < 1 && d < 6; s *= 10 {
		d++
	}
	if math.Abs(step*math.Pow(10, float64(d))-math.Round(step*math.Pow(10, float64(d)))) > 1e-9 {
		d++ // 2.5 × 10^k
	}
	return d
}

// timeTicks is the step between the time axis's ticks, at most about six
// of them over span, and how to print them.
func timeTicks(span time.Duration) (time.Duration, string) {
	for _, s := range []time.Duration{5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second, time.Minute,
		2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute} {
		if span/s <= 6 {
			if s < time.Minute {
				return s, "15:04:05"
			}
			return s, "15:04"
		}
	}
	return time.Hour, "15:04"
}

// clip drops the points before from but the last of them, moved to from:
// the figure that held then.
func clip(ps []point, from time.Time) []point {
	i := 0
	for i < len(ps) && ps[i].T.Before(from) {
		i++
	}
	if i == 0 {
		return ps
	}
	out := make([]point, 0, len(ps)-i+1)
	out = append(out, point{from, ps[i-1].V})
	return append(out, ps[i:]...)
}

// thin keeps at most n points, the last of each of n equal slices of
// time: a line needs no more than a point per two pixels.
func thin(ps []point, from time.Time, span time.Duration, n int) []point {
	if len(ps) <= n || n < 1 {
		return ps
	}
	out := make([]point, 0, n+1)
	out = append(out, ps[0])
	slot := func(t time.Time) int64 { return int64(t.Sub(from)) * int64(n) / int64(span) }
	for i := 1; i < len(ps); i++ {
		if i == len(ps)-1 || slot(ps[i+1].T) != slot(ps[i].T) {
			out = append(out, ps[i])
		}
	}
	return out
}

// bar is a small bar of frac (0..1) of a track in tone, with a mark at
// mark when mark is in [0, 1] (a plan's elapsed time against its spending).
// Its figure is printed beside it: the bar is decoration for the eye.
func bar(frac, mark float64, tone string) template.HTML {
	frac = min(max(frac, 0), 1)
	if math.IsNaN(frac) {
		frac = 0
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="bar" viewBox="0 0 100 10" preserveAspectRatio="none" aria-hidden="true">`+
		`<rect class="track" width="100" height="10" rx="2"/><rect class="fill %s" width="%.1f" height="10" rx="2"/>`, tone, 100*frac)
	if mark >= 0 && mark <= 1 {
		fmt.Fprintf(&b, `<rect class="mark" x="%.1f" y="-1" width="1.6" height="12"/>`, max(0, 100*mark-0.8))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// segment is a part of a host: a VM's share, or the other users' together.
type segment struct {
	Label string
	Share float64
	Color string
}

// stacked is a bar of a host's shares, one segment each, in order; what no
// bid buys is left as track. Each segment names itself on hover; the
// legend beside it names the colours.
func stacked(segs []segment) template.HTML {
	var b strings.Builder
	b.WriteString(`<svg class="stack" viewBox="0 0 100 10" preserveAspectRatio="none" role="img" aria-label="`)
	var names []string
	for _, sg := range segs {
		names = append(names, fmt.Sprintf("%s %.0f%%", sg.Label, 100*sg.Share))
	}
	b.WriteString(html.EscapeString("shares: " + strings.Join(names, ", ")))
	b.WriteString(`"><rect class="track" width="100" height="10" rx="2"/>`)
	x := 0.0
	for _, sg := range segs {
		w := 100 * min(max(sg.Share, 0), 1)
		fmt.Fprintf(&b, `<rect x="%.2f" width="%.2f" height="10" fill="%s"><title>%s</title></rect>`, x, w, sg.Color,
			html.EscapeString(fmt.Sprintf("%s: %.1f%%", sg.Label, 100*sg.Share)))
		x += w
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
