package yarn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/mrmarket/mrmarket/strategies"
)

// Measured is what ProfileJob reads of a finished job: its ARIA profile
// (§3 of Verma, Cherkasova and Campbell, "ARIA: Automatic Resource
// Inference and Allocation for MapReduce Environments"), the durations of
// its phases in seconds as a job file carries them, extracted from its
// successful task attempts, and the features beside it.
//
// [recon] From the attempts the REST APIs report: a map phase is an
// attempt's elapsed time; the first shuffle is measured on the reduces of
// the first wave (started before the last map finished) and only its part
// after the map stage ended (the part overlapping the maps is hidden in
// the map stage); the typical shuffle is a later reduce's shuffle plus
// merge (elapsedShuffleTime + elapsedMergeTime: ARIA's shuffle/sort); the
// reduce phase is elapsedReduceTime. With no reduce started after the maps,
// the typical shuffle falls back to the first wave's full shuffles.
type Measured struct {
	Job     string `json:"job"`
	Maps    int    `json:"maps"`
	Reduces int    `json:"reduces"`
	strategies.JobProfile
	MapMin float64 `json:"map_min"` // seconds
	// From the job's counters (0 when the job has none): the bytes a map
	// reads, and the selectivities — map output over map input, reduce
	// output over reduce (shuffled) input.
	InputPerMap       int64     `json:"input_per_map"`
	MapSelectivity    float64   `json:"map_selectivity"`
	ReduceSelectivity float64   `json:"reduce_selectivity"`
	MapStageEnd       time.Time `json:"map_stage_end"`
}

// ProfileJob reads a finished job's attempts from the history server and
// extracts its profile.
func (m *Monitor) ProfileJob(ctx context.Context, jobID string) (Measured, error) {
	tasks, err := m.Tasks(ctx, "", jobID)
	if err != nil {
		return Measured{}, err
	}
	var maps, reduces []Attempt
	for _, t := range tasks {
		if t.State != StateSucceed {
			continue
		}
		atts, err := m.Attempts(ctx, "", jobID, t.ID)
		if err != nil {
			return Measured{}, err
		}
		for _, a := range atts {
			if a.State != StateSucceed {
				continue // failed and killed attempts are re-executions, not the job's profile
			}
			if a.Type == TypeMap {
				maps = append(maps, a)
			} else if a.Type == TypeReduce {
				reduces = append(reduces, a)
			}
		}
	}
	p, err := BuildProfile(jobID, maps, reduces)
	if err != nil {
		return p, err
	}
	groups, err := m.Counters(ctx, "", jobID)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return p, err
	}
	p.AddCounters(groups)
	return p, nil
}

// AddCounters fills the profile's input size and selectivities from job
// counters: HDFS_BYTES_READ by the maps, MAP_OUTPUT_BYTES,
// REDUCE_SHUFFLE_BYTES and HDFS_BYTES_WRITTEN by the reduces.
func (p *Measured) AddCounters(groups []CounterGroup) {
	get := func(group, name string) Counter {
		for _, g := range groups {
			if g.CounterGroupName != group {
				continue
			}
			for _, c := range g.Counter {
				if c.Name == name {
					return c
				}
			}
		}
		return Counter{}
	}
	in := get(FileSystemCounters, "HDFS_BYTES_READ").MapCounterValue
	out := get(TaskCounters, "MAP_OUTPUT_BYTES").MapCounterValue
	shuffled := get(TaskCounters, "REDUCE_SHUFFLE_BYTES").ReduceCounterValue
	written := get(FileSystemCounters, "HDFS_BYTES_WRITTEN").ReduceCounterValue
	if p.Maps > 0 {
		p.InputPerMap = in / int64(p.Maps)
	}
	if in > 0 {
		p.MapSelectivity = float64(out) / float64(in)
	}
	if shuffled > 0 {
		p.ReduceSelectivity = float64(written) / float64(shuffled)
	}
}

// BuildProfile extracts a profile from successful map and reduce attempts.
func BuildProfile(jobID string, maps, reduces []Attempt) (Measured, error) {
	if len(maps) == 0 {
		return Measured{}, fmt.Errorf("yarn: job %s has no successful map attempt", jobID)
	}
	p := Measured{Job: jobID, Maps: len(maps), Reduces: len(reduces)}
	secs := func(ms int64) float64 { return float64(ms) / 1000 }
	var mapEnd int64
	var mapDur []float64
	for _, a := range maps {
		mapDur = append(mapDur, secs(a.FinishTime-a.StartTime))
		mapEnd = max(mapEnd, a.FinishTime)
	}
	p.MapMin, p.MapAvg, p.MapMax = stats(mapDur)
	p.MapStageEnd = time.UnixMilli(mapEnd)
	var sh1, shTyp, red, firstFull []float64
	for _, a := range reduces {
		red = append(red, secs(a.ElapsedReduceTime))
		if a.StartTime < mapEnd {
			sh1 = append(sh1, secs(max(a.ShuffleFinishTime-mapEnd, 0)))
			firstFull = append(firstFull, secs(a.ElapsedShuffleTime+a.ElapsedMergeTime))
		} else {
			shTyp = append(shTyp, secs(a.ElapsedShuffleTime+a.ElapsedMergeTime))
		}
	}
	if len(shTyp) == 0 {
		shTyp = firstFull
	}
	_, p.Sh1Avg, p.Sh1Max = stats(sh1)
	_, p.ShTypAvg, p.ShTypMax = stats(shTyp)
	_, p.ReduceAvg, p.ReduceMax = stats(red)
	return p, nil
}

func stats(xs []float64) (lo, avg, hi float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	lo = math.Inf(1)
	var sum float64
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
		sum += x
	}
	return lo, sum / float64(len(xs)), hi
}
