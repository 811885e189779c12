// Package yarn is mrmarket's Hadoop monitor: a client of the documented
// YARN ResourceManager, MapReduce Application Master and Job History Server
// REST APIs that tells the broker what the users' Hadoop clusters are doing
// — which stage each workflow is in and how far it got, which VMs (YARN
// nodes) are running tasks and which are idle — and, from finished jobs,
// ARIA job profiles for the deadline service.
//
// Decisions:
//   - A workflow is the set of applications whose names share the prefix
//     before the first ':' ("digg:join", "digg:dist", …); its stages are its
//     applications in order of start. An application without ':' is a
//     workflow of one stage. (Hadoop has no notion of workflow; launchers
//     such as Oozie name applications this way.)
//   - A node's host name is the VM id: mrmarket's provisioning names the
//     Hadoop VMs after their domains.
//   - Every GET has a time-out and is retried with backoff on time-outs,
//     refused connections and 5xx answers, so a ResourceManager restart in
//     the middle of a job is a delay, not an error. A finished application's
//     AM is gone; its job is then read from the history server.
package yarn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Errors of the monitor.
var (
	// ErrNotFound means the REST resource does not exist (404).
	ErrNotFound = errors.New("yarn: not found")
	// ErrUnavailable means the service did not answer after every retry.
	ErrUnavailable = errors.New("yarn: service unavailable")
)

// Monitor reads a YARN cluster's REST APIs.
type Monitor struct {
	// RM is the ResourceManager's web address, e.g. http://rm:8088; the
	// MapReduce AMs are reached through its proxy.
	RM string
	// History is the Job History Server's web address, e.g. http://jhs:19888.
	History string
	// Client is the HTTP client; nil means one with a 5 s time-out.
	Client *http.Client
	// Retries is how many times a failed GET is retried (default 5), the
	// first after Backoff (default 200 ms), doubling up to 5 s.
	Retries int
	Backoff time.Duration
}

func (m *Monitor) client() *http.Client {
	if m.Client != nil {
		return m.Client
	}
	return &http.Client{Timeout: 5 * time.Second}
}

// get fetches base+path and decodes its JSON into out, retrying what a
// restart or an overload can cause.
func (m *Monitor) get(ctx context.Context, base, path string, out any) error {
	retries, backoff := m.Retries, m.Backoff
	if retries <= 0 {
		retries = 5
	}
	if backoff <= 0 {
		backoff = 200 * time.Millisecond
	}
	var last error
	for attempt := 0; attempt <= retries; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+path, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Accept", "application/json")
		resp, err := m.client().Do(req)
		if err != nil {
			last = err
			continue
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		switch {
		case err != nil:
			last = err
			continue
		case resp.StatusCode == http.StatusNotFound:
			return fmt.Errorf("%w: %s", ErrNotFound, path)
		case resp.StatusCode >= 500:
			last = fmt.Errorf("%s: HTTP %d", path, resp.StatusCode)
			continue
		case resp.StatusCode != http.StatusOK:
			return fmt.Errorf("yarn: %s: HTTP %d: %s", path, resp.StatusCode, strings.TrimSpace(string(body)))
		}
		if err := json.Unmarshal(body, out); err != nil {
			return fmt.Errorf("yarn: %s: malformed answer: %w", path, err)
		}
		return nil
	}
	return fmt.Errorf("%w: %s after %d tries: %v", ErrUnavailable, path, retries+1, last)
}

// Apps lists the applications, of the given states when any.
func (m *Monitor) Apps(ctx context.Context, states ...string) ([]App, error) {
	path := "/ws/v1/cluster/apps"
	if len(states) > 0 {
		path += "?states=" + url.QueryEscape(strings.Join(states, ","))
	}
	var r appsResponse
	if err := m.get(ctx, m.RM, path, &r); err != nil {
		return nil, err
	}
	if r.Apps == nil {
		return nil, nil
	}
	return r.Apps.App, nil
}

// Nodes lists the cluster's nodes.
func (m *Monitor) Nodes(ctx context.Context) ([]Node, error) {
	var r nodesResponse
	if err := m.get(ctx, m.RM, "/ws/v1/cluster/nodes", &r); err != nil {
		return nil, err
	}
	if r.Nodes == nil {
		return nil, nil
	}
	return r.Nodes.Node, nil
}

// amPath is an AM resource through the RM's proxy.
func amPath(appID, rest string) string {
	return "/proxy/" + url.PathEscape(appID) + "/ws/v1/mapreduce" + rest
}

// Jobs lists a running application's MapReduce jobs (from its AM).
func (m *Monitor) Jobs(ctx context.Context, appID string) ([]Job, error) {
	var r jobsResponse
	if err := m.get(ctx, m.RM, amPath(appID, "/jobs"), &r); err != nil {
		return nil, err
	}
	if r.Jobs == nil {
		return nil, nil
	}
	return r.Jobs.Job, nil
}

// Tasks lists a job's tasks, from its AM or, with appID "", from the
// history server.
func (m *Monitor) Tasks(ctx context.Context, appID, jobID string) ([]Task, error) {
	base, path := m.jobBase(appID, jobID)
	var r tasksResponse
	if err := m.get(ctx, base, path+"/tasks", &r); err != nil {
		return nil, err
	}
	if r.Tasks == nil {
		return nil, nil
	}
	return r.Tasks.Task, nil
}

// Attempts lists a task's attempts, from its AM or, with appID "", from the
// history server.
func (m *Monitor) Attempts(ctx context.Context, appID, jobID, taskID string) ([]Attempt, error) {
	base, path := m.jobBase(appID, jobID)
	var r attemptsResponse
	if err := m.get(ctx, base, path+"/tasks/"+url.PathEscape(taskID)+"/attempts", &r); err != nil {
		return nil, err
	}
	if r.TaskAttempts == nil {
		return nil, nil
	}
	return r.TaskAttempts.TaskAttempt, nil
}

// Counters reads a job's counters, from its AM or, with appID "", from the
// history server.
func (m *Monitor) Counters(ctx context.Context, appID, jobID string) ([]CounterGroup, error) {
	base, path := m.jobBase(appID, jobID)
	var r countersResponse
	if err := m.get(ctx, base, path+"/counters", &r); err != nil {
		return nil, err
	}
	if r.JobCounters == nil {
		return nil, nil
	}
	return r.JobCounters.CounterGroup, nil
}

func (m *Monitor) jobBase(appID, jobID string) (base, path string) {
	if appID == "" {
		return m.History, "/ws/v1/history/mapreduce/jobs/" + url.PathEscape(jobID)
	}
	return m.RM, amPath(appID, "/jobs/"+url.PathEscape(jobID))
}

// JobID is the MapReduce job id of an application id (one job per AM).
func JobID(appID string) string { return "job_" + strings.TrimPrefix(appID, "application_") }

// NodeOf is the host part of a nodeHttpAddress or node id ("vm:8042" → "vm").
func NodeOf(addr string) string {
	if h, _, ok := strings.Cut(addr, ":"); ok {
		return h
	}
	return addr
}
