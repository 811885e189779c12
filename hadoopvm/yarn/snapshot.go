package yarn

import (
	"context"
	"errors"
	"sort"
	"strings"
)

// Stage is one application of a workflow.
type Stage struct {
	App      string  `json:"app"`
	Name     string  `json:"name"`
	State    string  `json:"state"`
	Progress float64 `json:"progress"` // fraction of the job's tasks done, 0..1
}

// Workflow is a user's workflow: its stages in order and the active one
// (the first not finished; len(Stages) when all are).
type Workflow struct {
	Name   string  `json:"name"`
	User   string  `json:"user"`
	Stages []Stage `json:"stages"`
	Active int     `json:"active"`
}

// NodeActivity is what a YARN node (a VM) is doing.
type NodeActivity struct {
	Node    string `json:"node"`
	Running int    `json:"running"` // running task attempts
	Idle    bool   `json:"idle"`
}

// Snapshot is the cluster as the monitor sees it now.
type Snapshot struct {
	Workflows []Workflow     `json:"workflows"`
	Nodes     []NodeActivity `json:"nodes"`
}

// WorkflowName is the workflow an application belongs to: its name up to
// the first ':'.
func WorkflowName(appName string) string {
	name, _, _ := strings.Cut(appName, ":")
	return name
}

func finished(state string) bool {
	switch state {
	case StateFinished, StateFailed, StateKilled, StateSucceed:
		return true
	}
	return false
}

// Snapshot reads the applications, their jobs and running attempts, and
// the nodes, and derives every workflow's stages and progress and every
// node's activity.
func (m *Monitor) Snapshot(ctx context.Context) (Snapshot, error) {
	apps, err := m.Apps(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	nodes, err := m.Nodes(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	sort.Slice(apps, func(i, j int) bool {
		if apps[i].StartedTime != apps[j].StartedTime {
			return apps[i].StartedTime < apps[j].StartedTime
		}
		return apps[i].ID < apps[j].ID
	})
	running := map[string]int{}
	byName := map[string]*Workflow{}
	var order []string
	for _, a := range apps {
		key := a.User + "/" + WorkflowName(a.Name)
		w := byName[key]
		if w == nil {
			w = &Workflow{Name: WorkflowName(a.Name), User: a.User}
			byName[key] = w
			order = append(order, key)
		}
		st := Stage{App: a.ID, Name: a.Name, State: a.State, Progress: a.Progress / 100}
		if finished(a.State) {
			st.Progress = 1
		} else if a.State == StateRunning {
			if err := m.readJob(ctx, a.ID, &st, running); err != nil && !errors.Is(err, ErrNotFound) {
				return Snapshot{}, err
			}
		}
		w.Stages = append(w.Stages, st)
	}
	snap := Snapshot{Workflows: []Workflow{}, Nodes: []NodeActivity{}}
	for _, key := range order {
		w := byName[key]
		w.Active = len(w.Stages)
		for i, s := range w.Stages {
			if !finished(s.State) {
				w.Active = i
				break
			}
		}
		snap.Workflows = append(snap.Workflows, *w)
	}
	for _, n := range nodes {
		host := n.NodeHostName
		if host == "" {
			host = NodeOf(n.ID)
		}
		snap.Nodes = append(snap.Nodes, NodeActivity{Node: host, Running: running[host], Idle: running[host] == 0})
	}
	sort.Slice(snap.Nodes, func(i, j int) bool { return snap.Nodes[i].Node < snap.Nodes[j].Node })
	return snap, nil
}

// readJob fills a running stage's progress from its AM and counts its
// running attempts per node.
func (m *Monitor) readJob(ctx context.Context, appID string, st *Stage, running map[string]int) error {
	jobs, err := m.Jobs(ctx, appID)
	if err != nil {
		return err
	}
	var done, total int
	for _, j := range jobs {
		done += j.MapsCompleted + j.ReducesCompleted
		total += j.MapsTotal + j.ReducesTotal
		tasks, err := m.Tasks(ctx, appID, j.ID)
		if err != nil {
			return err
		}
		for _, t := range tasks {
			if t.State != StateRunning {
				continue
			}
			atts, err := m.Attempts(ctx, appID, j.ID, t.ID)
			if err != nil {
				return err
			}
			for _, at := range atts {
				if at.State == StateRunning {
					running[NodeOf(at.NodeHTTPAddress)]++
				}
			}
		}
	}
	if total > 0 {
		st.Progress = float64(done) / float64(total)
	}
	return nil
}
