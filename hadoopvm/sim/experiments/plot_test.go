package experiments

import (
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"

	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var redraw = flag.Bool("redraw", false, "redraw docs/results/*.svg from the JSON beside them")

// TestChartsReadable draws every result on the results page and checks what
// made the charts unreadable before: one quantity and unit per y axis, named
// (never "value"); no panel wider than maxBars bars; every bar and whisker
// inside its frame. Each committed SVG must be what today's code draws from
// the JSON beside it (-redraw rewrites them). With PLOT_PNG=dir it also
// writes each chart as a PNG there, to look at.
func TestChartsReadable(t *testing.T) {
	const dir = "../../../docs/results"
	results, err := Load(dir)
	if err != nil || len(results) == 0 {
		t.Fatalf("no results to draw: %v", err)
	}
	for _, res := range results {
		groups := panelsOf(res.Rows)
		panels, err := charts(res)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range panels {
			g := groups[i]
			if p.Y.Label.Text == "" || p.Y.Label.Text == "value" {
				t.Errorf("%s panel %d: y axis %q", res.Experiment, i, p.Y.Label.Text)
			}
			if len(g.rows) > maxBars {
				t.Errorf("%s panel %d: %d bars", res.Experiment, i, len(g.rows))
			}
			for _, r := range g.rows {
				if r.Unit != g.unit {
					t.Errorf("%s panel %d: %q in %q beside %q", res.Experiment, i, r.Metric, r.Unit, g.unit)
				}
				scale := 1.0
				if r.Unit == "%" {
					scale = 100
				}
				for _, v := range []float64{r.Paper * scale, (r.Mean - r.SD) * scale, (r.Mean + r.SD) * scale} {
					if !math.IsNaN(v) && (v < p.Y.Min || v > p.Y.Max) {
						t.Errorf("%s panel %d: %q reaches %g outside [%g, %g]", res.Experiment, i, r.Metric, v, p.Y.Min, p.Y.Max)
					}
				}
			}
			if x := p.X; x.Min > -0.5 || x.Max < float64(len(g.rows))-0.5 {
				t.Errorf("%s panel %d: x range [%g, %g] cuts the outer bars", res.Experiment, i, x.Min, x.Max)
			}
		}
		var svg bytes.Buffer
		if err := WriteSVG(&svg, res); err != nil {
			t.Fatal(err)
		}
		name := filepath.Join(dir, res.Experiment+".svg") // where Save writes it
		if *redraw {
			if err := os.WriteFile(name, svg.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		} else if old, err := os.ReadFile(name); err != nil || !bytes.Equal(old, svg.Bytes()) {
			t.Errorf("%s is not what the plot code draws from %s (%v): go test ./hadoopvm/sim/experiments -run TestChartsReadable -redraw",
				name, res.Experiment+".json", err)
		}
		if dir := os.Getenv("PLOT_PNG"); dir != "" {
			cv := vgimg.New(chartWidth, chartHeight(panels))
			drawPanels(draw.New(cv), panels)
			out, err := os.Create(filepath.Join(dir, res.Experiment+".png"))
			if err != nil {
				t.Fatal(err)
			}
			png := vgimg.PngCanvas{Canvas: cv}
			if _, err := png.WriteTo(out); err != nil {
				t.Fatal(err)
			}
			out.Close()
		}
	}
}
