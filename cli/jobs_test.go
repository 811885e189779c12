package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/cli"
	"github.com/mrmarket/mrmarket/hadoopvm/yarn"
	"github.com/mrmarket/mrmarket/hadoopvm/yarn/yarntest"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

// TestDeadlineCommands: quote, submit and jobs against a running market
// where a best-effort plan sets the price. A user who can pay gets a curve
// and an admitted job; one who cannot is told so by the quote, and the
// submit is refused with nothing held; bad input changes nothing.
func TestDeadlineCommands(t *testing.T) {
	clock := time.Date(2026, 5, 1, 8, 0, 0, 0, time.UTC)
	m, err := market.Start(context.Background(), market.Config{
		Dir: t.TempDir(), NATSPort: -1, Now: func() time.Time { return clock },
		Hosts: []market.HostSpec{{ID: "host-1", CPUs: 2, VMs: []agent.VM{{ID: "a1", Owner: "alice"}, {ID: "b1", Owner: "bob"}, {ID: "c1", Owner: "carol"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	t.Setenv("MRM_CREDS", string(m.Keys()))
	n := "--nats=" + m.URL
	for user, amount := range map[string]string{"alice": "100", "bob": "1", "carol": "100"} {
		if r := mrmarket("bank", "grant", n, "--user", user, "--amount", amount); r.code != 0 {
			t.Fatalf("grant: %+v", r)
		}
	}
	if r := mrmarket("spend", n, "--user", "carol", "--budget", "50", "--duration", "1h", "--vm", "c1"); r.code != 0 {
		t.Fatalf("spend: %+v", r)
	}
	clock = clock.Add(10 * time.Second)
	if err := m.Tick(context.Background(), clock); err != nil {
		t.Fatal(err)
	}
	job := func(name, vm string) string {
		return writeFile(t, fmt.Sprintf(`{"name": %q, "vms": [%q], "maps": 4, "reduces": 0, "map_slots": 1,
			"profile": {"map_avg": 60, "map_max": 60}}`, name, vm))
	}
	alice, bob := job("etl", "a1"), job("report", "b1")

	r := mrmarket("quote", n, "--user", "alice", "--job", alice, "--json")
	var q wire.QuoteReply
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &q) != nil || len(q.Curve) != 10 || !q.Curve[0].Affordable {
		t.Fatalf("quote: %+v", r)
	}
	if q.Work != 240 || q.Source != "profile" {
		t.Fatalf("quote: work %v from %s, want ARIA's upper bound 240 s from the profile", q.Work, q.Source)
	}
	if !strings.Contains(r.stdout, `"work_s": 240`) && !strings.Contains(r.stdout, `"work_s":240`) {
		t.Errorf("quote --json names its work's unit (work_s): %s", r.stdout)
	}
	r = mrmarket("quote", n, "--user", "alice", "--job", alice)
	t.Log(r.stdout)
	if r.code != 0 || !strings.Contains(r.stdout, "DEADLINE") || strings.Contains(r.stdout, "pays for none") {
		t.Fatalf("quote: %+v", r)
	}
	r = mrmarket("quote", n, "--user", "bob", "--job", bob)
	if r.code != 0 || !strings.Contains(r.stdout, "pays for none") {
		t.Fatalf("bob's quote: %+v", r)
	}

	late := q.Curve[9].Deadline.Format(time.RFC3339)
	refuse(t, m, []refusal{
		{[]string{"submit", n, "--user", "bob", "--job", bob, "--deadline", late}, cli.ExitRefused, "insufficient"},
		{[]string{"submit", n, "--user", "bob", "--job", bob, "--budget", "0.5"}, cli.ExitRefused, "insufficient"},
		{[]string{"submit", n, "--user", "alice", "--job", alice, "--deadline", clock.Add(time.Minute).Format(time.RFC3339)}, cli.ExitRefused, "earliest finish"},
		{[]string{"submit", n, "--user", "alice", "--job", alice, "--deadline", late, "--budget", "5"}, cli.ExitBadInput, "not both"},
		{[]string{"submit", n, "--user", "alice", "--job", alice}, cli.ExitBadInput, "--deadline or --budget"},
		{[]string{"submit", n, "--user", "alice", "--job", alice, "--deadline", "tomorrow"}, cli.ExitBadInput, "--deadline"},
		{[]string{"submit", n, "--user", "alice", "--job", bob, "--deadline", late}, cli.ExitRefused, "another user"},
		{[]string{"submit", n, "--user", "alice", "--job", job("x", "nope"), "--deadline", late}, cli.ExitRefused, "nope"},
		{[]string{"submit", n, "--user", "alice", "--job", alice, "--budget", "-3"}, cli.ExitBadInput, "greater than zero"},
		{[]string{"submit", n, "--user", "alice", "--job",
			writeFile(t, `{"name": "x", "vms": ["a1"], "maps": 4, "map_slots": 1, "profile": {"map_avg": -1}}`), "--budget", "5"}, cli.ExitBadInput, "map average"},
		{[]string{"submit", n, "--user", "alice", "--job", writeFile(t, `{"name": "x", "vms": ["a1"], "colour": "red"}`), "--budget", "5"}, cli.ExitBadInput, "unknown field"},
		{[]string{"quote", n, "--user", "alice"}, cli.ExitBadInput, "--job"},
		{[]string{"submit", n, "--user", "alice", "--job", alice, "--best-effort", "--deadline", late}, cli.ExitBadInput, "no --deadline"},
		{[]string{"submit", n, "--user", "bob", "--job", bob, "--best-effort", "--budget", "0.5"}, cli.ExitRefused, "insufficient"},
		{[]string{"quote", n, "--user", "mallory", "--job", alice}, cli.ExitBadInput, "no credentials"},
	})

	r = mrmarket("submit", n, "--user", "alice", "--job", alice, "--deadline", q.Curve[3].Deadline.Format(time.RFC3339), "--id", "job-etl", "--json")
	var sub wire.SubmitReply
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &sub) != nil || sub.Job.Status != wire.JobRunning || sub.Job.Price <= 0 {
		t.Fatalf("submit: %+v", r)
	}
	if r := mrmarket("submit", n, "--user", "alice", "--job", alice, "--deadline", q.Curve[3].Deadline.Format(time.RFC3339), "--id", "job-etl"); r.code != 0 || !strings.Contains(r.stdout, "job-etl") {
		t.Fatalf("repeated submit: %+v", r)
	}
	if r := mrmarket("submit", n, "--user", "alice", "--job", alice, "--deadline", late); r.code != cli.ExitRefused || !strings.Contains(r.stderr, "already admitted") {
		t.Fatalf("second job of that name: %+v", r)
	}
	r = mrmarket("jobs", n, "--user", "alice")
	if r.code != 0 || !strings.Contains(r.stdout, "job-etl") || !strings.Contains(r.stdout, "running") {
		t.Fatalf("jobs: %+v", r)
	}
	clock = clock.Add(10 * time.Second)
	if err := m.Tick(context.Background(), clock); err != nil {
		t.Fatal(err)
	}
	r = mrmarket("vms", n, "--json")
	if r.code != 0 || !strings.Contains(r.stdout, "job-etl") {
		t.Fatalf("the job's VM has no bid: %+v", r)
	}

	// The YARN monitor reports the job's progress until it is done.
	yc := yarntest.New(clock)
	t.Cleanup(yc.Close)
	yc.AddNode("a1", 2)
	app := yc.Submit("alice", "etl", 4, 0, clock)
	finish := func(i int) {
		id, err := yc.StartAttempt(app, yc.TaskID(app, yarn.TypeMap, i), "a1", clock)
		if err != nil {
			t.Fatal(err)
		}
		if err := yc.FinishAttempt(app, id, clock.Add(time.Minute), true, nil); err != nil {
			t.Fatal(err)
		}
	}
	finish(0)
	finish(1)
	watch := []string{"jobs", "watch", n, "--user", "alice", "--job", alice, "--yarn", yc.RMURL(), "--history", yc.HistoryURL(), "--every", "10ms"}
	r = mrmarket(append(watch, "--once")...)
	if r.code != 0 || !strings.Contains(r.stdout, "running, 50%") || !strings.Contains(r.stdout, "2/4 maps") {
		t.Fatalf("jobs watch --once: %+v", r)
	}
	finish(2)
	finish(3)
	if err := yc.FinishApp(app, clock.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if r = mrmarket(watch...); r.code != 0 || !strings.Contains(r.stdout, "done, 100%") {
		t.Fatalf("jobs watch: %+v", r)
	}
	if r = mrmarket("jobs", n, "--user", "alice"); r.code != 0 || !strings.Contains(r.stdout, "done") {
		t.Fatalf("jobs after the watch: %+v", r)
	}
	if r = mrmarket("jobs", "watch", n, "--user", "alice", "--job", alice); r.code != cli.ExitBadInput || !strings.Contains(r.stderr, "--yarn") {
		t.Fatalf("jobs watch without --yarn: %+v", r)
	}
}
