package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/agent/virt"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// TestSpanRoundsForPeople: durations in tables are whole seconds without
// zero tails.
func TestSpanRoundsForPeople(t *testing.T) {
	for d, want := range map[time.Duration]string{
		56*time.Minute + 14994691182*time.Nanosecond: "56m15s",
		time.Hour:                 "1h",
		90 * time.Minute:          "1h30m",
		30 * time.Minute:          "30m",
		time.Hour + 5*time.Second: "1h0m5s",
		24 * time.Hour:            "24h",
		1500 * time.Millisecond:   "2s",
		250500 * time.Microsecond: "251ms",
		0:                         "0s",
	} {
		if got := span(d); got != want {
			t.Errorf("span(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestProgressOnlyOnATerminal: the progress bar is drawn on a character
// device, never into a buffer, a file or a pipe.
func TestProgressOnlyOnATerminal(t *testing.T) {
	var buf bytes.Buffer
	if progressBar(&buf, "x") != nil {
		t.Error("a progress bar into a buffer")
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) || progressBar(f, "x") != nil {
		t.Error("a progress bar into a file")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if isTerminal(w) {
		t.Error("a pipe is not a terminal")
	}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		if !isTerminal(tty) {
			t.Error("/dev/tty is a terminal")
		}
	}
	draw := drawProgress(&buf, "lin")
	draw(1, 2)
	draw(2, 2)
	if got := buf.String(); !strings.Contains(got, "\rlin [###############...............] 1/2") || !strings.HasSuffix(got, "2/2\n") {
		t.Errorf("progress bar: %q", got)
	}
}

// TestVMsShowEveryBid: a VM funded by several plans has a row per bid;
// one without a bid a row with PLAN -; --no-headers drops the header.
func TestVMsShowEveryBid(t *testing.T) {
	ends := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	rep := wire.VMsReply{VMs: []wire.HostVM{
		{Host: "host-1", VMState: wire.VMState{VM: "a1", Owner: "alice", Rate: 3, Share: 0.75, Util: 0.5, Bids: []wire.VMBid{
			{Plan: "p1", Rate: 1, Charged: 1_000_000, Ends: ends}, {Plan: "p2", Rate: 2, Charged: 2_500_000, Ends: ends}},
			Caps: map[string]float64{wire.ResourceDisk: 187.5}},
			Resources: []wire.ResourceMode{{Resource: wire.ResourceDisk, Mode: wire.ModeThrottle}, {Resource: wire.ResourceNetIn, Mode: wire.ModeNone}}},
		{Host: "host-1", VMState: wire.VMState{VM: "b1", Owner: "bob", Idle: true}},
	}}
	var buf bytes.Buffer
	if err := printVMs(&out{Writer: &buf}, rep); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "PLAN") || !strings.Contains(lines[0], "BID") {
		t.Fatalf("vms:\n%s", buf.String())
	}
	// a1's disk is throttled at 187.5 MB/s, its network not governed; b1's
	// host says nothing: no share shown where none is delivered.
	for i, want := range [][]string{{"a1", "p1", "0.0036/h", "1 ", "187.5 MiB/s"}, {"a1", "p2", "0.0072/h", "2.5"}, {"b1", "idle", " - "}} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("vms row %d %q lacks %q", i+1, lines[i+1], w)
			}
		}
	}
	if f := strings.Fields(lines[1]); len(f) < 9 || f[8] != "-" { // after "187.5 MiB/s"
		t.Errorf("a1's network is not governed, so it shows no share: %q", lines[1])
	}
	if !strings.Contains(lines[1], "0.0108/h") || !strings.Contains(lines[2], "0.0108/h") {
		t.Errorf("a VM's rate is the sum of its bids:\n%s", buf.String())
	}
	buf.Reset()
	if err := printVMs(&out{Writer: &buf, noHeaders: true}, rep); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "HOST") || strings.Count(buf.String(), "\n") != 3 {
		t.Errorf("vms --no-headers:\n%s", buf.String())
	}
}

