package e2e

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/hadoopvm/worker"
	"github.com/mrmarket/mrmarket/hadoopvm/yarnfacade"
)

// sortInput is each worker's second input: a sort whose shuffle moves
// half of each guest's 16 MiB of map output to the other guest over the
// link the agent shapes (linkKiBps each direction), about 8 s of the
// whole link for a cluster's job against about 2 s of its CPUs for the
// maps: the I/O-bound half of case a.
var sortInput = worker.Input{Kind: worker.Sort, Splits: 2, SplitBytes: 8 << 20, Seed: 41}

// phases are a job's stretches as the facade saw them, in seconds: its
// maps (from its submission to the last map's end, on the CPUs), its
// shuffle (to the last reduce's shuffle end, on the link) and its merge
// and write (to its end, on the CPUs).
type phases struct{ maps, shuffle, tail float64 }

// phasesOf reads a finished job's phases from its attempts.
func phasesOf(r yarnfacade.Result) (phases, error) {
	var mapsEnd, shuffleEnd time.Time
	for _, a := range r.Attempts {
		switch {
		case !a.OK:
		case a.Reduce && a.ShuffleEnd.After(shuffleEnd):
			shuffleEnd = a.ShuffleEnd
		case !a.Reduce && a.Finish.After(mapsEnd):
			mapsEnd = a.Finish
		}
	}
	if mapsEnd.IsZero() || shuffleEnd.Before(mapsEnd) {
		return phases{}, fmt.Errorf("%s: no map end, or a shuffle that ended before the maps (%v, %v)", r.Job, mapsEnd, shuffleEnd)
	}
	return phases{mapsEnd.Sub(r.Submitted).Seconds(), shuffleEnd.Sub(mapsEnd).Seconds(), r.Finished.Sub(shuffleEnd).Seconds()}, nil
}

