package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// The CLI as a client: a user running `mrmarket transfer` and `mrmarket
// spend` in a loop, each command a new process with its own connection, as
// a person types them. The CLI retries by itself (short attempts, the same
// id); when it gives up (exit 4, the outcome unknown) the user runs the
// same command again, as its message says. A user's wait is from the first
// run of a command to its answer, and the table shows the longest wait
// that overlapped each kill.

// Kinds of the CLI's operations.
const (
	kindCLITransfer = "cli transfer"
	kindCLISpend    = "cli spend"
)

var cliKinds = []string{kindCLITransfer, kindCLISpend}

// exitUnavailable is the CLI's exit code for "no answer, the outcome
// unknown: run it again" (cli.ExitUnavailable).
const exitUnavailable = 4

// cliUser runs the binary's command args until it answers, and records the
// wait as kind's.
func (w *workload) cliUser(ctx context.Context, kind string, args ...string) (stdout string, err error) {
	args = append(args, "--nats", w.c.url, "--creds", w.c.creds, "--tls-ca", w.c.ca)
	start := time.Now()
	for {
		var out, errOut strings.Builder
		cmd := exec.CommandContext(ctx, w.c.bin, args...)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err = cmd.Run()
		w.log.cliRetried(kind, errOut.String())
		var exit *exec.ExitError
		if err == nil || !errors.As(err, &exit) || exit.ExitCode() != exitUnavailable || ctx.Err() != nil {
			if err != nil {
				err = fmt.Errorf("mrmarket %s: %w: %s", strings.Join(args[:1], " "), err, strings.TrimSpace(errOut.String()))
			}
			w.log.waited(kind, start, time.Now())
			return out.String(), err
		}
		w.log.mu.Lock()
		w.log.retries[kind]++
		w.log.mu.Unlock()
	}
}

// startCLI adds the CLI users to the workload: t1 transfers to the other
// payers (so their balances stay exactly checked) and bob spends.
func (w *workload) startCLI(ctx context.Context, run func(name string, loop func(ctx context.Context, nc *nats.Conn, n int) error)) {
	rng := rand.New(rand.NewPCG(77, 16))
	run("cli-transfers", func(ctx context.Context, _ *nats.Conn, n int) error {
		to := payers[1+rng.IntN(len(payers)-1)]
		amount := money.Micro(1 + rng.IntN(1000))
		_, err := w.cliUser(ctx, kindCLITransfer, "transfer", "--user", payers[0], "--to", to, "--amount", amount.String(),
			"--id", fmt.Sprintf("cli-tr-%d", n))
		if err != nil {
			return err
		}
		w.log.mu.Lock()
		w.log.net[payers[0]] -= amount
		w.log.net[to] += amount
		w.log.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
		return nil
	})
	vms := w.c.vmsOf("bob")
	run("cli-spends", func(ctx context.Context, _ *nats.Conn, n int) error {
		out, err := w.cliUser(ctx, kindCLISpend, "spend", "--user", "bob", "--budget", (money.PerCredit / 100).String(),
			"--duration", fmt.Sprintf("%ds", 5+rng.IntN(20)), "--vm", vms[rng.IntN(len(vms))], "--id", fmt.Sprintf("cli-sp-%d", n), "--json")
		if err != nil {
			return err
		}
		var rep wire.SpendReply
		if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Plan.ID == "" {
			return fmt.Errorf("spend --json: %q: %v", out, err)
		}
		w.log.plan("bob", rep.Plan.ID, rep.Plan.Hold)
		time.Sleep(50 * time.Millisecond)
		return nil
	})
}

// waited records one of kind's waits, from the first try of an operation
// (the first run of a command) to its answer.
func (l *journal) waited(kind string, from, to time.Time) {
	l.mu.Lock()
	l.waits[kind] = append(l.waits[kind], [2]time.Time{from, to})
	l.mu.Unlock()
	l.answered(kind, to)
}

// cliRetried records what a command said it asked again for (its warning
// line), as the other clients' retried errors are.
func (l *journal) cliRetried(kind, stderr string) {
	for line := range strings.Lines(stderr) {
		if !strings.Contains(line, "asking again") {
			continue
		}
		msg := strings.TrimSpace(line)
		if len(msg) > 120 {
			msg = msg[:120]
		}
		l.mu.Lock()
		if l.errs[kind] == nil {
			l.errs[kind] = map[string]int{}
		}
		l.errs[kind][msg]++
		l.mu.Unlock()
	}
}

// medianWait is kind's median wait over the whole run: what a command
// costs a user when nothing is killed, process start and connection
// included.
func (l *journal) medianWait(kind string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ds []time.Duration
	for _, w := range l.waits[kind] {
		ds = append(ds, w[1].Sub(w[0]))
	}
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// longestWait is kind's longest wait that overlapped [from, to].
func (l *journal) longestWait(kind string, from, to time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var longest time.Duration
	for _, w := range l.waits[kind] {
		if !w[1].Before(from) && !w[0].After(to) {
			longest = max(longest, w[1].Sub(w[0]))
		}
	}
	return longest
}
