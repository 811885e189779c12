package workertest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mrmarket/mrmarket/agent"
	"github.com/mrmarket/mrmarket/cli"
	"github.com/mrmarket/mrmarket/hadoopvm/cluster"
	"github.com/mrmarket/mrmarket/hadoopvm/worker"
	"github.com/mrmarket/mrmarket/hadoopvm/workertest"
	"github.com/mrmarket/mrmarket/hadoopvm/yarn"
	"github.com/mrmarket/mrmarket/hadoopvm/yarnfacade"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/market"
)

// mrmarket runs the CLI in the test's process.
func mrmarket(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := cli.Main(append([]string{"mrmarket"}, args...), &out, &errb); code != 0 {
		return out.String(), fmt.Errorf("mrmarket %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	return out.String(), nil
}

// cliCreate creates the guests' cluster with `mrmarket cluster create`.
func cliCreate(t *testing.T) func(cluster.Spec) ([]cluster.Node, error) {
	return func(s cluster.Spec) ([]cluster.Node, error) {
		u := func(n uint) string { return strconv.FormatUint(uint64(n), 10) }
		args := []string{"cluster", "create", "--name", s.Name, "--owner", s.Owner, "--workers", strconv.Itoa(s.Workers),
			"--host", s.Hosts[0].ID + "=" + s.Hosts[0].URI, "--guest", s.Guest, "--input-dir", s.InputDir, "--seed-dir", s.SeedDir,
			"--images-dir", s.ImagesDir, "--bridge", s.Bridge, "--domain-type", s.DomainType, "--memory", u(s.MemoryMiB),
			"--vcpus", u(s.VCPUs), "--scratch-mib", u(s.ScratchMiB), "--slots", strconv.Itoa(s.Slots)}
		out, err := mrmarket(t, args...)
		t.Logf("$ mrmarket %s\n%s", strings.Join(args, " "), out)
		if err != nil {
			return nil, err
		}
		members, err := mrmarket(t, "cluster", "list", "--host", s.Hosts[0].ID+"="+s.Hosts[0].URI, "--json")
		if err != nil {
			return nil, err
		}
		var ms []cluster.Member
		if err := json.Unmarshal([]byte(members), &ms); err != nil {
			return nil, err
		}
		nodes, err := cluster.Plan(s)
		for _, n := range nodes {
			if !slices.ContainsFunc(ms, func(m cluster.Member) bool { return m.VM == n.VM && m.Owner == s.Owner && m.Running }) {
				return nil, fmt.Errorf("cluster list does not show %s running as %s's: %+v", n.VM, s.Owner, ms)
			}
		}
		return nodes, err
	}
}

// TestJobsOnRealGuests boots two worker guests through `mrmarket cluster
// create --guest --domain-type qemu` and runs a word count on them: the
// maps read their splits from the guests' input disks, the reduces fetch
// their partitions from both guests over the bridge, and the counts are a
// plain count of the inputs'. `mrmarket jobs watch --yarn` follows the job
// through the facade into a market's broker until it is done, and the YARN
// monitor reads its ARIA profile from the facade's history server. A sort
// on the same guests then shuffles all of its input between them.
func TestJobsOnRealGuests(t *testing.T) {
	wall := time.Now()
	split := int64(4 << 20)
	c := workertest.Guests(t, workertest.Options{Create: cliCreate(t), Inputs: []worker.Input{
		{Kind: worker.WordCount, Splits: 4, SplitBytes: split, Seed: 11}, {Kind: worker.Sort, Splits: 2, SplitBytes: 2 << 20, Seed: 12}}})
	booted := time.Since(wall)

	// A market whose host has the guests as alice's VMs, for the watch to
	// report to; its clock is the test's, so it moves only when ticked.
	clock := time.Date(2026, 5, 1, 8, 0, 0, 0, time.UTC)
	var vms []agent.VM
	for _, vm := range c.Workers {
		vms = append(vms, agent.VM{ID: vm, Owner: "alice"})
	}
	m, err := market.Start(context.Background(), market.Config{Dir: t.TempDir(), NATSPort: -1, Now: func() time.Time { return clock },
		Hosts: []market.HostSpec{{ID: "host-1", CPUs: 2, VMs: vms}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	t.Setenv("MRM_CREDS", string(m.Keys()))
	n := "--nats=" + m.URL
	if _, err := mrmarket(t, "bank", "grant", n, "--user", "alice", "--amount", "100"); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(10 * time.Second)
	if err := m.Tick(context.Background(), clock); err != nil {
		t.Fatal(err)
	}
	jobFile := filepath.Join(t.TempDir(), "wc.json")
	vmList, _ := json.Marshal(c.Workers)
	if err := os.WriteFile(jobFile, fmt.Appendf(nil, `{"name": "wc", "vms": %s, "maps": 8, "reduces": 2, "map_slots": 4, "reduce_slots": 4,
		"profile": {"map_avg": 2, "map_max": 3, "reduce_avg": 1, "reduce_max": 2}}`, vmList), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := mrmarket(t, "submit", n, "--user", "alice", "--job", jobFile, "--budget", "50", "--id", "job-wc"); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("$ mrmarket submit --user alice --job wc.json --budget 50\n%s", out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	jobStart := time.Now()
	app, err := c.Facade.Submit(c.Job("wc", worker.WordCount, 2, 0.5))
	if err != nil {
		t.Fatal(err)
	}
	watchArgs := []string{"jobs", "watch", n, "--user", "alice", "--job", jobFile, "--yarn", c.URL, "--history", c.URL, "--every", "1s"}
	var wg sync.WaitGroup
	var transcript string
	var watchErr error
	wg.Go(func() { transcript, watchErr = mrmarket(t, watchArgs...) })

	// While the maps run, the monitor sees the guests busy.
	mon := c.Monitor()
	testpoll.CheckFor(t, time.Minute, 100*time.Millisecond, func() error {
		snap, err := mon.Snapshot(ctx)
		if err != nil {
			return err
		}
		for _, nd := range snap.Nodes {
			if nd.Running == 0 {
				return fmt.Errorf("snapshot %+v: a guest idle", snap)
			}
		}
		t.Logf("mid-job snapshot: %+v", snap)
		return nil
	})
	res, err := c.Facade.Wait(ctx, app)
	jobTime := time.Since(jobStart)
	if err != nil || !res.Succeeded {
		t.Fatalf("word count: %+v %v", res, err)
	}
	wg.Wait()
	t.Logf("$ mrmarket jobs watch --user alice --job wc.json --yarn %s --history %s --every 1s\n%s", c.URL, c.URL, transcript)
	if watchErr != nil || !strings.Contains(transcript, "job-wc wc: done, 100% (8/8 maps, 2/2 reduces)") {
		t.Fatalf("jobs watch: %v", watchErr)
	}

	if err := c.CheckOutput(c.Job("wc", worker.WordCount, 2, 0.5), res); err != nil {
		t.Error(err)
	}
	shuffledAcross := 0
	for _, a := range res.Attempts {
		if a.Reduce {
			for _, mp := range res.Attempts {
				if !mp.Reduce && mp.OK && mp.VM != a.VM {
					shuffledAcross++
				}
			}
		}
		t.Logf("%s on %s: %.2f s %s", a.ID, a.VM, a.Finish.Sub(a.Start).Seconds(), phases(a.Start, a.ShuffleEnd, a.MergeEnd, a.Finish))
	}
	if shuffledAcross == 0 {
		t.Error("no reduce fetched from the other guest")
	}

	// The ARIA profile, from the facade's history server.
	prof, err := mon.ProfileJob(ctx, res.Job)
	if err != nil {
		t.Fatal(err)
	}
	jobSecs := res.Finished.Sub(res.Started).Seconds()
	t.Logf("ARIA profile of %s (%.1f s): %+v", res.Job, jobSecs, prof)
	if prof.Maps != 8 || prof.Reduces != 2 || prof.MapMin <= 0 || prof.MapAvg < prof.MapMin || prof.MapMax < prof.MapAvg || prof.MapMax > jobSecs ||
		prof.ReduceAvg <= 0 || prof.ReduceMax > jobSecs || prof.Sh1Max > jobSecs || prof.ShTypAvg <= 0 || prof.ShTypMax > jobSecs ||
		prof.InputPerMap != split || prof.MapSelectivity <= 0 || prof.MapSelectivity >= 1 || prof.ReduceSelectivity <= 0 || prof.ReduceSelectivity >= 1 {
		t.Errorf("the profile's phase times are not those of a %.1f s job of 8 maps and 2 reduces", jobSecs)
	}

	// A sort moves all of its input through the shuffle, here on links
	// shaped into each guest at shuffleRate: the fetches from the other
	// guest crawl, and their progress still arrives on the control channel.
	const shuffleRate = 512 << 10
	for _, vm := range c.Workers {
		tap, err := c.Tap(vm)
		if err != nil {
			t.Fatal(err)
		}
		shape(t, tap, shuffleRate)
	}
	sortStart := time.Now()
	sortSpec := c.Job("sort", worker.Sort, 2, 1)
	sortApp, err := c.Facade.Submit(sortSpec)
	if err != nil {
		t.Fatal(err)
	}
	var seen time.Time // when a reduce was seen part way through its shuffle
	testpoll.CheckFor(t, 2*time.Minute, 100*time.Millisecond, func() error {
		for r := range 2 {
			atts, err := mon.Attempts(ctx, sortApp, yarn.JobID(sortApp), yarn.TaskID(sortApp, yarn.TypeReduce, r))
			if err != nil && !errors.Is(err, yarn.ErrNotFound) {
				return err
			}
			for _, a := range atts {
				if a.State == yarn.StateRunning && a.Progress > 0 && a.Progress < 100.0/3-1e-9 {
					seen = time.Now()
					return nil
				}
			}
		}
		return errors.New("no reduce seen part way through its shuffle")
	})
	sres, err := c.Facade.Wait(ctx, sortApp)
	if err != nil || !sres.Succeeded {
		t.Fatalf("sort: %+v %v", sres, err)
	}
	for _, a := range sres.Attempts {
		t.Logf("%s on %s: %.2f s %s, %d KiB shuffled", a.ID, a.VM, a.Finish.Sub(a.Start).Seconds(), phases(a.Start, a.ShuffleEnd, a.MergeEnd, a.Finish),
			a.Counters.ShuffleBytes>>10)
		// Half of a reduce's input is on the other guest.
		if a.Reduce && a.ShuffleEnd.Sub(a.Start).Seconds() < float64(a.Counters.ShuffleBytes)/2/shuffleRate/2 {
			t.Errorf("%s shuffled %d KiB in %.2f s: the shaping did not hold", a.ID, a.Counters.ShuffleBytes>>10, a.ShuffleEnd.Sub(a.Start).Seconds())
		}
	}
	if last := slices.MaxFunc(sres.Attempts, func(x, y yarnfacade.Attempt) int { return x.ShuffleEnd.Compare(y.ShuffleEnd) }); !last.ShuffleEnd.After(seen) {
		t.Errorf("the reduces' progress was seen only after their shuffles (%v, last shuffle end %v)", seen, last.ShuffleEnd)
	}
	if err := c.CheckOutput(sortSpec, sres); err != nil {
		t.Error(err)
	}
	t.Logf("wall times: boot %.1f s, word count %.1f s (%d MiB), sort %.1f s (%d MiB shuffled at %d KiB/s into each guest), test %.1f s",
		booted.Seconds(), jobTime.Seconds(), res.MapCounters.BytesRead>>20, time.Since(sortStart).Seconds(),
		sres.ReduceCounters.ShuffleBytes>>20, shuffleRate>>10, time.Since(wall).Seconds())
}

// shape caps what enters a guest through its tap at rate bytes/s (HTB, as
// the agent's network throttle does) until the test ends.
func shape(t *testing.T, tap string, rate int) {
	t.Helper()
	for _, args := range [][]string{
		{"qdisc", "replace", "dev", tap, "root", "handle", "1:", "htb", "default", "1"},
		{"class", "add", "dev", tap, "parent", "1:", "classid", "1:1", "htb", "rate", fmt.Sprintf("%dbps", rate), "burst", "32k"},
	} {
		if out, err := exec.Command("tc", args...).CombinedOutput(); err != nil {
			t.Fatalf("tc %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() { _ = exec.Command("tc", "qdisc", "del", "dev", tap, "root").Run() })
}

// phases shows a reduce's shuffle, merge and reduce times.
func phases(start, shuffle, merge, end time.Time) string {
	if shuffle.IsZero() {
		return ""
	}
	return fmt.Sprintf("(shuffle %.2f, merge %.2f, reduce %.2f)", shuffle.Sub(start).Seconds(), merge.Sub(shuffle).Seconds(), end.Sub(merge).Seconds())
}