// caseShuffle: the I/O-bound half of case a. Alice's sort runs once with
// the cluster to herself (bob's guests idle, their parts of the CPUs and
// the link lent to hers): each phase's time with the whole resource, and
// the CPU the shuffle kept busy. Then alice and bob run equal sorts at
// their 3:1 spending. The model, given those phases — maps and the merge
// on the CPUs, the shuffle on the link and that part of the CPUs — and the
// shares the agent set, predicts bob's time over alice's, held
// on the wall clock (the link's caps are rates per second of it), within
// 10 %. While both shuffled, the link is divided as their shares divide
// it, within 10 %: the bytes their guests moved. Mutation: with the
// network throttle off (agent --net-mode none) the guests' taps do not divide
// the link by the shares, and both checks fail.
func (w *world) caseShuffle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	a := w.clusters["alice"]
	spec := a.Job("sort-alone", worker.Sort, 2, 1)
	smpAlone := w.sample(time.Second)
	alone, err := w.run(ctx, "alice", spec)
	aloneSamples := smpAlone.end()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.CheckOutput(spec, alone); err != nil {
		t.Error(err)
	}
	ph, err := phasesOf(alone)
	if err != nil {
		t.Fatal(err)
	}
	// What of each guest's CPU the shuffle kept busy, alone: a TCG guest's
	// CPU moves its bytes, and beside a rival on that CPU the shuffle has
	// the CPU its share gives it (run 66: bob's maps on a CPU where alice
	// shuffled took 2.5 s longer than a model of the shuffle on the link
	// alone gave).
	shuffleFrom := alone.Submitted.Add(seconds(ph.maps))
	shuffleTo := shuffleFrom.Add(seconds(ph.shuffle))
	cpuSecs := func(c counters) float64 { return c.cpu.Seconds() }
	shuffleCPU := (guestAmount(aloneSamples, a.Workers, shuffleTo, cpuSecs) - guestAmount(aloneSamples, a.Workers, shuffleFrom, cpuSecs)) /
		float64(len(a.Workers)) / ph.shuffle
	t.Logf("alice's sort alone: maps %.1f s, shuffle %.1f s (%.2f of each guest's CPU busy), merge and write %.1f s",
		ph.maps, ph.shuffle, shuffleCPU, ph.tail)

	q := w.cpuShares()
	smp := w.sample(time.Second)
	ra, rb := w.pairOf(t, "sort-shares", worker.Sort, 1, nil)
	samples := smp.end()
	t.Logf("timeline:\n%s", timeline(samples, w.vms(), ra.Submitted))
	job := func(user string) flow {
		s := map[string]float64{"cpu": q[user], "net": q[user]}
		return flow{phases: []phase{{"cpu", ph.maps, nil}, {"net", ph.shuffle, map[string]float64{"cpu": shuffleCPU}}, {"cpu", ph.tail, nil}}, shares: s}
	}
	end := finishes([]flow{job("alice"), job("bob")})
	want := end[1] / end[0]
	ta, tb := took(ra), took(rb)

	// The link's division while both shuffled: from the later of their
	// maps' ends to the first end of any of their reduces' shuffles. Each
	// guest's reduce fetches its part of the other guest's map output, so
	// until then each of the four guests sends; after it one of a user's
	// guests has nothing left to send, and the link rightly lends its
	// part to the guests still sending (run 63 measured alice's part at
	// 0.653 up to each job's last shuffle end).
	pa, errA := phasesOf(ra)
	pb, errB := phasesOf(rb)
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	from := maxTime(ra.Submitted.Add(seconds(pa.maps)), rb.Submitted.Add(seconds(pb.maps)))
	to := minTime(firstShuffleEnd(ra), firstShuffleEnd(rb))
	t.Logf("attempts (s from alice's submission):\n%s%s", attempts(ra, ra.Submitted), attempts(rb, ra.Submitted))
	moved := func(user string) float64 {
		vms := w.clusters[user].Workers
		return guestBytes(samples, vms, to) - guestBytes(samples, vms, from)
	}
	ma, mb := moved("alice"), moved("bob")
	part, partWant := ma/(ma+mb), q["alice"]/(q["alice"]+q["bob"])

	w.add(row{fmt.Sprintf("a: equal sorts (shuffle over the %d KiB/s link), alice:bob spending 3:1 (agent's shares %.3f/%.3f)",
		linkKiBps, q["alice"], q["bob"]), "net",
		fmt.Sprintf("bob/alice time %.3f (alone: maps %.1f s, shuffle %.1f s keeping %.2f of a CPU busy, merge %.1f s); alice's part of the link while both shuffled %.3f",
			want, ph.maps, ph.shuffle, shuffleCPU, ph.tail, partWant),
		fmt.Sprintf("%.3f (alice %.1f s, bob %.1f s, wall clock); %.3f over %.1f s (%.1f and %.1f MiB through their taps)",
			tb/ta, ta, tb, part, to.Sub(from).Seconds(), ma/(1<<20), mb/(1<<20))})
	within(t, "bob's sort's time over alice's (wall clock)", tb/ta, want)
	if to.Sub(from) < 2*time.Second {
		t.Errorf("the two sorts shuffled together for %v only: too short to see the link's division", to.Sub(from))
	} else if math.Abs(part/partWant-1) > tolerance {
		t.Errorf("alice's part of the link while both shuffled: measured %.3f, expected %.3f (tolerance %.0f %%)", part, partWant, 100*tolerance)
	}
}

// attempts lists a job's attempts, their times in seconds from t0.
func attempts(r yarnfacade.Result, t0 time.Time) string {
	at := func(t time.Time) float64 {
		if t.IsZero() {
			return math.NaN()
		}
		return t.Sub(t0).Seconds()
	}
	var b strings.Builder
	for _, a := range r.Attempts {
		fmt.Fprintf(&b, "  %s %s on %s: start %.1f, shuffle end %.1f, end %.1f, ok %v\n", r.Job, a.Task, a.VM, at(a.Start), at(a.ShuffleEnd), at(a.Finish), a.OK)
	}
	return b.String()
}

// firstShuffleEnd is when the first of a job's reduces ended its shuffle.
func firstShuffleEnd(r yarnfacade.Result) time.Time {
	var first time.Time
	for _, a := range r.Attempts {
		if a.OK && a.Reduce && (first.IsZero() || a.ShuffleEnd.Before(first)) {
			first = a.ShuffleEnd
		}
	}
	return first
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// guestBytes is what the guests vms had moved through their taps by t,
// both ways, in bytes, interpolated between the samples around it.
func guestBytes(samples []sample, vms []string, t time.Time) float64 {
	return guestAmount(samples, vms, t, func(c counters) float64 { return float64(c.rx + c.tx) })
}
