package yarn

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
)

// Server keeps MapReduce applications in memory and serves them in the
// shapes the Monitor reads: the ResourceManager's /ws/v1/cluster/apps and
// /ws/v1/cluster/nodes, each running application's MapReduce AM behind the
// RM's proxy (/proxy/{app}/ws/v1/mapreduce/jobs/…) and, once it has
// finished, the Job History Server's /ws/v1/history/mapreduce/jobs/…. It
// encodes with the types the Monitor decodes, so what it serves and what
// the Monitor reads cannot drift apart. Two drivers record into it: the
// emulator of tests and the simulator (yarntest), and the facade of the
// project's worker guests (hadoopvm/yarnfacade). Times are the drivers'.
type Server struct {
	mu    sync.Mutex
	ts    int64 // the cluster timestamp in ids
	seq   int
	nodes []Node
	apps  map[string]*serverApp
}

type serverApp struct {
	App
	job      Job
	tasks    []*serverTask
	amUp     bool
	counters []CounterGroup
}

type serverTask struct {
	Task
	attempts []Attempt
}

// NewServer is an empty cluster whose ids carry the cluster timestamp
// clusterStart (milliseconds since the epoch, as YARN's do).
func NewServer(clusterStart int64) *Server {
	return &Server{ts: clusterStart, apps: map[string]*serverApp{}}
}

// AddNode adds a NodeManager on host (a VM) with vcores.
func (s *Server) AddNode(host string, vcores int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes = append(s.nodes, Node{ID: host + ":45454", NodeHostName: host, NodeHTTPAddress: host + ":8042", State: "RUNNING", AvailableVirtualCores: vcores})
}

// SetNodeState sets a node's state (RUNNING, LOST, …).
func (s *Server) SetNodeState(host, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.nodes {
		if s.nodes[i].NodeHostName == host {
			s.nodes[i].State = state
		}
	}
}

// Submit starts a MapReduce application of user with maps and reduces
// tasks at at (milliseconds since the epoch) and returns its id.
func (s *Server) Submit(user, name string, maps, reduces int, at int64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	suffix := fmt.Sprintf("%d_%04d", s.ts, s.seq)
	a := &serverApp{App: App{ID: "application_" + suffix, User: user, Name: name, Queue: "default", State: StateRunning,
		FinalStatus: "UNDEFINED", ApplicationType: "MAPREDUCE", StartedTime: at}, amUp: true}
	a.job = Job{ID: "job_" + suffix, Name: name, User: user, State: StateRunning, SubmitTime: at,
		StartTime: at, MapsTotal: maps, ReducesTotal: reduces}
	for i := range maps {
		a.tasks = append(a.tasks, &serverTask{Task: Task{ID: fmt.Sprintf("task_%s_m_%06d", suffix, i), Type: TypeMap, State: "SCHEDULED"}})
	}
	for i := range reduces {
		a.tasks = append(a.tasks, &serverTask{Task: Task{ID: fmt.Sprintf("task_%s_r_%06d", suffix, i), Type: TypeReduce, State: "SCHEDULED"}})
	}
	s.apps[a.ID] = a
	return a.ID
}

// TaskID is the id of map (or reduce) task n of an application.
func TaskID(appID, kind string, n int) string {
	t := "m"
	if kind == TypeReduce {
		t = "r"
	}
	return fmt.Sprintf("task_%s_%s_%06d", strings.TrimPrefix(appID, "application_"), t, n)
}

func (s *Server) find(appID, taskID string) (*serverApp, *serverTask, error) {
	a, ok := s.apps[appID]
	if !ok {
		return nil, nil, fmt.Errorf("yarn: no application %s", appID)
	}
	for _, t := range a.tasks {
		if t.ID == taskID {
			return a, t, nil
		}
	}
	return nil, nil, fmt.Errorf("yarn: no task %s", taskID)
}

// attempt finds an attempt by id.
func (s *Server) attempt(appID, attemptID string) (*serverApp, *serverTask, *Attempt, error) {
	i := strings.LastIndex(attemptID, "_")
	if !strings.HasPrefix(attemptID, "attempt_") || i < len("attempt_") {
		return nil, nil, nil, fmt.Errorf("yarn: malformed attempt id %q", attemptID)
	}
	a, t, err := s.find(appID, "task_"+attemptID[len("attempt_"):i])
	if err != nil {
		return nil, nil, nil, err
	}
	for k := range t.attempts {
		if t.attempts[k].ID == attemptID {
			return a, t, &t.attempts[k], nil
		}
	}
	return nil, nil, nil, fmt.Errorf("yarn: no attempt %s", attemptID)
}

