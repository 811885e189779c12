package stop_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/internal/stop"
)

// TestStopWaitsForTasks: Stop returns only after every task saw its
// context end and returned, and before that no closer ran.
func TestStopWaitsForTasks(t *testing.T) {
	s := stop.New()
	var mu sync.Mutex
	var order []string
	note := func(what string) {
		mu.Lock()
		order = append(order, what)
		mu.Unlock()
	}
	started := make(chan struct{}, 2)
	for _, name := range []string{"a", "b"} {
		if err := s.RunTask(context.Background(), name, func(ctx context.Context) {
			started <- struct{}{}
			<-ctx.Done()
			time.Sleep(20 * time.Millisecond) // a task still busy after quiesce
			note("task " + name)
		}); err != nil {
			t.Fatal(err)
		}
	}
	<-started
	<-started
	if got := s.Running(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("running %v, want [a b]", got)
	}
	s.AddCloser(func() { note("closer") })
	s.Stop()
	mu.Lock()
	defer mu.Unlock()
	if len(order) != 3 || order[2] != "closer" {
		t.Fatalf("order %v: want both tasks, then the closer", order)
	}
	if got := s.Running(); len(got) != 0 {
		t.Fatalf("still running after Stop: %v", got)
	}
}

// TestClosersRunInReverse: closers run last registered first, once, however
// many times Stop is called.
func TestClosersRunInReverse(t *testing.T) {
	s := stop.New()
	var order []int
	for i := range 3 {
		s.AddCloser(func() { order = append(order, i) })
	}
	s.Stop()
	s.Stop()
	if !slices.Equal(order, []int{2, 1, 0}) {
		t.Fatalf("closers ran %v, want [2 1 0]", order)
	}
	select {
	case <-s.Stopped():
	default:
		t.Fatal("Stopped not closed after Stop")
	}
}

// TestNoTaskAfterQuiesce: once Stop began, a task is refused and never runs;
// a closer added then runs at once.
func TestNoTaskAfterQuiesce(t *testing.T) {
	s := stop.New()
	release := make(chan struct{})
	if err := s.RunTask(context.Background(), "slow", func(ctx context.Context) {
		<-ctx.Done()
		<-release
	}); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { s.Stop(); close(stopped) }()
	// Stop is waiting for "slow": quiescing has begun.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := s.RunTask(context.Background(), "early", func(context.Context) {}) // before Stop began: runs
		if errors.Is(err, stop.ErrStopping) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("RunTask during Stop: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	for range 10 {
		if err := s.RunTask(context.Background(), "late", func(context.Context) { t.Error("a task ran after quiesce") }); !errors.Is(err, stop.ErrStopping) {
			t.Fatalf("RunTask after quiesce: %v, want ErrStopping", err)
		}
	}
	closed := false
	s.AddCloser(func() { closed = true })
	if !closed {
		t.Fatal("a closer added while stopping did not run at once")
	}
	close(release)
	<-stopped
}

// TestTaskEndsWithItsOwnContext: a task also ends when the context it was
// started with ends, without stopping the others.
func TestTaskEndsWithItsOwnContext(t *testing.T) {
	s := stop.New()
	defer s.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	if err := s.RunTask(ctx, "own", func(ctx context.Context) { <-ctx.Done(); close(done) }); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the task did not end with its context")
	}
}
