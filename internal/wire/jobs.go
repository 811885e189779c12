package wire

import (
	"math"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
	"github.com/mrmarket/mrmarket/strategies"
)

// Subjects of the deadline service (served by the broker).
const (
	BrokerQuote    = "mrm.v1.broker.quote"
	BrokerSubmit   = "mrm.v1.broker.submit"
	BrokerJobs     = "mrm.v1.broker.jobs"
	BrokerProgress = "mrm.v1.broker.progress"
)

// StrategyDeadline is the strategy of a plan the deadline service runs for
// an admitted job; it is not accepted by Spend. The broker's answers name
// the plan of a job without a deadline StrategyBestEffort.
const (
	StrategyDeadline   = "deadline"
	StrategyBestEffort = "best-effort"
)

// Job states.
const (
	JobQueued  = "queued"  // admitted, waiting for earlier deadlines
	JobRunning = "running" // holds its share of its hosts
	JobDone    = "done"
	JobLate    = "late" // done after its deadline, or still running past it
)

// JockeyTable is Jockey's C(p, a) (§4.2 of Ferguson et al.'s Jockey), built offline by the
// simulator: Remaining[i][k] seconds left at progress Progress[i] with a
// share Alloc[k] of every host the job runs on.
type JockeyTable struct {
	Progress  []float64   `json:"progress"`
	Alloc     []float64   `json:"alloc"`
	Remaining [][]float64 `json:"remaining"`
}

// JobSpec is what `mrmarket quote|submit --job FILE` reads: a MapReduce
// job on the user's VMs. Maps, reduces and the selectivities are MRM's
// features; MapSlots and ReduceSlots are the job's cluster's slots; Profile
// (ARIA's, the one profile type: strategies.JobProfile, which the contract
// may import as strategies is pure) gives its processing time until the
// broker has seen enough jobs to estimate it; Table, when set, lets
// Jockey's controller steer it.
type JobSpec struct {
	Name              string                `json:"name"`
	VMs               []string              `json:"vms"`
	Maps              int                   `json:"maps"`
	Reduces           int                   `json:"reduces"`
	MapSlots          int                   `json:"map_slots"`
	ReduceSlots       int                   `json:"reduce_slots"`
	MapSelectivity    float64               `json:"map_selectivity,omitempty"`
	ReduceSelectivity float64               `json:"reduce_selectivity,omitempty"`
	Profile           strategies.JobProfile `json:"profile"`
	Table             *JockeyTable          `json:"jockey_table,omitempty"`
}

// Bounds on a job, to refuse absurd input.
const (
	MaxJobTasks   = 10_000_000
	MaxTaskSecond = 30 * 24 * 3600.0
)

func finiteIn(what string, v, lo, hi float64) error {
	if math.IsNaN(v) || v < lo || v > hi {
		return Errorf(ErrBadRequest, "%s must be between %v and %v, got %v", what, lo, hi, v)
	}
	return nil
}

