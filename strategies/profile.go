package strategies

// JobProfile is a MapReduce job's profile as ARIA defines it (§3), in
// seconds of each task at a full share of its VM's host: map tasks, the
// first shuffle's part after the maps, typical shuffles, reduce phases. It is the one profile type: a job file carries it (wire.JobSpec,
// with these JSON names), the YARN monitor measures it (yarn.Measured),
// ARIA's bounds and slots read it, Jockey and Lin et al. take their views
// of it from its methods, and the task model draws its tasks' times from
// it (mapreduce.ProfileSpec).
type JobProfile struct {
	MapAvg    float64 `json:"map_avg"`
	MapMax    float64 `json:"map_max"`
	Sh1Avg    float64 `json:"sh1_avg"`
	Sh1Max    float64 `json:"sh1_max"`
	ShTypAvg  float64 `json:"shtyp_avg"`
	ShTypMax  float64 `json:"shtyp_max"`
	ReduceAvg float64 `json:"reduce_avg"`
	ReduceMax float64 `json:"reduce_max"`
}

// StageSecs is Jockey's view: the average time of a task of each stage,
// a map and a reduce (its typical shuffle and its reduce phase), which
// MapReduceProgress weighs the stages by.
func (p JobProfile) StageSecs() (mapSecs, reduceSecs float64) {
	return p.MapAvg, p.ShTypAvg + p.ReduceAvg
}

// OverlapWork is Lin et al.'s view: a job's map work x and shuffle work y
// (OverlapJob.Map, Shuffle), seconds at a full share of its slots, from
// the averages.
func (p JobProfile) OverlapWork(maps, reduces, mapSlots, reduceSlots int) (x, y float64) {
	x = float64(maps) * p.MapAvg / float64(mapSlots)
	if reduces > 0 {
		y = p.Sh1Avg + float64(reduces)*(p.ShTypAvg+p.ReduceAvg)/float64(reduceSlots)
	}
	return x, y
}

// Scaled is the profile with every time f times as long.
func (p JobProfile) Scaled(f float64) JobProfile {
	for _, v := range []*float64{&p.MapAvg, &p.MapMax, &p.Sh1Avg, &p.Sh1Max, &p.ShTypAvg, &p.ShTypMax, &p.ReduceAvg, &p.ReduceMax} {
		*v *= f
	}
	return p
}