// TestVMsShowOthersTogether: a user's answer has, after its own VMs on a
// host, one row for the other users' VMs there, with their count, rate and
// share and nothing else; hosts where it has no VM of its own too.
func TestVMsShowOthersTogether(t *testing.T) {
	rep := wire.VMsReply{
		VMs: []wire.HostVM{
			{Host: "host-1", VMState: wire.VMState{VM: "a1", Owner: "alice", Rate: 2, Share: 0.5, Bids: []wire.VMBid{{Plan: "p1", Rate: 2}}}},
			{Host: "host-2", VMState: wire.VMState{VM: "a2", Owner: "alice"}},
		},
		Others: []wire.OtherVMs{{Host: "host-1", VMs: 2, Rate: 2, Share: 0.5}, {Host: "host-3", VMs: 1, Rate: 1, Share: 1}},
	}
	var buf bytes.Buffer
	if err := printVMs(&out{Writer: &buf}, rep); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("vms:\n%s", buf.String())
	}
	for i, want := range [][]string{{"host-1", "a1", "alice", "p1"}, {"host-1", "(2 VMs)", "(others)", "0.0072/h", "50.00%"},
		{"host-2", "a2"}, {"host-3", "(1 VM)", "(others)", "0.0036/h", "100.00%"}} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("vms row %d %q lacks %q", i+1, lines[i+1], w)
			}
		}
	}
	if f := strings.Fields(lines[2]); len(f) != 13 || slices.ContainsFunc(f[6:], func(c string) bool { return c != "-" }) {
		t.Errorf("the others' row shows more than their count, rate and share: %q", lines[2])
	}
}

// TestIncomeSaysWhenItPays: no "-1"; a new schedule's first period is paid
// at once and the table says when the next is.
func TestIncomeSaysWhenItPays(t *testing.T) {
	now := time.Date(2026, 5, 1, 8, 0, 0, 0, time.UTC)
	req := &wire.IncomeSetRequest{User: "alice", Amount: 10_000_000, Every: wire.Duration(time.Hour)}
	rep := wire.IncomeSetReply{Schedules: []wire.IncomeSchedule{
		{User: "alice", Amount: 10_000_000, Every: wire.Duration(time.Hour), Anchor: now, LastPeriod: -1},
		{User: "bob", Amount: 1_000_000, Every: wire.Duration(24 * time.Hour), Anchor: now.Add(-36 * time.Hour), LastPeriod: 1},
	}}
	var buf bytes.Buffer
	if err := printIncome(&out{Writer: &buf}, rep, req, now); err != nil {
		t.Fatal(err)
	}
	got := buf.String()
	for _, want := range []string{"PERIODS PAID", "alice  10      1h     0             now", "bob    1       24h    2             2026-05-01T20:00:00Z",
		"first period is paid at once", "the next at 2026-05-01T09:00:00Z"} {
		if !strings.Contains(got, want) {
			t.Errorf("income set output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "-1") {
		t.Errorf("income set prints -1:\n%s", got)
	}
	// Once the bank has paid it (or pays the first period itself), the
	// next payment is a period on.
	rep.Schedules[0].LastPeriod = 0
	buf.Reset()
	if err := printIncome(&out{Writer: &buf}, rep, req, now); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); !strings.Contains(got, "1h     1             2026-05-01T09:00:00Z") || !strings.Contains(got, "the next is paid at 2026-05-01T09:00:00Z") {
		t.Errorf("income after the first period:\n%s", got)
	}
	buf.Reset()
	if err := printIncome(&out{Writer: &buf}, wire.IncomeSetReply{}, &wire.IncomeSetRequest{User: "alice"}, now); err != nil || !strings.Contains(buf.String(), "no more income for alice") {
		t.Errorf("income removed: %q %v", buf.String(), err)
	}
}

// TestJobPlansShowTheirKind: a job's plan is shown as deadline or
// best-effort, not by the deadline service's strategy.
func TestJobPlansShowTheirKind(t *testing.T) {
	v := plansView{
		PlansReply: wire.PlansReply{Plans: []wire.Plan{
			{ID: "p", Strategy: wire.StrategyFair, Duration: wire.Duration(56*time.Minute + 14994691182), Budget: 12_000_000, Spent: 8_560_000, Released: 3_440_000},
			{ID: "j-dl", Strategy: wire.StrategyDeadline}, {ID: "j-be", Strategy: wire.StrategyDeadline}}},
		jobs: map[string]wire.Job{"j-dl": {ID: "j-dl", Deadline: time.Now()}, "j-be": {ID: "j-be"}},
	}
	var buf bytes.Buffer
	if err := printPlans(&out{Writer: &buf}, v); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(buf.String(), "\n")
	for _, want := range []string{"SPENT", "RELEASED", "HELD"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("plans header lacks %s: %q", want, lines[0])
		}
	}
	if !strings.Contains(lines[1], " fair ") || !strings.Contains(lines[1], " 8.56 ") || !strings.Contains(lines[1], " 3.44 ") || !strings.Contains(lines[1], " 56m15s ") {
		t.Errorf("plan row: %q", lines[1])
	}
	if !strings.Contains(lines[2], " deadline ") || !strings.Contains(lines[3], " best-effort ") {
		t.Errorf("job plans:\n%s", buf.String())
	}
}