// Validate checks a job received from a user.
func (j *JobSpec) Validate() error {
	if err := CheckName("job", j.Name); err != nil {
		return err
	}
	if len(j.VMs) == 0 || len(j.VMs) > MaxPlanVMs {
		return Errorf(ErrBadRequest, "a job needs 1 to %d VMs, got %d", MaxPlanVMs, len(j.VMs))
	}
	seen := map[string]bool{}
	for _, vm := range j.VMs {
		if err := CheckName("vm", vm); err != nil {
			return err
		}
		if seen[vm] {
			return Errorf(ErrBadRequest, "vm %q listed twice", vm)
		}
		seen[vm] = true
	}
	if j.Maps < 1 || j.Maps > MaxJobTasks || j.Reduces < 0 || j.Reduces > MaxJobTasks {
		return Errorf(ErrBadRequest, "a job has 1 to %d maps and 0 to %d reduces, got %d and %d", MaxJobTasks, MaxJobTasks, j.Maps, j.Reduces)
	}
	if j.MapSlots < 1 || j.MapSlots > MaxJobTasks || j.Reduces > 0 && (j.ReduceSlots < 1 || j.ReduceSlots > MaxJobTasks) {
		return Errorf(ErrBadRequest, "map_slots (and reduce_slots, with reduces) must be between 1 and %d", MaxJobTasks)
	}
	p := j.Profile
	for _, c := range []struct {
		what     string
		avg, max float64
	}{{"map", p.MapAvg, p.MapMax}, {"first shuffle", p.Sh1Avg, p.Sh1Max}, {"typical shuffle", p.ShTypAvg, p.ShTypMax}, {"reduce", p.ReduceAvg, p.ReduceMax}} {
		if err := finiteIn(c.what+" average", c.avg, 0, MaxTaskSecond); err != nil {
			return err
		}
		if err := finiteIn(c.what+" maximum", c.max, c.avg, MaxTaskSecond); err != nil {
			return err
		}
	}
	if p.MapAvg <= 0 {
		return Errorf(ErrBadRequest, "the profile needs the maps' average time")
	}
	for what, v := range map[string]float64{"map_selectivity": j.MapSelectivity, "reduce_selectivity": j.ReduceSelectivity} {
		if err := finiteIn(what, v, 0, 1e6); err != nil {
			return err
		}
	}
	if t := j.Table; t != nil {
		if len(t.Progress) < 2 || len(t.Alloc) == 0 || len(t.Remaining) != len(t.Progress) || len(t.Progress) > 1000 || len(t.Alloc) > 1000 {
			return Errorf(ErrBadRequest, "jockey_table needs 2 to 1000 progress points, 1 to 1000 allocations and a row of remaining times per progress point")
		}
		for i, p := range t.Progress {
			if err := finiteIn("jockey_table progress", p, 0, 1); err != nil {
				return err
			}
			if i > 0 && p <= t.Progress[i-1] {
				return Errorf(ErrBadRequest, "jockey_table progress must increase")
			}
			if len(t.Remaining[i]) != len(t.Alloc) {
				return Errorf(ErrBadRequest, "jockey_table row %d has %d times for %d allocations", i, len(t.Remaining[i]), len(t.Alloc))
			}
			for _, r := range t.Remaining[i] {
				if err := finiteIn("jockey_table remaining", r, 0, MaxDuration.Seconds()); err != nil {
					return err
				}
			}
		}
		for i, a := range t.Alloc {
			if err := finiteIn("jockey_table allocation", a, 1e-6, 1); err != nil {
				return err
			}
			if i > 0 && a <= t.Alloc[i-1] {
				return Errorf(ErrBadRequest, "jockey_table allocations must increase")
			}
		}
	}
	return nil
}

// QuoteRequest asks what finishing a job costs: the price-deadline curve.
type QuoteRequest struct {
	Versioned
	User   string  `json:"user"`
	Job    JobSpec `json:"job"`
	Points int     `json:"points,omitempty"` // default 10
}

func (r *QuoteRequest) Validate() error {
	if err := CheckName("user", r.User); err != nil {
		return err
	}
	if r.Points < 0 || r.Points > 1000 {
		return Errorf(ErrBadRequest, "points must be between 1 and 1000, got %d", r.Points)
	}
	return r.Job.Validate()
}

// QuotePoint is one point of a price-deadline curve: finishing by Deadline
// costs Price (held at submit, spent on the job's hosts); Confidence is
// the probability the estimate gives the job of needing no more time than
// it is promised.
type QuotePoint struct {
	Deadline   time.Time   `json:"deadline"`
	Price      money.Micro `json:"price_micro"`
	Confidence float64     `json:"confidence"`
	Affordable bool        `json:"affordable"`
}

// QuoteReply is the curve and what it rests on: the job's processing time
// at a full share (Work: the estimate's upper bound; Mean and SD), where the
// estimate came from ("history": regression over finished jobs, or
// "profile": ARIA's bounds), the share the service reserves for it, the
// earliest finish the committed jobs leave, and the user's balance.
type QuoteReply struct {
	Job      string       `json:"job"`
	Work     float64      `json:"work_s"`
	Mean     float64      `json:"mean_s"`
	SD       float64      `json:"sd_s"`
	Source   string       `json:"source"`
	Share    float64      `json:"share"`
	Earliest time.Time    `json:"earliest"`
	Queued   int          `json:"queued"`
	Balance  money.Micro  `json:"balance_micro"`
	Curve    []QuotePoint `json:"curve"`
	// MapSlots and ReduceSlots are ARIA's minimum allocation (Eq. 15) for
	// the curve's first deadline.
	MapSlots    int `json:"map_slots"`
	ReduceSlots int `json:"reduce_slots"`
}

