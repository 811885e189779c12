// Package yarntest is a YARN REST emulator for tests: an in-memory cluster
// that serves the Hadoop 3.x JSON shapes of the ResourceManager
// (/ws/v1/cluster/apps, /ws/v1/cluster/nodes), of MapReduce Application
// Masters behind the RM's proxy (/proxy/{app}/ws/v1/mapreduce/jobs/…) and of
// the Job History Server (/ws/v1/history/mapreduce/jobs/…). Hadoop cannot be
// installed on these machines (docs/PLATFORM.md); the emulator lets the
// monitor be tested against the API it meets in production, driven by a
// test (and by the cluster simulator) through Submit, StartAttempt,
// FinishAttempt and FinishApp. The shapes are served by yarn.Server, which
// the facade of the project's worker guests (hadoopvm/yarnfacade) serves
// through too; the emulator adds its own listeners and faults: SetDown
// makes the ResourceManager answer 503, as during a restart, SetDelay
// makes it slow.
package yarntest

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/mrmarket/mrmarket/hadoopvm/yarn"
)

// Cluster is an emulated YARN cluster.
type Cluster struct {
	srv   *yarn.Server
	mu    sync.Mutex
	down  bool
	delay time.Duration // the RM answers this late (a hung or overloaded RM)
	rm    *httptest.Server
	hist  *httptest.Server
}

// New starts an emulated cluster; Close stops it.
func New(start time.Time) *Cluster {
	c := &Cluster{srv: yarn.NewServer(start.UnixMilli())}
	c.rm = httptest.NewServer(http.HandlerFunc(c.serveRM))
	c.hist = httptest.NewServer(http.HandlerFunc(c.srv.ServeHistory))
	return c
}

// RMURL is the ResourceManager's (and the AM proxy's) address.
func (c *Cluster) RMURL() string { return c.rm.URL }

// HistoryURL is the Job History Server's address.
func (c *Cluster) HistoryURL() string { return c.hist.URL }

// Close stops the servers.
func (c *Cluster) Close() { c.rm.Close(); c.hist.Close() }

// SetDown makes the ResourceManager (and its proxy) answer 503 while down.
func (c *Cluster) SetDown(down bool) {
	c.mu.Lock()
	c.down = down
	c.mu.Unlock()
}

// SetDelay makes the ResourceManager answer d late.
func (c *Cluster) SetDelay(d time.Duration) {
	c.mu.Lock()
	c.delay = d
	c.mu.Unlock()
}

// AddNode adds a NodeManager on host (a VM) with vcores.
func (c *Cluster) AddNode(host string, vcores int) { c.srv.AddNode(host, vcores) }

// Submit starts a MapReduce application of user with maps and reduces
// tasks and returns its id.
func (c *Cluster) Submit(user, name string, maps, reduces int, at time.Time) string {
	return c.srv.Submit(user, name, maps, reduces, at.UnixMilli())
}

// TaskID is the id of map (or reduce) task n of an application.
func (c *Cluster) TaskID(appID, kind string, n int) string { return yarn.TaskID(appID, kind, n) }

// StartAttempt starts an attempt of a task on node and returns its id.
func (c *Cluster) StartAttempt(appID, taskID, node string, at time.Time) (string, error) {
	return c.srv.StartAttempt(appID, taskID, node, at.UnixMilli())
}

// ReducePhases are the ends of a reduce attempt's shuffle and merge.
type ReducePhases struct {
	ShuffleFinish, MergeFinish time.Time
}

// FinishAttempt ends an attempt at at, successfully or not; a reduce
// attempt's phases may be given.
func (c *Cluster) FinishAttempt(appID, attemptID string, at time.Time, ok bool, phases *ReducePhases) error {
	var p *yarn.ReducePhases
	if phases != nil {
		p = &yarn.ReducePhases{ShuffleFinish: phases.ShuffleFinish.UnixMilli(), MergeFinish: phases.MergeFinish.UnixMilli()}
	}
	return c.srv.FinishAttempt(appID, attemptID, at.UnixMilli(), ok, p, "")
}

// SetCounters sets a job's counters (the history server and AM serve them).
func (c *Cluster) SetCounters(appID string, groups []yarn.CounterGroup) error {
	return c.srv.SetCounters(appID, groups)
}

// FinishApp ends an application: its AM goes away and its job moves to
// the history server.
func (c *Cluster) FinishApp(appID string, at time.Time) error {
	return c.srv.FinishApp(appID, at.UnixMilli())
}

func (c *Cluster) serveRM(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	delay := c.delay
	c.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	c.mu.Lock()
	down := c.down
	c.mu.Unlock()
	if down {
		http.Error(w, "ResourceManager is restarting", http.StatusServiceUnavailable)
		return
	}
	c.srv.ServeRM(w, r)
}
