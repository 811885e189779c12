package experiments

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// TuningSeeds are the seeds the experiments' constants (table depths,
// sizes, margins) were chosen on; TestSeeds, the seeds each conclusion's
// test checks it on, are others; ReportSeeds, TestSeeds and five more
// held out, are the seeds the results page's conclusions table gives its
// numbers on (notes/conclusions.md).
var (
	TuningSeeds = []uint64{1, 11, 22, 33, 44}
	TestSeeds   = []uint64{101, 202, 303, 404, 505}
	ReportSeeds = []uint64{101, 202, 303, 404, 505, 606, 707, 808, 909, 1010}
)

// Conclusion is one of a paper's conclusions and how it fares here. A
// paper's numbers depend on its testbed; its conclusions should not, so
// each is checked on the test seed sets (TestSeeds) by a test that fails
// under a mutation of the mechanism it claims (Mutations). Verdict says
// whether it holds as the paper states it, holds only reframed, or does
// not hold; where not as stated, Why gives the measured cause.
type Conclusion struct {
	Experiment string
	Claim      string // the paper's conclusion, and where it states it
	Verdict    string // one of Verdicts
	Holds      string // what holds, on the test seeds
	Test       string // the test that checks it on each of them (optional)
	// Mutations are the mutations (mutations/NAME.patch) that make Test
	// fail, by name.
	Mutations []string
	Why       string // where it does not hold as stated: the measured cause
}

// Verdicts are how a paper's conclusion fares here: as the paper states
// it, only as a reframed claim (the reframing in Holds, never counted as
// the paper's), or not at all.
var Verdicts = []string{"holds", "holds only reframed", "does not hold"}

// Conclusions are the papers' conclusions, experiment by experiment, as
// notes/conclusions.md states them.
var Conclusions = readConclusions()

// readConclusions reads notes/conclusions.md: a section per experiment,
// its items "claim: …", "verdict: …", "holds: …", "test: …",
// "mutation: a, b" and "why: …".
func readConclusions() []Conclusion {
	var out []Conclusion
	for _, it := range notesItems("conclusions.md") {
		if it.heading == "" {
			continue // the legend above the first section
		}
		if len(out) == 0 || out[len(out)-1].Experiment != it.heading {
			out = append(out, Conclusion{Experiment: it.heading})
		}
		c := &out[len(out)-1]
		key, text, _ := strings.Cut(it.text, ": ")
		switch key {
		case "claim":
			c.Claim = text
		case "verdict":
			if !slices.Contains(Verdicts, text) {
				panic(fmt.Sprintf("experiments: notes/conclusions.md, %s: verdict %q is none of %q", it.heading, text, Verdicts))
			}
			c.Verdict = text
		case "holds":
			c.Holds = text
		case "test":
			c.Test = text
		case "mutation":
			c.Mutations = strings.Split(text, ", ")
		case "why":
			c.Why = text
		default:
			panic(fmt.Sprintf("experiments: notes/conclusions.md, %s: item %q is none of claim, verdict, holds, test, mutation, why", it.heading, key))
		}
	}
	return out
}

// Mutation is a change to the product or the experiments that breaks the
// mechanism a conclusion rests on (mutations/NAME.patch, applied by `make
// mutations`), and the tests that must then fail.
type Mutation struct {
	Name, What string
	Fails      []string
}

//go:embed mutations/*.patch
var mutationsFS embed.FS

// Mutations are the mutations of mutations/, by name.
var Mutations = readMutations()

// readMutations reads each patch's "Mutation:" and "Fails:" lines.
func readMutations() map[string]Mutation {
	files, err := fs.Glob(mutationsFS, "mutations/*.patch")
	if err != nil {
		panic(err)
	}
	out := map[string]Mutation{}
	for _, f := range files {
		b, err := mutationsFS.ReadFile(f)
		if err != nil {
			panic(err)
		}
		m := Mutation{Name: strings.TrimSuffix(path.Base(f), ".patch")}
		for line := range strings.Lines(string(b)) {
			if what, ok := strings.CutPrefix(line, "Mutation: "); ok {
				m.What = strings.TrimSpace(what)
			}
			if fails, ok := strings.CutPrefix(line, "Fails: "); ok {
				m.Fails = strings.Fields(fails)
			}
		}
		out[m.Name] = m
	}
	return out
}
