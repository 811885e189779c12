package experiments

import (
	"fmt"
	"strings"
)

// TuningSeeds are the seeds the experiments' constants (table depths,
// sizes, margins) were chosen on; TestSeeds, the seeds each conclusion's
// test checks it on, are others; ReportSeeds, TestSeeds and five more
// held out, are where the results page gives each conclusion seed by seed.
var (
	TuningSeeds = []uint64{1, 11, 22, 33, 44}
	TestSeeds   = []uint64{101, 202, 303, 404, 505}
	ReportSeeds = []uint64{101, 202, 303, 404, 505, 606, 707, 808, 909, 1010}
)

// Conclusion is one of a paper's conclusions and how it fares here. A
// paper's numbers depend on its testbed; its conclusions should not, so
// each is checked on the test seed sets (TestSeeds) by a test that fails
// under a mutation of the mechanism it claims (Mutation). Verdict says
// whether it holds as the paper states it, holds only reframed, or does
// not hold; where not as stated, Why gives the measured cause.
type Conclusion struct {
	Experiment string
	Claim      string // the paper's conclusion, and where it states it
	Holds      string // on the five seed sets: "yes", or what holds instead
	Test       string // the test that checks it on each of the five
	Why        string // where it does not hold as stated: the measured cause
}

// Conclusions are the papers' conclusions, experiment by experiment, as
// notes/conclusions.md states them.
var Conclusions = readConclusions()

// readConclusions reads notes/conclusions.md: a section per experiment,
// its items "claim: …", "holds: …", "test: …" and "why: …".
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
		case "holds":
			c.Holds = text
		case "test":
			c.Test = text
		case "why":
			c.Why = text
		default:
			panic(fmt.Sprintf("experiments: notes/conclusions.md, %s: item %q is none of claim, holds, test, why", it.heading, key))
		}
	}
	return out
}
