package experiments

import (
	"fmt"
	"strings"
)

// Conclusion is one of a paper's conclusions and how it fares here. A
// paper's numbers depend on its testbed; its conclusions should not, so
// each is checked on five seed sets (1, 11, 22, 33, 44) by a test that a
// strategy broken into the fair split would fail. Where a conclusion does
// not hold as the paper states it, Why gives the measured cause.
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
