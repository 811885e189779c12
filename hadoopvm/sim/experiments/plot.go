package experiments

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// WriteSVG draws the result as grouped bars, one group per metric: the
// paper's figure (where it gives one) and ours, with ±1 sd whiskers.
// Percentages are drawn as percentages.
func WriteSVG(w io.Writer, res Result) error {
	p, wide, err := chart(res)
	if err != nil {
		return err
	}
	cv := vgsvg.New(wide, 5*vg.Inch)
	p.Draw(draw.New(cv))
	_, err = cv.WriteTo(w)
	return err
}

// chart is the result's bar chart and its width.
func chart(res Result) (*plot.Plot, vg.Length, error) {
	p := plot.New()
	p.Title.Text = res.Experiment + ": " + res.Source
	p.Y.Label.Text = "value"
	var paper, ours plotter.Values
	var errs plotter.YErrors
	var names []string
	for _, r := range res.Rows {
		scale := 1.0
		if r.Unit == "%" {
			scale = 100
		}
		pv := r.Paper * scale
		if math.IsNaN(pv) {
			pv = 0
		}
		paper = append(paper, pv)
		ours = append(ours, r.Mean*scale)
		errs = append(errs, struct{ Low, High float64 }{r.SD * scale, r.SD * scale})
		names = append(names, shorten(r.Metric, 40))
	}
	if len(ours) == 0 {
		return nil, 0, fmt.Errorf("experiments: %s has no rows to plot", res.Experiment)
	}
	width := vg.Points(7)
	pb, err := plotter.NewBarChart(paper, width)
	if err != nil {
		return nil, 0, err
	}
	pb.Color = color.Gray{Y: 170}
	pb.Offset = -width
	ob, err := plotter.NewBarChart(ours, width)
	if err != nil {
		return nil, 0, err
	}
	ob.Color = plotutil.Color(0)
	p.Add(pb, ob)
	// Whiskers on our bars (centred on the category).
	pts := make(plotter.XYs, len(ours))
	for i := range ours {
		pts[i].X, pts[i].Y = float64(i), ours[i]
	}
	eb, err := plotter.NewYErrorBars(struct {
		plotter.XYer
		plotter.YErrorer
	}{pts, errs})
	if err != nil {
		return nil, 0, err
	}
	p.Add(eb)
	p.Legend.Add("paper", pb)
	p.Legend.Add("mrmarket", ob)
	p.Legend.Top = true
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = math.Pi / 4
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YCenter
	return p, vg.Length(max(6, 0.6*float64(len(names)))) * vg.Inch, nil
}

func shorten(s string, n int) string {
	if len([]rune(s)) <= n {
		return s
	}
	return strings.TrimSpace(string([]rune(s)[:n-1])) + "…"
}
