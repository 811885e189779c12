package broker_test

import (
	"slices"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/broker/brokertest"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// TestScripts runs the scripts in testdata (see brokertest.Harness.Run for
// their commands) against broker replicas with no network; -rewrite
// rewrites their expected output.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := brokertest.New(t, broker.Config{})
		datadriven.RunTest(t, path, h.Run)
		// Honest plans keep to what their users sign (brokertest's pace
		// audit): no leg of theirs would be cut, no bid refused.
		for _, b := range h.Audit() {
			t.Errorf("pace audit: %s", b)
		}
	})
}

// TestEveryPlanStrategyIsRegistered: every strategy a plan may name runs
// through the strategies registry.
func TestEveryPlanStrategyIsRegistered(t *testing.T) {
	for _, name := range append(slices.Clone(wire.Strategies), wire.StrategyDeadline) {
		if s, err := strategies.ByName(name); err != nil || s.Name() != name {
			t.Errorf("%s: %v %v", name, s, err)
		}
	}
}
