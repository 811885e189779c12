package wire_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
)

func TestDecodeIsStrict(t *testing.T) {
	good := `{"v":1,"id":"g1","user":"alice","amount_micro":5}`
	var req wire.GrantRequest
	if err := wire.Decode([]byte(good), &req); err != nil {
		t.Fatalf("good request refused: %v", err)
	}
	bad := map[string]string{
		"garbage":        `{not json`,
		"empty":          ``,
		"array":          `[1,2]`,
		"unknown field":  `{"v":1,"id":"g1","user":"alice","amount_micro":5,"admin":true}`,
		"trailing":       `{"v":1,"id":"g1","user":"alice","amount_micro":5} {}`,
		"version 0":      `{"id":"g1","user":"alice","amount_micro":5}`,
		"version 2":      `{"v":2,"id":"g1","user":"alice","amount_micro":5}`,
		"float amount":   `{"v":1,"id":"g1","user":"alice","amount_micro":5.5}`,
		"string amount":  `{"v":1,"id":"g1","user":"alice","amount_micro":"5"}`,
		"negative":       `{"v":1,"id":"g1","user":"alice","amount_micro":-5}`,
		"zero":           `{"v":1,"id":"g1","user":"alice","amount_micro":0}`,
		"absurd":         `{"v":1,"id":"g1","user":"alice","amount_micro":9223372036854775807}`,
		"overflowing":    `{"v":1,"id":"g1","user":"alice","amount_micro":99999999999999999999}`,
		"dotted user":    `{"v":1,"id":"g1","user":"a.b","amount_micro":5}`,
		"wildcard user":  `{"v":1,"id":"g1","user":"*","amount_micro":5}`,
		"no id":          `{"v":1,"user":"alice","amount_micro":5}`,
		"spaces in id":   `{"v":1,"id":"g 1","user":"alice","amount_micro":5}`,
		"duplicate keys": `{"v":1,"id":"g1","user":"alice","amount_micro":5,"amount_micro":-1}`,
	}
	for name, body := range bad {
		var req wire.GrantRequest
		err := wire.Decode([]byte(body), &req)
		if !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("%s: err = %v, want bad_request", name, err)
		}
	}
}

func TestDurationTravelsAsString(t *testing.T) {
	var req wire.SpendRequest
	body := `{"v":1,"user":"alice","budget_micro":10,"duration":"1h30m","vms":["a1"],"strategy":"fair"}`
	if err := wire.Decode([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	if req.Duration.D() != 90*time.Minute {
		t.Fatalf("duration %v", req.Duration.D())
	}
	for _, d := range []string{`"0s"`, `"-1m"`, `"9000h"`, `"soon"`, `5`} {
		body := strings.Replace(`{"v":1,"user":"alice","budget_micro":10,"duration":D,"vms":["a1"],"strategy":"fair"}`, "D", d, 1)
		if err := wire.Decode([]byte(body), &req); !errors.Is(err, wire.ErrBadRequest) {
			t.Errorf("duration %s: %v", d, err)
		}
	}
}

func TestToErrorKeepsCategory(t *testing.T) {
	myErr := fmt.Errorf("%w: unknown account", wire.ErrNotFound)
	wrapped := fmt.Errorf("grant: %w", myErr)
	e := wire.ToError(wrapped)
	if e.Code != wire.CodeNotFound || e.Message != "grant: not found: unknown account" {
		t.Fatalf("got %+v", e)
	}
	if got := wire.ToError(errors.New("disk on fire")); got.Code != wire.CodeInternal {
		t.Fatalf("plain error → %+v", got)
	}
	// A reply error decoded on the client side matches the sentinel.
	var res wire.GrantReply
	err := wire.DecodeReply(wire.EncodeReply(nil, myErr), &res)
	if !errors.Is(err, wire.ErrNotFound) || errors.Is(err, wire.ErrForbidden) {
		t.Fatalf("decoded reply error %v does not match its category", err)
	}
}

// TestWeightsAllZeroAreRefused: a plan whose workflows, a workflow's
// stages, or hosts all weigh 0 could never spend what it holds: refused
// before anything is held.
func TestWeightsAllZeroAreRefused(t *testing.T) {
	base := func() wire.SpendRequest {
		return wire.SpendRequest{User: "alice", Budget: 10_000_000, Duration: wire.Duration(time.Hour), Strategy: wire.StrategyWorkflow,
			Workflows: []wire.WorkflowSpec{{Name: "w", Weight: 1, Stages: []wire.StageSpec{{Name: "s", Weight: 1, VMs: []string{"a1"}}}}}}
	}
	ok := base()
	if err := ok.Validate(); err != nil {
		t.Fatalf("a valid plan: %v", err)
	}
	zeroWorkflows := base()
	zeroWorkflows.Workflows[0].Weight = 0
	zeroStages := base()
	zeroStages.Workflows[0].Stages[0].Weight = 0
	zeroHosts := wire.SpendRequest{User: "alice", Budget: 10_000_000, Duration: wire.Duration(time.Hour), Strategy: wire.StrategyBestResp,
		VMs: []string{"a1"}, HostWeights: map[string]float64{"host-1": 0}}
	for name, r := range map[string]wire.SpendRequest{"workflows": zeroWorkflows, "stages": zeroStages, "hosts": zeroHosts} {
		if err := r.Validate(); !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), "0") {
			t.Errorf("%s all 0: %v, want a bad request", name, err)
		}
	}
}