// SubmitRequest admits a job with a committed deadline: Deadline, or the
// earliest deadline whose price fits Budget. Its price is held and spent on
// the job's VMs. BestEffort admits it with no deadline instead, Budget held,
// to run in the broker's overlap order when no deadline job needs its hosts.
// ID makes it idempotent.
type SubmitRequest struct {
	Versioned
	ID         string      `json:"id,omitempty"`
	User       string      `json:"user"`
	Job        JobSpec     `json:"job"`
	Deadline   time.Time   `json:"deadline,omitzero"`
	Budget     money.Micro `json:"budget_micro,omitempty"`
	BestEffort bool        `json:"best_effort,omitempty"`
	// MaxPrice bounds a deadline job without a budget: the most the user
	// lets be held for it (the CLI signs the quoted price). With neither, a
	// broker that knows identities cannot get the bank to hold the price.
	MaxPrice money.Micro `json:"max_price_micro,omitempty"`
	// Pace is the shortest time the job's money may be spent over (see
	// SpendRequest.Pace): the CLI signs the job's shortest run, its ARIA
	// lower bound at strategies.MaxDeadlineShare (strategies.DeadlinePace).
	// Absent (an older client), only the total binds.
	Pace Duration `json:"pace,omitempty"`
}

func (r *SubmitRequest) Validate() error {
	if r.ID != "" {
		if err := CheckID("job id", r.ID); err != nil {
			return err
		}
	}
	if err := CheckName("user", r.User); err != nil {
		return err
	}
	switch {
	case r.BestEffort && (r.Budget == 0 || !r.Deadline.IsZero()):
		return Errorf(ErrBadRequest, "a best-effort job takes a budget and no deadline")
	case !r.BestEffort && r.Deadline.IsZero() == (r.Budget == 0):
		return Errorf(ErrBadRequest, "give a deadline or a budget, one of them")
	}
	if r.Budget != 0 {
		if err := checkAmount("budget", r.Budget); err != nil {
			return err
		}
	}
	if r.MaxPrice != 0 {
		if err := checkAmount("max price", r.MaxPrice); err != nil {
			return err
		}
	}
	if err := checkPace(r.Pace, MaxDuration); err != nil {
		return err
	}
	return r.Job.Validate()
}

// Job is an admitted job as the deadline service sees it.
type Job struct {
	ID       string      `json:"id"` // its plan's id
	User     string      `json:"user"`
	Name     string      `json:"name"`
	Status   string      `json:"status"`
	Admitted time.Time   `json:"admitted"`
	Deadline time.Time   `json:"deadline,omitzero"` // zero for a best-effort job
	Predict  time.Time   `json:"predicted_finish"`
	Finished time.Time   `json:"finished,omitzero"`
	Progress float64     `json:"progress"`
	Work     float64     `json:"work_s"` // seconds at a full share
	Share    float64     `json:"share"`
	Price    money.Micro `json:"price_micro"`
	Spent    money.Micro `json:"spent_micro"`
}

// SubmitReply is the admitted job.
type SubmitReply struct {
	Job  Job  `json:"job"`
	Plan Plan `json:"plan"`
}

// JobsRequest lists admitted jobs, of User when set.
type JobsRequest struct {
	Versioned
	User string `json:"user,omitempty"`
}

func (r *JobsRequest) Validate() error {
	if r.User == "" {
		return nil
	}
	return CheckName("user", r.User)
}

// JobsReply lists jobs, earliest deadline first.
type JobsReply struct {
	Jobs []Job `json:"jobs"`
}

// ProgressRequest reports a running job's progress (the YARN monitor in
// production, the simulator in tests): Jockey's indicator in [0, 1], the
// tasks done, and Done when the job has finished.
type ProgressRequest struct {
	Versioned
	User        string  `json:"user"`
	Job         string  `json:"job"` // its name
	Progress    float64 `json:"progress"`
	MapsDone    int     `json:"maps_done"`
	ReducesDone int     `json:"reduces_done"`
	Done        bool    `json:"done,omitempty"`
}

func (r *ProgressRequest) Validate() error {
	if err := CheckName("user", r.User); err != nil {
		return err
	}
	if err := CheckName("job", r.Job); err != nil {
		return err
	}
	if err := finiteIn("progress", r.Progress, 0, 1); err != nil {
		return err
	}
	if r.MapsDone < 0 || r.ReducesDone < 0 || r.MapsDone > MaxJobTasks || r.ReducesDone > MaxJobTasks {
		return Errorf(ErrBadRequest, "tasks done must be between 0 and %d", MaxJobTasks)
	}
	return nil
}
