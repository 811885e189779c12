// Package cputime reads the CPU time this process has used. Benchmarks
// report it beside wall time: on a machine shared with other work the wall
// time of a run measures the machine, its CPU time the code (a run that
// keeps both cores busy used up to twice its wall time).
package cputime

import (
	"syscall"
	"time"
)

// Process is the user and system CPU time of this process so far, all
// threads together; zero if the system does not say.
func Process() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