// TestBuildString: the version line names the commit when the build
// recorded one.
func TestBuildString(t *testing.T) {
	b := Build{Version: "v1.2.3", Commit: "16e40d2aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", CommitTime: "2026-11-23T17:00:00Z", Modified: true, Go: "go1.26.8"}
	if got, want := b.String(), "mrmarket v1.2.3 (commit 16e40d2aaaaa, 2026-11-23T17:00:00Z, modified) go1.26.8"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if got := (Build{Version: "(devel)", Go: "go1.26.8"}).String(); got != "mrmarket (devel) go1.26.8" {
		t.Errorf("%q", got)
	}
}

// TestReadConfig: the config file's lines, paths and mistakes.
func TestReadConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "config")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	home, _ := os.UserHomeDir()
	cfg, err := readConfig(write("# mine\n\nnats = nats://h:4222\nuser=alice\ncreds = creds\ntls_ca = \"/etc/ca.pem\"\nadmin-key = ~/admin.pub\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"nats": "nats://h:4222", "user": "alice", "creds": filepath.Join(dir, "creds"), "tls-ca": "/etc/ca.pem", "admin-key": filepath.Join(home, "admin.pub")}
	for k, v := range want {
		if cfg[k] != v {
			t.Errorf("%s = %q, want %q", k, cfg[k], v)
		}
	}
	for body, msg := range map[string]string{
		"nats nats://h":    ":1: want `key = value`",
		"\npassword = x\n": ":2: unknown key \"password\"",
		"user =\n":         "user has no value",
		"user = a.b\n":     "invalid user",
	} {
		if _, err := readConfig(write(body)); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("config %q: %v, want %q", body, err, msg)
		}
	}
}

// TestDiskModeFollowsTheScheduler: weights only where every device behind
// the managed disks runs BFQ, and only when asked; auto is the throttle;
// asking for weights where they would do nothing is refused.
func TestDiskModeFollowsTheScheduler(t *testing.T) {
	bfq := []virt.DiskDevice{{Name: "sda", Scheduler: "bfq"}}
	deadline := []virt.DiskDevice{{Name: "sda", Scheduler: "bfq"}, {Name: "vda", Scheduler: "mq-deadline"}}
	for _, tc := range []struct {
		mode string
		devs []virt.DiskDevice
		want string // "" = refused
	}{
		{"auto", deadline, wire.ModeThrottle},
		{"auto", bfq, wire.ModeThrottle},
		{wire.ModeWeights, bfq, wire.ModeWeights},
		{wire.ModeWeights, deadline, ""},
		{wire.ModeWeights, nil, ""},
		{wire.ModeNone, deadline, wire.ModeNone},
	} {
		got, why, err := chooseDiskMode(tc.mode, tc.devs, nil)
		if tc.want == "" {
			if err == nil || !strings.Contains(err.Error(), "only under BFQ") {
				t.Errorf("%s on %v: %q (%s) %v, want refused", tc.mode, tc.devs, got, why, err)
			}
			continue
		}
		if err != nil || got != tc.want || why == "" {
			t.Errorf("%s on %v: %q (%s) %v, want %s", tc.mode, tc.devs, got, why, err, tc.want)
		}
	}
}

