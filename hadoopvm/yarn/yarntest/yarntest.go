// Package yarntest is a YARN REST emulator for tests: an in-memory cluster
// that serves the Hadoop 3.x JSON shapes of the ResourceManager
// (/ws/v1/cluster/apps, /ws/v1/cluster/nodes), of MapReduce Application
// Masters behind the RM's proxy (/proxy/{app}/ws/v1/mapreduce/jobs/…) and of
// the Job History Server (/ws/v1/history/mapreduce/jobs/…). Hadoop cannot be
// installed on these machines (docs/PLATFORM.md); the emulator lets the
// monitor be tested against the API it meets in production, driven by a
// test (and by the cluster simulator) through Submit, StartAttempt,
// FinishAttempt and FinishApp. SetDown makes the ResourceManager answer 503,
// as during a restart.
package yarntest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mrmarket/mrmarket/hadoopvm/yarn"
)

// Cluster is an emulated YARN cluster.
type Cluster struct {
	mu    sync.Mutex
	ts    int64 // the cluster timestamp in ids
	seq   int
	nodes []yarn.Node
	apps  map[string]*app
	down  bool
	delay time.Duration // the RM answers this late (a hung or overloaded RM)
	rm    *httptest.Server
	hist  *httptest.Server
}

type app struct {
	yarn.App
	job      yarn.Job
	tasks    []*task
	amUp     bool
	counters []yarn.CounterGroup
}

type task struct {
	yarn.Task
	attempts []yarn.Attempt
}

// New starts an emulated cluster; Close stops it.
func New(start time.Time) *Cluster {
	c := &Cluster{ts: start.UnixMilli(), apps: map[string]*app{}}
	c.rm = httptest.NewServer(http.HandlerFunc(c.serveRM))
	c.hist = httptest.NewServer(http.HandlerFunc(c.serveHistory))
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
func (c *Cluster) AddNode(host string, vcores int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes = append(c.nodes, yarn.Node{ID: host + ":45454", NodeHostName: host, NodeHTTPAddress: host + ":8042", State: "RUNNING", AvailableVirtualCores: vcores})
}

// Submit starts a MapReduce application of user with maps and reduces
// tasks and returns its id.
func (c *Cluster) Submit(user, name string, maps, reduces int, at time.Time) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	suffix := fmt.Sprintf("%d_%04d", c.ts, c.seq)
	a := &app{App: yarn.App{ID: "application_" + suffix, User: user, Name: name, Queue: "default", State: yarn.StateRunning,
		FinalStatus: "UNDEFINED", ApplicationType: "MAPREDUCE", StartedTime: at.UnixMilli()}, amUp: true}
	a.job = yarn.Job{ID: "job_" + suffix, Name: name, User: user, State: yarn.StateRunning, SubmitTime: at.UnixMilli(),
		StartTime: at.UnixMilli(), MapsTotal: maps, ReducesTotal: reduces}
	for i := range maps {
		a.tasks = append(a.tasks, &task{Task: yarn.Task{ID: fmt.Sprintf("task_%s_m_%06d", suffix, i), Type: yarn.TypeMap, State: "SCHEDULED"}})
	}
	for i := range reduces {
		a.tasks = append(a.tasks, &task{Task: yarn.Task{ID: fmt.Sprintf("task_%s_r_%06d", suffix, i), Type: yarn.TypeReduce, State: "SCHEDULED"}})
	}
	c.apps[a.ID] = a
	return a.ID
}

// TaskID is the id of map (or reduce) task n of an application.
func (c *Cluster) TaskID(appID, kind string, n int) string {
	t := "m"
	if kind == yarn.TypeReduce {
		t = "r"
	}
	return fmt.Sprintf("task_%s_%s_%06d", strings.TrimPrefix(appID, "application_"), t, n)
}

func (c *Cluster) find(appID, taskID string) (*app, *task, error) {
	a, ok := c.apps[appID]
	if !ok {
		return nil, nil, fmt.Errorf("yarntest: no application %s", appID)
	}
	for _, t := range a.tasks {
		if t.ID == taskID {
			return a, t, nil
		}
	}
	return nil, nil, fmt.Errorf("yarntest: no task %s", taskID)
}

