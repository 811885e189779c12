package experiments

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Layout of the result charts. A chart is a column of panels, one per
// quantity (the part of a row's metric before its first comma: "mean
// response", "missed deadlines per run"), so each y axis carries one
// quantity in one unit; a quantity with more rows than maxBars is split
// over several panels, so no chart grows wider than a page.
const (
	maxBars     = 24
	panelHeight = 3.4 * vg.Inch
	chartWidth  = 9 * vg.Inch
	labelChars  = 42 // a bar's label is cut to this many characters
	headroom    = 1.35
	narrowBars  = 6
	axisChars   = 34 // a y axis names its quantity in this many characters; the panel's title in full
)

// WriteSVG draws the result as grouped bars: the paper's figure (where it
// gives one) and ours with ±1 sd whiskers, a panel per quantity.
// Percentages are drawn as percentages.
func WriteSVG(w io.Writer, res Result) error {
	panels, err := charts(res)
	if err != nil {
		return err
	}
	cv := vgsvg.New(chartWidth, chartHeight(panels))
	drawPanels(draw.New(cv), panels)
	_, err = cv.WriteTo(w)
	return err
}

// columns is how many panels sit side by side: two when every panel is
// narrow (a few bars each), so a chart of many small quantities stays short.
func columns(panels []*plot.Plot) int {
	for _, p := range panels {
		if p.X.Max > narrowBars {
			return 1
		}
	}
	return 2
}

// chartHeight is the height of a chart of these panels.
func chartHeight(panels []*plot.Plot) vg.Length {
	c := columns(panels)
	return vg.Length((len(panels)+c-1)/c) * panelHeight
}

// drawPanels draws the panels on c, left to right and top to bottom.
func drawPanels(c draw.Canvas, panels []*plot.Plot) {
	cols := columns(panels)
	tiles := draw.Tiles{Rows: (len(panels) + cols - 1) / cols, Cols: cols, PadX: vg.Points(12), PadY: vg.Points(6),
		PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(12)}
	for i, p := range panels {
		p.Draw(tiles.At(c, i%cols, i/cols))
	}
}

// quantity is a row's quantity and the rest of its metric, the bar's label:
// "mean response, klps, load 0.75" → "mean response", "klps, load 0.75".
func quantity(metric string) (string, string) {
	q, rest, ok := strings.Cut(metric, ", ")
	if !ok {
		return metric, ""
	}
	return q, rest
}

// axisLabel names a panel's y axis: its unit, or a quantity without one
// (a count, a ratio) by its name.
func axisLabel(q, unit string) string {
	switch unit {
	case "%":
		return "percent (%)"
	case "s":
		return "seconds (s)"
	case "":
		if q == "" {
			return "as named under each bar"
		}
		return shorten(q, axisChars)
	}
	return unit
}

// panelRows is the rows of one panel.
type panelRows struct {
	quantity, unit string
	rows           []Row
	labels         []string
}

// panelsOf groups the rows by quantity and unit in their order of first
// appearance, splitting groups longer than maxBars.
func panelsOf(rows []Row) []panelRows {
	var out []panelRows
	index := map[string]int{}
	for _, r := range rows {
		q, label := quantity(r.Metric)
		if label == "" { // a metric that is its own quantity shares its unit's panel, named under its bar
			q, label = "", r.Metric
		}
		key := q + "\x00" + r.Unit
		i, ok := index[key]
		if !ok || len(out[i].rows) == maxBars {
			i = len(out)
			index[key] = i
			out = append(out, panelRows{quantity: q, unit: r.Unit})
		}
		out[i].rows = append(out[i].rows, r)
		out[i].labels = append(out[i].labels, shorten(label, labelChars))
	}
	return out
}

// charts is the result's panels, the first titled with the experiment and
// its source.
func charts(res Result) ([]*plot.Plot, error) {
	if len(res.Rows) == 0 {
		return nil, fmt.Errorf("experiments: %s has no rows to plot", res.Experiment)
	}
	var plots []*plot.Plot
	for i, pr := range panelsOf(res.Rows) {
		p, err := panel(pr)
		if err != nil {
			return nil, err
		}
		p.Title.Text = shorten(pr.quantity, 90)
		if i == 0 {
			p.Title.Text = res.Experiment + ": " + res.Source + "\n" + p.Title.Text
		}
		plots = append(plots, p)
	}
	return plots, nil
}

// panel is one quantity's bars: grey the paper's, coloured ours with ±1 sd
// whiskers. The y range holds every whisker, and leaves headroom above the
// tallest for the legend, which so never covers a bar.
func panel(pr panelRows) (*plot.Plot, error) {
	p := plot.New()
	p.Y.Label.Text = axisLabel(pr.quantity, pr.unit)
	p.Title.TextStyle.Font.Size = font.Length(10)
	var paper, ours plotter.Values
	var errs plotter.YErrors
	lo, hi := 0.0, 0.0
	paperGives := false
	for _, r := range pr.rows {
		scale := 1.0
		if r.Unit == "%" {
			scale = 100
		}
		pv := r.Paper * scale
		if math.IsNaN(pv) {
			pv = 0
		} else {
			paperGives = true
		}
		m, sd := r.Mean*scale, r.SD*scale
		paper = append(paper, pv)
		ours = append(ours, m)
		errs = append(errs, struct{ Low, High float64 }{sd, sd})
		lo, hi = min(lo, pv, m-sd), max(hi, pv, m+sd)
	}
	if hi == lo {
		hi = lo + 1
	}
	p.Y.Min = lo
	if lo < 0 {
		p.Y.Min = lo - 0.05*(hi-lo)
	}
	p.Y.Max = hi + (headroom-1)*(hi-p.Y.Min)
	width := vg.Points(min(14, max(4, 360/float64(2*len(ours)+1))))
	pb, err := plotter.NewBarChart(paper, width)
	if err != nil {
		return nil, err
	}
	pb.Color = color.Gray{Y: 170}
	pb.LineStyle.Width = 0
	pb.Offset = -width // ours is centred on the category, where its whisker is
	ob, err := plotter.NewBarChart(ours, width)
	if err != nil {
		return nil, err
	}
	ob.Color = plotutil.Color(0)
	ob.LineStyle.Width = 0
	pts := make(plotter.XYs, len(ours))
	for i := range ours {
		pts[i].X, pts[i].Y = float64(i), ours[i]
	}
	eb, err := plotter.NewYErrorBars(struct {
		plotter.XYer
		plotter.YErrorer
	}{pts, errs})
	if err != nil {
		return nil, err
	}
	grid := plotter.NewGrid()
	grid.Vertical.Width = 0
	p.Add(grid, ob, eb)
	if paperGives { // else a legend entry for bars that are not there
		p.Add(pb)
		p.Legend.Add("paper", pb)
	}
	p.Legend.Add("mrmarket (±1 sd)", ob)
	p.Legend.Top = true
	p.Legend.Left = false
	p.Legend.XOffs = -vg.Points(4)
	p.Legend.TextStyle.Font.Size = font.Length(9)
	p.NominalX(pr.labels...)
	p.X.Tick.Label.Rotation = math.Pi / 6
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YTop
	p.X.Tick.Label.Font.Size = font.Length(8)
	p.X.Padding = vg.Points(2)
	p.X.Min, p.X.Max = -0.8, float64(len(ours))-0.4 // room for the outer bars
	return p, nil
}

func shorten(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return strings.TrimSpace(string([]rune(s)[:n-1])) + "…"
}