// One timestamp format: what tables, events and messages show is what
// --deadline reads back.
func TestOneTimestampFormat(t *testing.T) {
	at := time.Date(2026, 11, 23, 17, 0, 0, 0, time.FixedZone("CET", 3600))
	if got := stamp(at); got != "2026-11-23T16:00:00Z" {
		t.Fatalf("stamp: %q", got)
	}
	back, err := parseDeadline(stamp(at), at.Add(-time.Hour))
	if err != nil || !back.Equal(at) {
		t.Fatalf("--deadline %s: %v, %v", stamp(at), back, err)
	}
	var buf bytes.Buffer
	if err := printEvent(&buf, wire.Event{At: at, Component: "bank", Op: "transfer"}); err != nil || !strings.HasPrefix(buf.String(), stamp(at)+"  ") {
		t.Fatalf("event line %q (%v), want it to start with %s", buf.String(), err, stamp(at))
	}
}

// A host whose agent went silent is marked stale in vms and price, with a
// note of what that means (and how to retire a host for good); --no-headers
// keeps the mark on the rows and drops the note.
func TestStaleHostsMarked(t *testing.T) {
	at := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	rep := wire.VMsReply{
		VMs: []wire.HostVM{{Host: "host-1", VMState: wire.VMState{VM: "a1", Owner: "alice", Rate: 1, Share: 0.5}, Updated: at},
			{Host: "host-2", VMState: wire.VMState{VM: "a2", Owner: "alice", Rate: 1, Share: 0.5}, Updated: at, Stale: true}},
		Others: []wire.OtherVMs{{Host: "host-2", VMs: 1, Rate: 1, Share: 0.5, Updated: at, Stale: true}},
	}
	var buf bytes.Buffer
	if err := printVMs(&out{Writer: &buf}, rep); err != nil {
		t.Fatal(err)
	}
	got := buf.String()
	if strings.Count(got, "host-2 stale") != 2 || strings.Contains(got, "host-1 stale") || !strings.Contains(got, "stale: no state from the agent of host-2 ") ||
		!strings.Contains(got, "principal revoke") {
		t.Fatalf("vms with a stale host:\n%s", got)
	}
	buf.Reset()
	if err := printVMs(&out{Writer: &buf, noHeaders: true}, rep); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); strings.Count(got, "host-2 stale") != 2 || strings.Contains(got, "no state") {
		t.Fatalf("vms --no-headers with a stale host:\n%s", got)
	}
}

// A VM its agent found short of its share is named after the vms table,
// with what it got, what its share entitles it to, and for how long.
func TestShortVMsNoted(t *testing.T) {
	at := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	rep := wire.VMsReply{VMs: []wire.HostVM{
		{Host: "host-1", VMState: wire.VMState{VM: "a1", Owner: "alice", Rate: 3, Share: 0.75,
			Short: []wire.Shortfall{{Resource: wire.ResourceDisk, Entitled: 0.75, Delivered: 0.5, Since: at.Add(-27 * time.Second)}}}, Updated: at},
		{Host: "host-1", VMState: wire.VMState{VM: "b1", Owner: "alice", Rate: 1, Share: 0.25}, Updated: at}}}
	var buf bytes.Buffer
	if err := printVMs(&out{Writer: &buf}, rep); err != nil {
		t.Fatal(err)
	}
	got := buf.String()
	want := "short: a1 on host-1 got 50.00% of the disk for 27s, its share entitles it to 75.00%"
	if !strings.Contains(got, want) || strings.Contains(got, "b1 on host-1") {
		t.Fatalf("vms with a VM short of its disk share:\n%s\nwant the line %q", got, want)
	}
}
