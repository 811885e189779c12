package experiments

import (
	"context"
	"fmt"
	"math"

	"github.com/mrmarket/mrmarket/hadoopvm/sim"
	"github.com/mrmarket/mrmarket/hadoopvm/sim/workload"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// The combined experiment: our stage-bottleneck strategy (stage priority
// across stages, bottleneck elimination within the active stage) against
// the paper's best strategy for each of Sandholm and Lai's scenarios, each
// against the same fair-share baseline and with the same budget.
func init() {
	register(Experiment{Name: "combined", Title: "Ours (stage priority + bottleneck elimination within stages) against the paper's best, Digg and VideoToon",
		Source: "Sandholm and Lai §7.3–7.4 scenarios", Engine: EngineMarket, DefaultRuns: 25, Steps: func(n int) int { return 4 * (1 + 2*n) },
		params: func() any { return &combinedParams{Boost: 0.9, IO: workload.IOPaper} },
		run: func(ctx context.Context, cfg Config, step func() error) (Result, error) {
			var res Result
			p := paramsOf[combinedParams](cfg)
			f := p.Boost
			digg := func(u string, vms []string) []sim.JobSpec { return workload.Digg(u, u, vms, 0, p.IO) }
			video := func(u string, vms []string) []sim.JobSpec { return workload.VideoToon(u, u, vms, 0, 16) }
			w := []float64{1, 20, 1}
			scale := 22.0 / 3 // weight-1 stages spend at the fair-share rate (§7.3)
			for _, c := range []struct {
				scenario    string
				base, paper TwoUsers
				ours        TwoUsers
				paperCI     float64
				paperGain   float64
				paperName   string
				where       string
			}{
				{"Digg", diggWorld(digg, Series([]float64{1, 1, 1}, 1), p.IO), diggWorld(digg, Series(w, scale), p.IO), diggWorld(digg, StageBottleneck(w, scale, f), p.IO),
					0.31, 1.87, "stage priority ×20 on stage 2", "Fig. 7"},
				{"VideoToon", videoWorld(video, Fair), videoWorld(video, Bottleneck(f)), videoWorld(video, StageBottleneck([]float64{1, 1, 1}, 1, f)),
					0.20, 0.62, fmt.Sprintf("bottleneck elimination f = %g", f), "Fig. 8"},
			} {
				pci, pgain, _, _, _, err := compare(ctx, cfg, step, c.base, c.paper, []int{0})
				if err != nil {
					return res, err
				}
				oci, ogain, _, _, _, err := compare(ctx, cfg, step, c.base, c.ours, []int{0})
				if err != nil {
					return res, err
				}
				diff := func(a, b []float64) []float64 {
					out := make([]float64, len(a))
					for i := range a {
						out[i] = a[i] - b[i]
					}
					return out
				}
				paperCI, _ := atPaperSetting(f == 0.9 && p.IO == workload.IOPaper, c.paperCI, "")
				paperGain, _ := atPaperSetting(f == 0.9 && p.IO == workload.IOPaper, c.paperGain, "")
				res.Rows = append(res.Rows,
					row(c.scenario+": CI, paper's best ("+c.paperName+")", paperCI, "", "%", pci).At(c.where+"(a)"),
					row(c.scenario+": CI, ours (stage-bottleneck)", paperCI, "", "%", oci).At(c.where+"(a)"),
					row(c.scenario+": efficiency gain, paper's best", paperGain, "", "%", pgain).At(c.where+"(b)"),
					row(c.scenario+": efficiency gain, ours", paperGain, "", "%", ogain).At(c.where+"(b)"),
					row(c.scenario+": ours − paper's best, efficiency gain", math.NaN(), "", "%", diff(ogain, pgain)))
			}
			res.Notes = notes("combined", nil)
			return res, nil
		}})
}

// diggWorld is §7.3's setting: user 1 spends with s, user 2 fair share.
func diggWorld(jobs func(string, []string) []sim.JobSpec, s func(string, []string, []sim.JobSpec) *wire.SpendRequest, io workload.IO) TwoUsers {
	return TwoUsers{Hosts: 23, IO: io, Users: [2]User{{jobs, s}, {jobs, Fair}}}
}

// combinedParams are the combined experiment's settings.
type combinedParams struct {
	Boost float64     `json:"boost" doc:"bottleneck elimination's boost f, for the paper's best on VideoToon and for ours on both (the paper: 0.9)"`
	IO    workload.IO `json:"io" doc:"Digg's I/O model: paper, governed, throttled or none (see s003-stage)"`
}

func (p *combinedParams) check() error {
	if !(p.Boost >= 0 && p.Boost < 1) {
		return fmt.Errorf("boost %g: want 0 ≤ f < 1", p.Boost)
	}
	return p.IO.Check()
}

// videoWorld is §7.4's setting: extra load on half the hosts, user 1 spends
// with s, user 2 fair share.
func videoWorld(jobs func(string, []string) []sim.JobSpec, s func(string, []string, []sim.JobSpec) *wire.SpendRequest) TwoUsers {
	return TwoUsers{Hosts: 18, Heterogeneous: true, Users: [2]User{{jobs, s}, {jobs, Fair}}}
}
