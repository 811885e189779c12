package experiments_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mrmarket/mrmarket/hadoopvm/sim/experiments"
)

// conclusionSeeds are the seeds every paper's conclusion is checked on:
// none of them is a seed the experiments' constants were chosen on
// (experiments.TuningSeeds), so a conclusion tuned until it held there is
// checked where it was not.
var conclusionSeeds = experiments.TestSeeds

// perSeed runs experiment name once for each conclusion seed — runs runs,
// parameters set — and hands check each seed's result.
func perSeed(t *testing.T, name string, runs int, set map[string]string, check func(seed uint64, res experiments.Result)) {
	t.Helper()
	e, err := experiments.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range conclusionSeeds {
		res, err := e.Run(context.Background(), experiments.Config{Seed: seed, Runs: runs, Set: set})
		if err != nil {
			t.Fatal(err)
		}
		check(seed, res)
	}
}

// metric is the mean of the row named metric in res.
func metric(t *testing.T, res experiments.Result, name string) float64 {
	t.Helper()
	for _, r := range res.Rows {
		if r.Metric == name {
			return r.Mean
		}
	}
	t.Fatalf("%s: no row %q", res.Experiment, name)
	return math.NaN()
}

// TestConclusionsNameRealTests: every conclusion the results page lists
// belongs to an experiment and names a test of this package that exists,
// so the page cannot point at a check that is gone.
func TestConclusionsNameRealTests(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
	}
	for _, c := range experiments.Conclusions {
		if _, err := experiments.Get(c.Experiment); err != nil {
			t.Errorf("conclusion of %q: %v", c.Experiment, err)
		}
		if c.Claim == "" || c.Verdict == "" || c.Holds == "" {
			t.Errorf("conclusion of %q: no claim, verdict or what holds", c.Experiment)
		}
		if c.Test != "" && !strings.Contains(src.String(), "func "+c.Test+"(t *testing.T)") {
			t.Errorf("conclusion of %q names %s, which is not a test here", c.Experiment, c.Test)
		}
		if c.Verdict != "holds" && c.Why == "" {
			t.Errorf("conclusion of %q: %s, and gives no cause", c.Experiment, c.Verdict)
		}
		if c.Test != "" && len(c.Mutations) == 0 {
			t.Errorf("conclusion of %q: its test %s names no mutation it fails under", c.Experiment, c.Test)
		}
		for _, name := range c.Mutations {
			m, ok := experiments.Mutations[name]
			if !ok || m.What == "" || !slices.Contains(m.Fails, c.Test) {
				t.Errorf("conclusion of %q: mutation %q is not in mutations/, or not one %s fails under (%+v)", c.Experiment, name, c.Test, m)
			}
		}
	}
}

// TestMutationsNamedInTheirTests: each mutation's tests say, in their
// comments, that they fail under it — and are tests of this package.
func TestMutationsNamedInTheirTests(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	comments := map[string]string{} // test name: the comment above it
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc []string
		for line := range strings.Lines(string(b)) {
			switch {
			case strings.HasPrefix(line, "//"):
				doc = append(doc, strings.TrimSpace(strings.TrimPrefix(line, "//")))
			case strings.HasPrefix(line, "func Test"):
				name, _, _ := strings.Cut(strings.TrimPrefix(line, "func "), "(")
				comments[name] = strings.Join(doc, " ")
				doc = nil
			default:
				doc = nil
			}
		}
	}
	if len(experiments.Mutations) == 0 {
		t.Fatal("no mutations")
	}
	for _, m := range experiments.Mutations {
		for _, test := range m.Fails {
			doc, ok := comments[test]
			if !ok {
				t.Errorf("mutation %s names %s, not a test here", m.Name, test)
				continue
			}
			if !strings.Contains(doc, "Mutation") {
				t.Errorf("%s's comment names no mutation it fails under (%s should be one)", test, m.Name)
			}
		}
	}
}
