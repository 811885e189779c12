package yarntest

import (
	"fmt"
	"sync"
	"time"

	"github.com/mrmarket/mrmarket/hadoopvm/sim"
	"github.com/mrmarket/mrmarket/hadoopvm/yarn"
)

// Driver turns a simulation's events into the emulator's state (it is a
// sim.Observer): each simulated job is a YARN application named after it,
// each task attempt an attempt on its VM, so a monitor reading the emulator
// sees the simulated cluster as it would see a real one.
type Driver struct {
	c        *Cluster
	mu       sync.Mutex
	apps     map[string]string // sim job → application id
	attempts map[string]string // job/type/index → running attempt id
	err      error
}

// Driver returns the cluster's simulation driver; add it with sim.Observe.
func (c *Cluster) Driver() *Driver {
	return &Driver{c: c, apps: map[string]string{}, attempts: map[string]string{}}
}

// Err is the first error the emulator reported, if any.
func (d *Driver) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

func (d *Driver) fail(err error) {
	if err != nil && d.err == nil {
		d.err = err
	}
}

func kind(reduce bool) string {
	if reduce {
		return yarn.TypeReduce
	}
	return yarn.TypeMap
}

// JobSubmitted submits the job as an application.
func (d *Driver) JobSubmitted(j sim.JobSpec, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.apps[j.ID] = d.c.Submit(j.User, j.Name, j.Maps, j.Reduces, at)
}

// TaskStarted starts an attempt.
func (d *Driver) TaskStarted(job string, reduce bool, index int, vm string, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	app := d.apps[job]
	id, err := d.c.StartAttempt(app, d.c.TaskID(app, kind(reduce), index), vm, at)
	d.fail(err)
	d.attempts[fmt.Sprint(job, kind(reduce), index)] = id
}

// TaskFinished finishes the running attempt.
func (d *Driver) TaskFinished(job string, reduce bool, index int, _ string, at time.Time, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	key := fmt.Sprint(job, kind(reduce), index)
	d.fail(d.c.FinishAttempt(d.apps[job], d.attempts[key], at, ok, nil))
	delete(d.attempts, key)
}

// JobFinished finishes the application.
func (d *Driver) JobFinished(job string, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fail(d.c.FinishApp(d.apps[job], at))
}
