package service

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/testpoll"
)

// TestSchedulerTakesTurns: with one worker busy on a flooder's request, a
// second principal's request runs next, before the flooder's backlog; each
// principal's requests run in the order sent.
func TestSchedulerTakesTurns(t *testing.T) {
	e := &Endpoint{Name: "e"}
	s := newScheduler(Fair{Workers: 1}, Table{*e})
	release := make(chan struct{})
	var mu sync.Mutex
	var order []string
	record := func(name string) func() {
		return func() {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
		}
	}
	var done sync.WaitGroup
	submit := func(key, name string, block bool) {
		done.Add(1)
		if !s.submit(key, e, "", func() {
			defer done.Done()
			record(name)()
			if block {
				<-release
			}
		}) {
			t.Fatalf("%s refused", name)
		}
	}
	submit("key:flood", "f0", true)
	for _, n := range []string{"f1", "f2", "f3"} {
		submit("key:flood", n, false)
	}
	submit("key:alice", "a0", false)
	close(release)
	done.Wait()
	if want := []string{"f0", "a0", "f1", "f2", "f3"}; !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
}

// TestSchedulerBoundsAPrincipal: past PerPrincipal waiting or running, a
// principal's request is refused; another principal's is not.
func TestSchedulerBoundsAPrincipal(t *testing.T) {
	e := &Endpoint{Name: "e"}
	s := newScheduler(Fair{Workers: 1, PerPrincipal: 2}, Table{*e})
	release := make(chan struct{})
	defer close(release)
	block := func() { <-release }
	for range 2 {
		if !s.submit("key:a", e, "", block) {
			t.Fatal("within the bound: refused")
		}
	}
	if s.submit("key:a", e, "", block) {
		t.Fatal("past the bound: queued")
	}
	if !s.submit("key:b", e, "", func() {}) {
		t.Fatal("another principal refused")
	}
}

// TestSchedulerOneAtATimePerPrincipalAndEndpoint: a principal's requests
// to one endpoint never run concurrently (its order is kept), while its
// requests to another endpoint and other principals' run beside them.
func TestSchedulerOneAtATimePerPrincipalAndEndpoint(t *testing.T) {
	e1, e2 := &Endpoint{Name: "e1"}, &Endpoint{Name: "e2"}
	s := newScheduler(Fair{Workers: 8}, Table{*e1, *e2})
	var running, most atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var seq []int
	for i := range 50 {
		wg.Add(1)
		if !s.submit("key:a", e1, "", func() {
			defer wg.Done()
			if n := running.Add(1); n > most.Load() {
				most.Store(n)
			}
			mu.Lock()
			seq = append(seq, i)
			mu.Unlock()
			time.Sleep(100 * time.Microsecond)
			running.Add(-1)
		}) {
			t.Fatal("refused")
		}
	}
	overlap := make(chan struct{})
	wg.Add(2)
	s.submit("key:a", e2, "", func() { defer wg.Done(); overlap <- struct{}{} })
	s.submit("key:b", e1, "", func() { defer wg.Done(); <-overlap }) // runs while a's e2 request does
	wg.Wait()
	if most.Load() != 1 {
		t.Fatalf("%d of a's e1 requests ran at once", most.Load())
	}
	if !slices.IsSorted(seq) {
		t.Fatalf("a's e1 requests out of order: %v", seq)
	}
	testpoll.CheckFor(t, 5*time.Second, time.Millisecond, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.queues) != 0 || s.running != 0 {
			return fmt.Errorf("idle scheduler holds %d queues, %d workers", len(s.queues), s.running)
		}
		return nil
	})
}

// TestSchedulerRetryDoesNotWaitForItsAttempt: a request stuck in its
// handler holds up the principal's later requests with the same order key
// only; with other order keys, or on an Unordered service, they run
// beside it — a retry by id does not wait for the attempt it retries.
func TestSchedulerRetryDoesNotWaitForItsAttempt(t *testing.T) {
	for _, tc := range []struct {
		name         string
		fair         Fair
		stuck, retry string // order keys
		waits        bool
	}{
		{"same order key", Fair{}, "p1", "p1", true},
		{"other order key", Fair{}, "p1", "p2", false},
		{"unordered", Fair{Unordered: true}, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Endpoint{Name: "e"}
			s := newScheduler(tc.fair, Table{*e})
			release, retried := make(chan struct{}), make(chan struct{})
			s.submit("key:a", e, tc.stuck, func() { <-release })
			s.submit("key:a", e, tc.retry, func() { close(retried) })
			if tc.waits {
				select { // it cannot run: a short look proves nothing false
				case <-retried:
					t.Fatal("ran beside the request before it with its order key")
				case <-time.After(100 * time.Millisecond):
				}
			} else {
				select {
				case <-retried:
				case <-time.After(10 * time.Second):
					t.Fatal("waited for the stuck request")
				}
			}
			close(release)
			<-retried
			testpoll.CheckFor(t, 5*time.Second, time.Millisecond, func() error {
				s.mu.Lock()
				defer s.mu.Unlock()
				if len(s.queues) != 0 {
					return fmt.Errorf("idle scheduler holds %d queues", len(s.queues))
				}
				return nil
			})
		})
	}
}

// TestSchedulerOverflow: past MaxQueues principals, new ones share one
// queue.
func TestSchedulerOverflow(t *testing.T) {
	e := &Endpoint{Name: "e"}
	s := newScheduler(Fair{Workers: 1, MaxQueues: 2, PerPrincipal: 1}, Table{*e})
	release := make(chan struct{})
	defer close(release)
	block := func() { <-release }
	if !s.submit("key:a", e, "", block) || !s.submit("key:b", e, "", block) || !s.submit("key:c", e, "", block) {
		t.Fatal("refused")
	}
	if s.submit("key:d", e, "", block) {
		t.Fatal("the overflow queue, full, took another")
	}
}

// TestLogSlowFromWorkersSideBySide: the slow-request logger is called by
// the workers at once (the race detector found it writing its default
// logger into the shared closure).
func TestLogSlowFromWorkersSideBySide(t *testing.T) {
	slow := LogSlow(nil, "test")
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slow("op", "key:x", time.Second, time.Millisecond)
		}()
	}
	wg.Wait()
}

// TestSchedulerServesBulkLast: with every worker busy and bulk requests
// (Endpoint.Bulk: new spends) of many principals waiting, a principal's
// other request — a cancel, a read — is the next one served, and the bulk
// ones follow in their turns.
func TestSchedulerServesBulkLast(t *testing.T) {
	spend, cancel := &Endpoint{Name: "spend", Bulk: true}, &Endpoint{Name: "cancel"}
	s := newScheduler(Fair{Workers: 1}, Table{*spend, *cancel})
	release := make(chan struct{})
	var mu sync.Mutex
	var served []string
	var wg sync.WaitGroup
	record := func(what string) func() {
		wg.Add(1)
		return func() {
			defer wg.Done()
			mu.Lock()
			served = append(served, what)
			mu.Unlock()
		}
	}
	wg.Add(1)
	s.submit("key:flood-0", spend, "", func() { defer wg.Done(); <-release }) // the one worker, busy
	for i := range 20 {
		if !s.submit(fmt.Sprintf("key:flood-%d", i%5), spend, "", record("spend")) {
			t.Fatal("refused")
		}
	}
	if !s.submit("key:alice", cancel, "", record("cancel")) || !s.submit("key:alice", spend, "", record("alice's spend")) {
		t.Fatal("refused")
	}
	close(release)
	wg.Wait()
	if served[0] != "cancel" || len(served) != 22 {
		t.Fatalf("served in the order %v: want the cancel first", served)
	}
}