// StartAttempt starts an attempt of a task on node at at and returns its id.
func (s *Server) StartAttempt(appID, taskID, node string, at int64) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, t, err := s.find(appID, taskID)
	if err != nil {
		return "", err
	}
	id := fmt.Sprintf("attempt_%s_%d", strings.TrimPrefix(taskID, "task_"), len(t.attempts))
	t.attempts = append(t.attempts, Attempt{ID: id, Type: t.Type, State: StateRunning, NodeHTTPAddress: node + ":8042",
		Rack: "/default-rack", StartTime: at})
	t.State = StateRunning
	if t.StartTime == 0 {
		t.StartTime = at
	}
	return id, nil
}

// SetProgress sets a running attempt's progress (0 to 100); its task's
// progress is its best attempt's, and the job's map and reduce progress
// the mean of its tasks'.
func (s *Server) SetProgress(appID, attemptID string, progress float64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, t, at, err := s.attempt(appID, attemptID)
	if err != nil {
		return err
	}
	if at.State != StateRunning {
		return nil
	}
	at.Progress = progress
	t.Progress = 0
	for _, x := range t.attempts {
		t.Progress = max(t.Progress, x.Progress)
	}
	a.stageProgress()
	return nil
}

// stageProgress is the job's map and reduce progress: the mean of its
// tasks' (percent).
func (a *serverApp) stageProgress() {
	var sum [2]float64
	var n [2]int
	for _, t := range a.tasks {
		k := 0
		if t.Type == TypeReduce {
			k = 1
		}
		sum[k] += t.Progress
		n[k]++
	}
	if n[0] > 0 {
		a.job.MapProgress = sum[0] / float64(n[0])
	}
	if n[1] > 0 {
		a.job.ReduceProgress = sum[1] / float64(n[1])
	}
}

// ReducePhases are the ends of a reduce attempt's shuffle and merge
// (milliseconds since the epoch).
type ReducePhases struct {
	ShuffleFinish, MergeFinish int64
}

// FinishAttempt ends an attempt at at, successfully or not (diagnostics
// say why); a reduce attempt's phases may be given.
func (s *Server) FinishAttempt(appID, attemptID string, at int64, ok bool, phases *ReducePhases, diagnostics string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, t, at0, err := s.attempt(appID, attemptID)
	if err != nil {
		return err
	}
	at0.FinishTime = at
	at0.ElapsedTime = at0.FinishTime - at0.StartTime
	at0.Progress = 100
	at0.Diagnostics = diagnostics
	if phases != nil {
		at0.ShuffleFinishTime, at0.MergeFinishTime = phases.ShuffleFinish, phases.MergeFinish
		at0.ElapsedShuffleTime = at0.ShuffleFinishTime - at0.StartTime
		at0.ElapsedMergeTime = at0.MergeFinishTime - at0.ShuffleFinishTime
		at0.ElapsedReduceTime = at0.FinishTime - at0.MergeFinishTime
	}
	if !ok {
		at0.State = StateFailed
		if t.State != StateSucceed {
			t.State = "SCHEDULED" // waits for another attempt
		}
		return nil
	}
	at0.State, t.State = StateSucceed, StateSucceed
	t.FinishTime, t.SuccessfulAttempt, t.Progress = at0.FinishTime, at0.ID, 100
	t.ElapsedTime = t.FinishTime - t.StartTime
	if t.Type == TypeMap {
		a.job.MapsCompleted++
	} else {
		a.job.ReducesCompleted++
	}
	done := a.job.MapsCompleted + a.job.ReducesCompleted
	a.Progress = 100 * float64(done) / float64(a.job.MapsTotal+a.job.ReducesTotal)
	a.stageProgress()
	return nil
}

// withApp runs do on an application under the lock.
func (s *Server) withApp(appID string, do func(a *serverApp)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.apps[appID]
	if !ok {
		return fmt.Errorf("yarn: no application %s", appID)
	}
	do(a)
	return nil
}

// SetAppProgress sets an application's progress as its AM reports it
// (percent).
func (s *Server) SetAppProgress(appID string, progress float64) error {
	return s.withApp(appID, func(a *serverApp) { a.Progress = progress })
}

// SetCounters sets a job's counters (the history server and AM serve them).
func (s *Server) SetCounters(appID string, groups []CounterGroup) error {
	return s.withApp(appID, func(a *serverApp) { a.counters = groups })
}

// FinishApp ends an application successfully at at: its AM goes away and
// its job moves to the history server.
func (s *Server) FinishApp(appID string, at int64) error { return s.EndApp(appID, at, true) }

// EndApp ends an application at at, its job succeeded or failed: its AM
// goes away and its job moves to the history server.
func (s *Server) EndApp(appID string, at int64, succeeded bool) error {
	return s.withApp(appID, func(a *serverApp) {
		a.State, a.FinalStatus, a.FinishedTime, a.amUp = StateFinished, "SUCCEEDED", at, false
		a.job.State, a.job.FinishTime = StateSucceed, at
		if succeeded {
			a.Progress = 100
		} else {
			a.FinalStatus, a.job.State = StateFailed, StateFailed
		}
	})
}

