package faults

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// recorder is the fault test's testing.TB: it remembers every failure
// message and repeats them once the test is over, after the daemons' logs
// a failing run prints — a CI report shows a failing test's last lines, and
// those are the reason it failed, not the tail of an agent's log.
type recorder struct {
	*testing.T
	mu   sync.Mutex
	msgs []string
}

// record wraps t; its summary is registered first, so it runs last.
func record(t *testing.T) *recorder {
	r := &recorder{T: t}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.msgs) > 0 {
			t.Logf("%s failed (%d failures, repeated after the daemons' logs):\n%s", t.Name(), len(r.msgs), strings.Join(r.msgs, "\n"))
		}
	})
	return r
}

func (r *recorder) note(msg string) {
	r.mu.Lock()
	r.msgs = append(r.msgs, "  - "+msg)
	r.mu.Unlock()
}

func (r *recorder) Error(args ...any) {
	r.T.Helper()
	r.note(fmt.Sprint(args...))
	r.T.Error(args...)
}

func (r *recorder) Errorf(format string, args ...any) {
	r.T.Helper()
	r.note(fmt.Sprintf(format, args...))
	r.T.Errorf(format, args...)
}

func (r *recorder) Fatal(args ...any) {
	r.T.Helper()
	r.note(fmt.Sprint(args...))
	r.T.Fatal(args...)
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.T.Helper()
	r.note(fmt.Sprintf(format, args...))
	r.T.Fatalf(format, args...)
}
