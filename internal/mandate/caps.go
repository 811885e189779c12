package mandate

import (
	"math"
	"time"

	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/strategies"
)

// SignCaps fills req's Pace and VMShare from its strategy's caps
// (strategies.PlanCaps), as a user's client signs them: the pace rounded
// down to a millisecond, the share up to a millionth, so rounding never
// makes an honest plan's bids too fast for what it signed.
func SignCaps(req *wire.SpendRequest) error {
	s := strategies.Shape{VMs: req.VMs, Boost: req.Boost}
	for _, w := range req.Workflows {
		sw := strategies.Workflow{Name: w.Name, Weight: w.Weight}
		for _, st := range w.Stages {
			vms := make([]strategies.VM, len(st.VMs))
			for i, vm := range st.VMs {
				vms[i] = strategies.VM{Name: vm}
			}
			sw.Stages = append(sw.Stages, strategies.Stage{Name: st.Name, Weight: st.Weight, VMs: vms})
		}
		s.Workflows = append(s.Workflows, sw)
	}
	c, err := strategies.PlanCaps(req.Strategy, s)
	if err != nil {
		return wire.Errorf(wire.ErrBadRequest, "%v", err)
	}
	pace := max(c.Pace(req.Duration.D()).Truncate(time.Millisecond), wire.MinPace)
	req.Pace = wire.Duration(min(pace, req.Duration.D()))
	req.VMShare = min(max(int64(math.Ceil(c.VMShare*wire.FullShare)), 1), wire.FullShare)
	return nil
}

// JobPace is the pace a submit of job signs: its shortest run by its ARIA
// bounds (strategies.DeadlinePace), and no longer than the work a quote
// estimated when one is known (quoted > 0: wire.QuoteReply.Work), since the
// broker's estimate may come from finished jobs rather than the profile;
// at least wire.MinPace.
func JobPace(job wire.JobSpec, quoted float64) wire.Duration {
	low, up, _ := strategies.ARIABounds(job.Profile, job.Maps, job.Reduces, job.MapSlots, max(job.ReduceSlots, 1))
	work := min(low, up)
	if quoted > 0 {
		work = min(work, quoted)
	}
	return wire.Duration(max(strategies.DeadlinePace(work).Truncate(time.Millisecond), wire.MinPace))
}
