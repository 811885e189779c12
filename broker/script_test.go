package broker_test

import (
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/broker/brokertest"
)

// TestScripts runs the scripts in testdata (see brokertest.Harness.Run for
// their commands) against broker replicas with no network; -rewrite
// rewrites their expected output.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := brokertest.New(t, broker.Config{})
		datadriven.RunTest(t, path, h.Run)
	})
}
