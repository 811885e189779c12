package yarn

// The JSON shapes of the Hadoop 3.x REST APIs the monitor reads, as
// documented for the ResourceManager (ResourceManagerRest), the MapReduce
// Application Master (MapredAppMasterRest, reached through the RM's proxy)
// and the MapReduce Job History Server (HistoryServerRest). Only the fields
// the monitor uses are declared; times are milliseconds since the epoch.

// App is an element of GET /ws/v1/cluster/apps.
type App struct {
	ID              string  `json:"id"`
	User            string  `json:"user"`
	Name            string  `json:"name"`
	Queue           string  `json:"queue"`
	State           string  `json:"state"`       // NEW … RUNNING, FINISHED, FAILED, KILLED
	FinalStatus     string  `json:"finalStatus"` // UNDEFINED, SUCCEEDED, FAILED, KILLED
	Progress        float64 `json:"progress"`
	ApplicationType string  `json:"applicationType"`
	StartedTime     int64   `json:"startedTime"`
	FinishedTime    int64   `json:"finishedTime"`
	TrackingURL     string  `json:"trackingUrl"`
}

type appsResponse struct {
	Apps *struct {
		App []App `json:"app"`
	} `json:"apps"`
}

// Node is an element of GET /ws/v1/cluster/nodes.
type Node struct {
	ID                    string `json:"id"` // host:port
	NodeHostName          string `json:"nodeHostName"`
	NodeHTTPAddress       string `json:"nodeHTTPAddress"`
	State                 string `json:"state"` // RUNNING, LOST, UNHEALTHY, …
	NumContainers         int    `json:"numContainers"`
	UsedVirtualCores      int    `json:"usedVirtualCores"`
	AvailableVirtualCores int    `json:"availableVirtualCores"`
}

type nodesResponse struct {
	Nodes *struct {
		Node []Node `json:"node"`
	} `json:"nodes"`
}

// Job is an element of …/ws/v1/mapreduce/jobs (AM) or
// /ws/v1/history/mapreduce/jobs (history server).
type Job struct {
	ID               string  `json:"id"`
	Name             string  `json:"name"`
	User             string  `json:"user"`
	State            string  `json:"state"` // NEW, INITED, RUNNING, SUCCEEDED, FAILED, KILL_WAIT, KILLED, ERROR
	SubmitTime       int64   `json:"submitTime,omitempty"`
	StartTime        int64   `json:"startTime"`
	FinishTime       int64   `json:"finishTime"`
	MapsTotal        int     `json:"mapsTotal"`
	MapsCompleted    int     `json:"mapsCompleted"`
	ReducesTotal     int     `json:"reducesTotal"`
	ReducesCompleted int     `json:"reducesCompleted"`
	MapProgress      float64 `json:"mapProgress,omitempty"`
	ReduceProgress   float64 `json:"reduceProgress,omitempty"`
}

type jobsResponse struct {
	Jobs *struct {
		Job []Job `json:"job"`
	} `json:"jobs"`
}

// Task types and the states that matter.
const (
	TypeMap       = "MAP"
	TypeReduce    = "REDUCE"
	StateRunning  = "RUNNING"
	StateSucceed  = "SUCCEEDED"
	StateFailed   = "FAILED"
	StateKilled   = "KILLED"
	StateFinished = "FINISHED"
)

// Task is an element of …/jobs/{jobid}/tasks.
type Task struct {
	ID                string  `json:"id"`
	Type              string  `json:"type"`
	State             string  `json:"state"`
	Progress          float64 `json:"progress"`
	StartTime         int64   `json:"startTime"`
	FinishTime        int64   `json:"finishTime"`
	ElapsedTime       int64   `json:"elapsedTime"`
	SuccessfulAttempt string  `json:"successfulAttempt"`
}

type tasksResponse struct {
	Tasks *struct {
		Task []Task `json:"task"`
	} `json:"tasks"`
}

// Attempt is an element of …/tasks/{taskid}/attempts; the shuffle, merge
// and reduce fields are set on reduce attempts only.
type Attempt struct {
	ID                  string  `json:"id"`
	Type                string  `json:"type"`
	State               string  `json:"state"`
	Progress            float64 `json:"progress"`
	NodeHTTPAddress     string  `json:"nodeHttpAddress"`
	Rack                string  `json:"rack"`
	AssignedContainerID string  `json:"assignedContainerId"`
	Diagnostics         string  `json:"diagnostics"`
	StartTime           int64   `json:"startTime"`
	FinishTime          int64   `json:"finishTime"`
	ElapsedTime         int64   `json:"elapsedTime"`
	ShuffleFinishTime   int64   `json:"shuffleFinishTime,omitempty"`
	MergeFinishTime     int64   `json:"mergeFinishTime,omitempty"`
	ElapsedShuffleTime  int64   `json:"elapsedShuffleTime,omitempty"`
	ElapsedMergeTime    int64   `json:"elapsedMergeTime,omitempty"`
	ElapsedReduceTime   int64   `json:"elapsedReduceTime,omitempty"`
}

type attemptsResponse struct {
	TaskAttempts *struct {
		TaskAttempt []Attempt `json:"taskAttempt"`
	} `json:"taskAttempts"`
}

// Counter is one counter of GET …/jobs/{jobid}/counters: its totals over
// the job's maps, its reduces, and both.
type Counter struct {
	Name               string `json:"name"`
	TotalCounterValue  int64  `json:"totalCounterValue"`
	MapCounterValue    int64  `json:"mapCounterValue"`
	ReduceCounterValue int64  `json:"reduceCounterValue"`
}

// CounterGroup is a group of job counters.
type CounterGroup struct {
	CounterGroupName string    `json:"counterGroupName"`
	Counter          []Counter `json:"counter"`
}

type countersResponse struct {
	JobCounters *struct {
		ID           string         `json:"id"`
		CounterGroup []CounterGroup `json:"counterGroup"`
	} `json:"jobCounters"`
}

// Counter group names the profile reads.
const (
	FileSystemCounters = "org.apache.hadoop.mapreduce.FileSystemCounter"
	TaskCounters       = "org.apache.hadoop.mapreduce.TaskCounter"
)
