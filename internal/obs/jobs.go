package obs

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// requestBuckets are the request latency histogram's upper bounds,
// seconds: a read answered from memory takes well under a millisecond, a
// capture a store transaction, and a client's attempt gives up after a few
// seconds, so the buckets run from half a millisecond to past that.
var requestBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// latenessBuckets are the job lateness histogram's upper bounds, seconds:
// the first (0) holds every job that met its deadline, the others a tick
// late up to hours late.
var latenessBuckets = []float64{0, 1, 10, 30, 60, 300, 900, 3600, 4 * 3600}

// Job kinds and deadline outcomes: the label values of the job metrics,
// each set to 0 from the start so a dashboard's rate() has a series before
// the first job.
const (
	JobDeadline   = "deadline"
	JobBestEffort = "best_effort"
	DeadlineMet   = "met"
	DeadlineMiss  = "missed"
)

func (m *Metrics) newJobMetrics() {
	m.JobsAdmitted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mrm_jobs_admitted_total", Help: "Jobs the deadline service admitted, by kind (deadline or best_effort).",
	}, []string{"kind"})
	m.JobDeadlines = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mrm_job_deadlines_total", Help: "Deadline jobs finished, by outcome: met (done by the deadline) or missed.",
	}, []string{"outcome"})
	m.JobLateness = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "mrm_job_lateness_seconds", Buckets: latenessBuckets,
		Help: "How long after its deadline a deadline job finished (0 for one that met it), seconds.",
	})
	for _, k := range []string{JobDeadline, JobBestEffort} {
		m.JobsAdmitted.WithLabelValues(k)
	}
	for _, o := range []string{DeadlineMet, DeadlineMiss} {
		m.JobDeadlines.WithLabelValues(o)
	}
}

// JobAdmitted counts one job admitted; deadline tells its kind.
func (m *Metrics) JobAdmitted(deadline bool) {
	if m == nil {
		return
	}
	kind := JobBestEffort
	if deadline {
		kind = JobDeadline
	}
	m.JobsAdmitted.WithLabelValues(kind).Inc()
}

// JobFinished counts a deadline job that finished at finished: met when
// by its deadline, missed (and how late) when after it.
func (m *Metrics) JobFinished(deadline, finished time.Time) {
	if m == nil || deadline.IsZero() {
		return
	}
	late := finished.Sub(deadline)
	outcome := DeadlineMet
	if late > 0 {
		outcome = DeadlineMiss
	}
	m.JobDeadlines.WithLabelValues(outcome).Inc()
	m.JobLateness.Observe(max(late, 0).Seconds())
}