// Handler serves the ResourceManager's paths (with the AM proxy's) and the
// history server's on one address.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/ws/v1/history/") {
			s.ServeHistory(w, r)
			return
		}
		s.ServeRM(w, r)
	})
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

// ServeRM answers the ResourceManager's paths and its AM proxy's.
func (s *Server) ServeRM(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	path := r.URL.Path
	switch {
	case path == "/ws/v1/cluster/apps":
		states := map[string]bool{}
		for _, st := range strings.Split(r.URL.Query().Get("states"), ",") {
			if st != "" {
				states[strings.ToUpper(st)] = true
			}
		}
		var list []App
		for _, a := range s.apps {
			if len(states) == 0 || states[a.State] {
				list = append(list, a.App)
			}
		}
		var resp appsResponse
		if len(list) > 0 {
			sort.Slice(list, func(i, j int) bool { return list[i].ID < list[j].ID })
			resp.Apps = &struct {
				App []App `json:"app"`
			}{list}
		}
		writeJSON(w, resp)
	case path == "/ws/v1/cluster/nodes":
		list := make([]Node, len(s.nodes))
		for i, n := range s.nodes {
			n.NumContainers = s.runningOn(n.NodeHostName)
			n.UsedVirtualCores = n.NumContainers
			list[i] = n
		}
		writeJSON(w, nodesResponse{Nodes: &struct {
			Node []Node `json:"node"`
		}{list}})
	case strings.HasPrefix(path, "/proxy/"):
		rest := strings.TrimPrefix(path, "/proxy/")
		appID, amPath, _ := strings.Cut(rest, "/")
		a, ok := s.apps[appID]
		if !ok || !a.amUp {
			notFound(w, "application master of "+appID)
			return
		}
		s.serveJob(w, a, strings.TrimPrefix("/"+amPath, "/ws/v1/mapreduce"))
	default:
		notFound(w, path)
	}
}

// ServeHistory answers the Job History Server's paths: finished jobs only.
func (s *Server) ServeHistory(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rest, ok := strings.CutPrefix(r.URL.Path, "/ws/v1/history/mapreduce")
	if !ok {
		notFound(w, r.URL.Path)
		return
	}
	var a *serverApp
	if parts := strings.Split(strings.TrimPrefix(rest, "/jobs/"), "/"); strings.HasPrefix(rest, "/jobs/") {
		for _, x := range s.apps {
			if x.job.ID == parts[0] && !x.amUp {
				a = x
			}
		}
	}
	if a == nil {
		notFound(w, "job")
		return
	}
	s.serveJob(w, a, rest)
}

// serveJob answers /jobs, /jobs/{id}, /jobs/{id}/counters, /jobs/{id}/tasks
// and /jobs/{id}/tasks/{t}/attempts.
func (s *Server) serveJob(w http.ResponseWriter, a *serverApp, rest string) {
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	switch {
	case len(parts) == 1 && parts[0] == "jobs":
		writeJSON(w, jobsResponse{Jobs: &struct {
			Job []Job `json:"job"`
		}{[]Job{a.job}}})
	case len(parts) == 2 && parts[0] == "jobs" && parts[1] == a.job.ID:
		job := a.job
		writeJSON(w, jobResponse{Job: &job})
	case len(parts) == 3 && parts[0] == "jobs" && parts[1] == a.job.ID && parts[2] == "counters":
		writeJSON(w, countersResponse{JobCounters: &struct {
			ID           string         `json:"id"`
			CounterGroup []CounterGroup `json:"counterGroup"`
		}{a.job.ID, a.counters}})
	case len(parts) == 3 && parts[0] == "jobs" && parts[1] == a.job.ID && parts[2] == "tasks":
		list := make([]Task, len(a.tasks))
		for i, t := range a.tasks {
			list[i] = t.Task
		}
		writeJSON(w, tasksResponse{Tasks: &struct {
			Task []Task `json:"task"`
		}{list}})
	case len(parts) == 5 && parts[0] == "jobs" && parts[1] == a.job.ID && parts[2] == "tasks" && parts[4] == "attempts":
		for _, t := range a.tasks {
			if t.ID == parts[3] {
				writeJSON(w, attemptsResponse{TaskAttempts: &struct {
					TaskAttempt []Attempt `json:"taskAttempt"`
				}{t.attempts}})
				return
			}
		}
		notFound(w, "task "+parts[3])
	default:
		notFound(w, rest)
	}
}

func (s *Server) runningOn(host string) int {
	n := 0
	for _, a := range s.apps {
		for _, t := range a.tasks {
			for _, at := range t.attempts {
				if at.State == StateRunning && NodeOf(at.NodeHTTPAddress) == host {
					n++
				}
			}
		}
	}
	return n
}
