package market

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/bank"
	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/internal/cputime"
	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// BenchmarkMarketTick is one tick of the whole market at N simulated hosts
// of 10 VMs each (N = 100 and 1,000; -short runs 100): the real agents,
// bank (SQLite) and broker, each on its own NATS connection to the
// embedded server with JetStream, and N/10 users each running a fair plan
// over 100 VMs on 100 hosts, so every VM is funded. A tick is what Tick
// does: every agent ticks (charges its bids, sends one capture batch to
// the bank, publishes its state), the broker hears every state, the bank
// and the broker tick. Its phases and every NATS subject's messages per
// tick (a subscriber to everything counts them; a host's or VM's name in a
// subject is *) are reported per tick, with the CPU time of the whole
// process: docs/SCALE.md derives the market's per-tick load at 10k and
// 100k hosts from these per-unit figures.
func BenchmarkMarketTick(b *testing.B) {
	for _, hosts := range []int{100, 1_000} {
		b.Run(fmt.Sprintf("hosts=%d", hosts), func(b *testing.B) {
			if hosts > 100 && testing.Short() {
				b.Skip("-short: the small size only")
			}
			benchMarketTick(b, hosts)
		})
	}
}

func benchMarketTick(b *testing.B, nHosts int) {
	const perHost = 10
	ctx := context.Background()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := start
	var clockMu sync.Mutex
	now := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock }
	users := nHosts / 10
	// Host h of block h/10 carries one VM of each of ten users: every
	// user has 100 VMs over 100 hosts.
	specs := make([]HostSpec, nHosts)
	vmsOf := map[string][]string{}
	for h := range specs {
		specs[h] = HostSpec{ID: fmt.Sprintf("host-%d", h+1), CPUs: 1}
		for k := range perHost {
			vm, owner := fmt.Sprintf("h%d-vm%d", h+1, k+1), fmt.Sprintf("u%d", (h/10*10+k)%users)
			specs[h].VMs = append(specs[h].VMs, agent.VM{ID: vm, Owner: owner})
			vmsOf[owner] = append(vmsOf[owner], vm)
		}
	}
	m, err := Start(ctx, Config{Dir: b.TempDir(), NATSHost: "127.0.0.1", NATSPort: -1, Now: now, TickPeriod: time.Second, Hosts: specs})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	nc, err := m.NC("bench")
	if err != nil {
		b.Fatal(err)
	}
	bankc, brokerc := bank.Client{NC: nc, Keys: m.Keys()}, broker.Client{NC: nc, Keys: m.Keys()}
	for u := range users {
		user := fmt.Sprintf("u%d", u)
		if _, err := bankc.Grant(ctx, &wire.GrantRequest{ID: "g-" + user, User: user, Amount: 1_000_000 * money.PerCredit}); err != nil {
			b.Fatal(err)
		}
		if _, err := brokerc.Spend(ctx, &wire.SpendRequest{ID: "p-" + user, User: user, Budget: 10_000 * money.PerCredit,
			Duration: wire.Duration(24 * time.Hour), VMs: vmsOf[user], Strategy: wire.StrategyFair}); err != nil {
			b.Fatal(err)
		}
	}
	tick := func() time.Time {
		clockMu.Lock()
		clock = clock.Add(time.Second)
		at := clock
		clockMu.Unlock()
		return at
	}
	// Two ticks to settle: the first capture of every bid, the first round.
	for range 2 {
		if err := m.Tick(ctx, tick()); err != nil {
			b.Fatal(err)
		}
	}

	var mu sync.Mutex
	msgs, bytes := map[string]int{}, map[string]int{}
	spy, err := m.NC("bench-spy")
	if err != nil {
		b.Fatal(err)
	}
	sub, err := spy.Subscribe(">", func(msg *nats.Msg) {
		class := subjectClass(msg.Subject)
		mu.Lock()
		msgs[class]++
		bytes[class] += len(msg.Data)
		mu.Unlock()
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		b.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		b.Fatal(err)
	}
	var phases [4]time.Duration // agents, states heard, bank, broker
	cpu0 := cputime.Process()
	start0 := time.Now()
	ticks := 0
	for b.Loop() {
		at := tick()
		ticks++
		steps := []func() error{
			func() error { return m.tickAgents(ctx, at) },
			func() error { return m.awaitBroker(ctx, at) },
			func() error { _, err := m.Bank.Tick(ctx, at); return err },
			func() error { return m.Broker.Tick(ctx, at) },
		}
		for i, step := range steps {
			t := time.Now()
			if err := step(); err != nil {
				b.Fatal(err)
			}
			phases[i] += time.Since(t)
		}
	}
	wall := time.Since(start0)
	cpu := cputime.Process() - cpu0
	if err := spy.Flush(); err != nil {
		b.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the spy's last messages
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(ticks) }
	b.ReportMetric(per(wall), "ms/tick")
	b.ReportMetric(per(cpu), "cpu-ms/tick")
	for i, name := range []string{"agents", "heard", "bank", "broker"} {
		b.ReportMetric(per(phases[i]), name+"-ms/tick")
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(ticks*nHosts), "cpu-µs/host-tick")
	mu.Lock()
	defer mu.Unlock()
	var lines []string
	total := 0
	for _, class := range slices.Sorted(maps.Keys(msgs)) {
		total += msgs[class]
		lines = append(lines, fmt.Sprintf("%-40s %10.1f msgs/tick %10.0f B/msg", class, float64(msgs[class])/float64(ticks), float64(bytes[class])/float64(msgs[class])))
	}
	b.ReportMetric(float64(total)/float64(ticks), "msgs/tick")
	b.ReportMetric(float64(total)/float64(ticks*nHosts), "msgs/host-tick")
	b.Logf("%d hosts, %d ticks, per subject:\n%s", nHosts, ticks, strings.Join(lines, "\n"))
}

// hostOrVM is a token naming a host or a VM of the benchmark.
var hostOrVM = regexp.MustCompile(`^(host-\d+|h\d+-vm\d+)$`)

// subjectClass is a subject with the names of hosts and VMs replaced by *,
// and inboxes, JetStream's API and acknowledgements and the KV buckets'
// keys cut short.
func subjectClass(subject string) string {
	t := strings.Split(subject, ".")
	switch {
	case t[0] == "_INBOX":
		return "_INBOX.> (replies)"
	case len(t) > 3 && t[0] == "$JS" && t[1] == "API":
		return strings.Join(t[:3], ".") + ".>"
	case len(t) > 2 && t[0] == "$JS":
		return strings.Join(t[:2], ".") + ".>"
	case len(t) > 2 && t[0] == "$KV":
		return strings.Join(t[:2], ".") + ".>"
	}
	for i, tok := range t {
		if hostOrVM.MatchString(tok) {
			t[i] = "*"
		}
	}
	return strings.Join(t, ".")
}
