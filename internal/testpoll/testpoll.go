// Package testpoll is the tests' one way to wait for something that happens
// asynchronously: poll a check with a deadline (the shape of nats-server's
// checkFor) instead of sleeping a guessed time or writing the loop again.
// The check returns nil once the condition holds and otherwise an error that
// says what is still missing, which is what a timed-out test reports.
package testpoll

import (
	"testing"
	"time"
)

// Wait calls check every interval until it returns nil or total has passed,
// and returns check's last result. check runs at least once; when Wait
// fails, its last call of check was at or after the deadline.
func Wait(total, interval time.Duration, check func() error) error {
	deadline := time.Now().Add(total)
	for {
		err := check()
		if err == nil || !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(interval)
	}
}

// CheckFor is Wait that fails t with check's last error when total passes
// before the check holds.
func CheckFor(t testing.TB, total, interval time.Duration, check func() error) {
	t.Helper()
	if err := Wait(total, interval, check); err != nil {
		t.Fatal(err)
	}
}
