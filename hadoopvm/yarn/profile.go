package yarn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Profile is an ARIA job profile (§3 of Verma, Cherkasova and Campbell,
// "ARIA: Automatic Resource Inference and Allocation for MapReduce
// Environments"): the durations of a job's phases, extracted from its successful task attempts.
//
// [recon] From the attempts the REST APIs report: a map phase is an
// attempt's elapsed time; the first shuffle is measured on the reduces of
// the first wave (started before the last map finished) and only its part
// after the map stage ended (the part overlapping the maps is hidden in
// the map stage); the typical shuffle is a later reduce's shuffle plus
// merge (elapsedShuffleTime + elapsedMergeTime: ARIA's shuffle/sort); the
// reduce phase is elapsedReduceTime. With no reduce started after the maps,
// the typical shuffle falls back to the first wave's full shuffles.
type Profile struct {
	Job       string        `json:"job"`
	Maps      int           `json:"maps"`
	Reduces   int           `json:"reduces"`
	MapMin    time.Duration `json:"map_min"`
	MapAvg    time.Duration `json:"map_avg"`
	MapMax    time.Duration `json:"map_max"`
	Sh1Avg    time.Duration `json:"sh1_avg"`
	Sh1Max    time.Duration `json:"sh1_max"`
	ShTypAvg  time.Duration `json:"shtyp_avg"`
	ShTypMax  time.Duration `json:"shtyp_max"`
	ReduceAvg time.Duration `json:"reduce_avg"`
	ReduceMax time.Duration `json:"reduce_max"`
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
func (m *Monitor) ProfileJob(ctx context.Context, jobID string) (Profile, error) {
	tasks, err := m.Tasks(ctx, "", jobID)
	if err != nil {
		return Profile{}, err
	}
	var maps, reduces []Attempt
	for _, t := range tasks {
		if t.State != StateSucceed {
			continue
		}
		atts, err := m.Attempts(ctx, "", jobID, t.ID)
		if err != nil {
			return Profile{}, err
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
func (p *Profile) AddCounters(groups []CounterGroup) {
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
func BuildProfile(jobID string, maps, reduces []Attempt) (Profile, error) {
	if len(maps) == 0 {
		return Profile{}, fmt.Errorf("yarn: job %s has no successful map attempt", jobID)
	}
	p := Profile{Job: jobID, Maps: len(maps), Reduces: len(reduces)}
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	var mapEnd int64
	var mapDur []time.Duration
	for _, a := range maps {
		mapDur = append(mapDur, ms(a.FinishTime-a.StartTime))
		mapEnd = max(mapEnd, a.FinishTime)
	}
	p.MapMin, p.MapAvg, p.MapMax = stats(mapDur)
	p.MapStageEnd = time.UnixMilli(mapEnd)
	var sh1, shTyp, red, firstFull []time.Duration
	for _, a := range reduces {
		red = append(red, ms(a.ElapsedReduceTime))
		if a.StartTime < mapEnd {
			sh1 = append(sh1, ms(max(a.ShuffleFinishTime-mapEnd, 0)))
			firstFull = append(firstFull, ms(a.ElapsedShuffleTime+a.ElapsedMergeTime))
		} else {
			shTyp = append(shTyp, ms(a.ElapsedShuffleTime+a.ElapsedMergeTime))
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

func stats(ds []time.Duration) (lo, avg, hi time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	lo = time.Duration(math.MaxInt64)
	var sum time.Duration
	for _, d := range ds {
		lo, hi = min(lo, d), max(hi, d)
		sum += d
	}
	return lo, sum / time.Duration(len(ds)), hi
}