// StartAttempt starts an attempt of a task on node and returns its id.
func (c *Cluster) StartAttempt(appID, taskID, node string, at time.Time) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, t, err := c.find(appID, taskID)
	if err != nil {
		return "", err
	}
	id := fmt.Sprintf("attempt_%s_%d", strings.TrimPrefix(taskID, "task_"), len(t.attempts))
	t.attempts = append(t.attempts, yarn.Attempt{ID: id, Type: t.Type, State: yarn.StateRunning, NodeHTTPAddress: node + ":8042",
		Rack: "/default-rack", StartTime: at.UnixMilli()})
	t.State = yarn.StateRunning
	if t.StartTime == 0 {
		t.StartTime = at.UnixMilli()
	}
	return id, nil
}

// ReducePhases are the ends of a reduce attempt's shuffle and merge.
type ReducePhases struct {
	ShuffleFinish, MergeFinish time.Time
}

// FinishAttempt ends an attempt at at, successfully or not; a reduce
// attempt's phases may be given.
func (c *Cluster) FinishAttempt(appID, attemptID string, at time.Time, ok bool, phases *ReducePhases) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	taskID := "task_" + attemptID[len("attempt_"):strings.LastIndex(attemptID, "_")]
	a, t, err := c.find(appID, taskID)
	if err != nil {
		return err
	}
	for i := range t.attempts {
		at0 := &t.attempts[i]
		if at0.ID != attemptID {
			continue
		}
		at0.FinishTime = at.UnixMilli()
		at0.ElapsedTime = at0.FinishTime - at0.StartTime
		at0.Progress = 100
		if phases != nil {
			at0.ShuffleFinishTime, at0.MergeFinishTime = phases.ShuffleFinish.UnixMilli(), phases.MergeFinish.UnixMilli()
			at0.ElapsedShuffleTime = at0.ShuffleFinishTime - at0.StartTime
			at0.ElapsedMergeTime = at0.MergeFinishTime - at0.ShuffleFinishTime
			at0.ElapsedReduceTime = at0.FinishTime - at0.MergeFinishTime
		}
		if !ok {
			at0.State = yarn.StateFailed
			if t.State != yarn.StateSucceed {
				t.State = "SCHEDULED" // waits for another attempt
			}
			return nil
		}
		at0.State, t.State = yarn.StateSucceed, yarn.StateSucceed
		t.FinishTime, t.SuccessfulAttempt, t.Progress = at0.FinishTime, at0.ID, 100
		t.ElapsedTime = t.FinishTime - t.StartTime
		if t.Type == yarn.TypeMap {
			a.job.MapsCompleted++
		} else {
			a.job.ReducesCompleted++
		}
		done := a.job.MapsCompleted + a.job.ReducesCompleted
		a.Progress = 100 * float64(done) / float64(a.job.MapsTotal+a.job.ReducesTotal)
		return nil
	}
	return fmt.Errorf("yarntest: no attempt %s", attemptID)
}

// SetCounters sets a job's counters (the history server and AM serve them).
func (c *Cluster) SetCounters(appID string, groups []yarn.CounterGroup) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.apps[appID]
	if !ok {
		return fmt.Errorf("yarntest: no application %s", appID)
	}
	a.counters = groups
	return nil
}

