package experiments_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/hadoopvm/sim/experiments"
)

// TestEveryExperimentRuns: a short run (one seed) of each experiment gives
// every metric a finite value, and a paper figure where the paper has one.
func TestEveryExperimentRuns(t *testing.T) {
	if len(experiments.List()) < 5 {
		t.Fatalf("experiments: %d", len(experiments.List()))
	}
	for _, e := range experiments.List() {
		steps := 0
		res, err := e.Run(context.Background(), experiments.Config{Seed: 1, Runs: 1, Set: e.Quick(), Progress: func(done, total int) { steps = done }})
		if err != nil {
			t.Fatal(err)
		}
		if res.Engine.Describe() == "unstated" {
			t.Errorf("%s does not say which code its numbers come from (Engine)", e.Name)
		}
		if steps != e.Steps(1) || len(res.Rows) == 0 {
			t.Fatalf("%s: %d of %d steps, %d rows", e.Name, steps, e.Steps(1), len(res.Rows))
		}
		for _, r := range res.Rows {
			if math.IsNaN(r.Mean) || math.IsInf(r.Mean, 0) || r.N != 1 {
				t.Errorf("%s: %s = %v over %d runs", e.Name, r.Metric, r.Mean, r.N)
			}
		}
		if _, err := json.Marshal(res); err != nil {
			t.Errorf("%s: %v", e.Name, err)
		}
		t.Logf("%s: %d rows in %s", e.Name, len(res.Rows), res.Wall)
	}
}

// TestExperimentsAreDeterministic: the same seed gives the same numbers.
func TestExperimentsAreDeterministic(t *testing.T) {
	for _, name := range []string{"s003-stage", "lin"} {
		e, err := experiments.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		a, err := e.Run(context.Background(), experiments.Config{Seed: 4, Runs: 2, Set: e.Quick()})
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.Run(context.Background(), experiments.Config{Seed: 4, Runs: 2, Set: e.Quick()})
		if err != nil {
			t.Fatal(err)
		}
		for i := range a.Rows {
			if a.Rows[i].Mean != b.Rows[i].Mean || a.Rows[i].SD != b.Rows[i].SD {
				t.Fatalf("%s: %s %v then %v", name, a.Rows[i].Metric, a.Rows[i].Mean, b.Rows[i].Mean)
			}
		}
	}
	if _, err := experiments.Get("nope"); !errors.Is(err, experiments.ErrUnknown) {
		t.Fatalf("unknown experiment: %v", err)
	}
}

// TestReport: a result saves as JSON and an SVG plot, and the results page
// carries its side-by-side table and links the plot.
func TestReport(t *testing.T) {
	e, err := experiments.Get("lin")
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Run(context.Background(), experiments.Config{Seed: 1, Runs: 1, Set: e.Quick()})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := experiments.Save(dir, res); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "lin.svg"))
	if err != nil || !strings.Contains(string(svg), "<svg") || !strings.Contains(string(svg), "mrmarket") {
		t.Fatalf("svg: %v %.100s", err, svg)
	}
	var back experiments.Result
	b, _ := os.ReadFile(filepath.Join(dir, "lin.json"))
	if err := json.Unmarshal(b, &back); err != nil || len(back.Rows) != len(res.Rows) {
		t.Fatalf("json: %v", err)
	}
	var page strings.Builder
	if err := experiments.WriteMarkdown(&page, []experiments.Result{res}, "results", time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| metric | paper | mrmarket (mean ± sd) | ratio |", "| mean response, maxsrpt, load 0.75 | 3.32 (§5.3) |", "![lin](results/lin.svg)"} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("the page lacks %q:\n%s", want, page.String())
		}
	}
}