// FinishApp ends an application: its AM goes away and its job moves to
// the history server.
func (c *Cluster) FinishApp(appID string, at time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.apps[appID]
	if !ok {
		return fmt.Errorf("yarntest: no application %s", appID)
	}
	a.State, a.FinalStatus, a.FinishedTime, a.Progress, a.amUp = yarn.StateFinished, "SUCCEEDED", at.UnixMilli(), 100, false
	a.job.State, a.job.FinishTime = yarn.StateSucceed, at.UnixMilli()
	return nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func notFound(w http.ResponseWriter, what string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	fmt.Fprintf(w, `{"RemoteException":{"exception":"NotFoundException","message":"java.lang.Exception: %s not found","javaClassName":"org.apache.hadoop.yarn.webapp.NotFoundException"}}`, what)
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
	defer c.mu.Unlock()
	if c.down {
		http.Error(w, "ResourceManager is restarting", http.StatusServiceUnavailable)
		return
	}
	path := r.URL.Path
	switch {
	case path == "/ws/v1/cluster/apps":
		states := map[string]bool{}
		for _, s := range strings.Split(r.URL.Query().Get("states"), ",") {
			if s != "" {
				states[strings.ToUpper(s)] = true
			}
		}
		var list []yarn.App
		for _, a := range c.apps {
			if len(states) == 0 || states[a.State] {
				list = append(list, a.App)
			}
		}
		if len(list) == 0 {
			writeJSON(w, map[string]any{"apps": nil})
			return
		}
		sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
		writeJSON(w, map[string]any{"apps": map[string]any{"app": list}})
	case path == "/ws/v1/cluster/nodes":
		list := make([]yarn.Node, len(c.nodes))
		for i, n := range c.nodes {
			n.NumContainers = c.runningOn(n.NodeHostName)
			n.UsedVirtualCores = n.NumContainers
			list[i] = n
		}
		writeJSON(w, map[string]any{"nodes": map[string]any{"node": list}})
	case strings.HasPrefix(path, "/proxy/"):
		rest := strings.TrimPrefix(path, "/proxy/")
		appID, amPath, _ := strings.Cut(rest, "/")
		a, ok := c.apps[appID]
		if !ok || !a.amUp {
			notFound(w, "application master of "+appID)
			return
		}
		c.serveJob(w, a, strings.TrimPrefix("/"+amPath, "/ws/v1/mapreduce"))
	default:
		notFound(w, path)
	}
}

func (c *Cluster) serveHistory(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rest, ok := strings.CutPrefix(r.URL.Path, "/ws/v1/history/mapreduce")
	if !ok {
		notFound(w, r.URL.Path)
		return
	}
	var a *app
	if parts := strings.Split(strings.TrimPrefix(rest, "/jobs/"), "/"); strings.HasPrefix(rest, "/jobs/") {
		for _, x := range c.apps {
			if x.job.ID == parts[0] && !x.amUp {
				a = x
			}
		}
	}
	if a == nil {
		notFound(w, "job")
		return
	}
	c.serveJob(w, a, rest)
}

// serveJob answers /jobs, /jobs/{id}, /jobs/{id}/tasks and /jobs/{id}/tasks/{t}/attempts.
func (c *Cluster) serveJob(w http.ResponseWriter, a *app, rest string) {
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	switch {
	case len(parts) == 1 && parts[0] == "jobs":
		writeJSON(w, map[string]any{"jobs": map[string]any{"job": []yarn.Job{a.job}}})
	case len(parts) == 2 && parts[0] == "jobs" && parts[1] == a.job.ID:
		writeJSON(w, map[string]any{"job": a.job})
	case len(parts) == 3 && parts[0] == "jobs" && parts[1] == a.job.ID && parts[2] == "counters":
		writeJSON(w, map[string]any{"jobCounters": map[string]any{"id": a.job.ID, "counterGroup": a.counters}})
	case len(parts) == 3 && parts[0] == "jobs" && parts[1] == a.job.ID && parts[2] == "tasks":
		list := make([]yarn.Task, len(a.tasks))
		for i, t := range a.tasks {
			list[i] = t.Task
		}
		writeJSON(w, map[string]any{"tasks": map[string]any{"task": list}})
	case len(parts) == 5 && parts[0] == "jobs" && parts[1] == a.job.ID && parts[2] == "tasks" && parts[4] == "attempts":
		for _, t := range a.tasks {
			if t.ID == parts[3] {
				writeJSON(w, map[string]any{"taskAttempts": map[string]any{"taskAttempt": t.attempts}})
				return
			}
		}
		notFound(w, "task "+parts[3])
	default:
		notFound(w, rest)
	}
}

func (c *Cluster) runningOn(host string) int {
	n := 0
	for _, a := range c.apps {
		for _, t := range a.tasks {
			for _, at := range t.attempts {
				if at.State == yarn.StateRunning && yarn.NodeOf(at.NodeHTTPAddress) == host {
					n++
				}
			}
		}
	}
	return n
}
