package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"libvirt.org/go/libvirt"

	"github.com/mrmarket/mrmarket/cli"
	"github.com/mrmarket/mrmarket/hadoopvm/cluster"
	"github.com/mrmarket/mrmarket/hadoopvm/worker"
	"github.com/mrmarket/mrmarket/hadoopvm/workertest"
	"github.com/mrmarket/mrmarket/hadoopvm/yarnfacade"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/retry"
	"github.com/mrmarket/mrmarket/internal/testpoll"
	"github.com/mrmarket/mrmarket/internal/testproc"
	"github.com/mrmarket/mrmarket/internal/wire"
	"github.com/mrmarket/mrmarket/market"
)

// host is the one hypervisor's id in the market.
const host = "host-1"

// world is the market of the end-to-end tests: the bank, the broker and
// NATS in this process (market.Start, as `up` runs them), the libvirt
// agent of the host as a process of its own (`mrmarket agent --libvirt`),
// and one cluster of worker guests per user, each with its YARN facade.
type world struct {
	t     *testing.T
	m     *market.Market
	dir   string
	creds string
	bin   string
	agent *testproc.Proc
	conn  *libvirt.Connect
	// diskConn is the samples' connection for disk calls (diskBytes).
	diskConn *libvirt.Connect
	// clusters are the users' clusters, by user.
	clusters map[string]*workertest.Cluster
	// stages are alice's workflow's guests, a cluster of one worker per
	// stage: each stage's job, its reduce included, runs on its own VM, so
	// that stage priority's money lands where the stage computes.
	stages []*workertest.Cluster
	// cpus pins worker i of every cluster to host CPU cpus[i].
	cpus []int
	// pinned is the host CPU each guest's vCPU is pinned to (pin).
	pinned map[string]int
	// taps are the guests' taps, by VM.
	taps map[string]string
	// diskKiBps is the speed of the device under the guests' disks, as the
	// agent is told it (diskSpeed).
	diskKiBps uint
	// asking are the domains whose disk counters a sample still waits on.
	diskMu sync.Mutex
	asking map[string]bool
	// all samples the whole run.
	all *sampler
	// samplers are the samplers running, which mark samples on.
	smpMu    sync.Mutex
	samplers map[*sampler]bool
	mu       sync.Mutex
	rows     []row
}

// row is one line of the suite's report: a case, the resource it
// measures, what the model predicts and what was measured.
type row struct {
	Case, Resource, Expected, Measured string
}

// need fails in CI and skips elsewhere.
func need(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// mrmarket runs the CLI in the test's process (the users' commands).
func (w *world) mrmarket(args ...string) (string, error) {
	var out, errb bytes.Buffer
	if code := cli.Main(append([]string{"mrmarket"}, args...), &out, &errb); code != 0 {
		return out.String(), &cliError{args: args, code: code, stderr: errb.String()}
	}
	return out.String(), nil
}

// cliError is a command's failure, with its exit code.
type cliError struct {
	args   []string
	code   int
	stderr string
}

func (e *cliError) Error() string {
	return fmt.Sprintf("mrmarket %s: exit %d: %s", strings.Join(e.args, " "), e.code, e.stderr)
}

// cliRetry is how a command the market did not answer in time is asked
// again: on a loaded machine the broker may take longer than the CLI
// waits. Only commands that are safe to repeat are (reads, and requests
// carrying their idempotency id).
var cliRetry = retry.Options{InitialBackoff: time.Second, Multiplier: 2, MaxBackoff: 8 * time.Second, Jitter: 0.2, MaxTries: 5}

// exitUnavailable is the CLI's exit code when the market did not answer.
const exitUnavailable = 4

// repeatable: the command reads, names its request's id, or cannot apply
// twice (a stage start moves plans forward only).
func repeatable(args []string) bool {
	switch args[0] {
	case "plans", "balance", "quote", "jobs", "vms", "price", "statement", "stages":
		return true
	}
	return slices.Contains(args, "--id") && (!slices.Contains(args, "--more") || slices.Contains(args, "--adjust-id"))
}

// try runs a command, asking again while the market is unavailable and
// the command is repeatable.
func (w *world) try(args ...string) (string, error) {
	var out string
	err := retry.Do(context.Background(), cliRetry, func(err error) bool {
		var ce *cliError
		return repeatable(args) && errors.As(err, &ce) && ce.code == exitUnavailable
	}, func(context.Context) error {
		var err error
		out, err = w.mrmarket(args...)
		return err
	})
	return out, err
}

// must runs a command that must succeed, logging it.
func (w *world) must(t testing.TB, args ...string) string {
	t.Helper()
	out, err := w.try(args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("$ mrmarket %s\n%s", strings.Join(args, " "), out)
	return out
}

// mustJSON runs a command with --json and decodes its answer.
func mustJSON[T any](t testing.TB, w *world, args ...string) T {
	t.Helper()
	var v T
	out, err := w.try(append(args, "--json")...)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("mrmarket %s --json: %v\n%s", strings.Join(args, " "), err, out)
	}
	return v
}

// newWorld starts the market, boots the users' clusters (each of two
// workers on inputs) and the first user's workflow's guests (one cluster
// of one worker on stageInput per stage), and starts the host's agent.
func newWorld(t *testing.T, inputs []worker.Input, stageInput worker.Input, stages int, users ...string) *world {
	if os.Getenv("MRM_E2E") == "" {
		t.Skip("the end-to-end suite boots real guests for minutes: run it with `make e2e` (MRM_E2E=1)")
	}
	conn, err := libvirt.NewConnect(workertest.QEMUURI)
	if err != nil {
		need(t, "libvirtd not reachable at %s: %v (run .ci/libvirt.sh as root)", workertest.QEMUURI, err)
	}
	t.Cleanup(func() { conn.Close() })
	// The samples' disk calls on a connection of their own, as the agent's
	// (agent/virt's onQEMUConn): one stuck on a starved QEMU holds other
	// calls of its connection, the samples' CPU times among them.
	diskConn, err := libvirt.NewConnect(workertest.QEMUURI)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { diskConn.Close() })
	w := &world{t: t, conn: conn, diskConn: diskConn, clusters: map[string]*workertest.Cluster{}, taps: map[string]string{}, pinned: map[string]int{}, asking: map[string]bool{}, bin: testproc.Binary(t),
		samplers: map[*sampler]bool{}}
	w.waitAlone()

	dir, err := os.MkdirTemp("", "mrm-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("MRM_E2E_KEEP") != "" {
		t.Logf("the suite's directory (the agent's log, the market's stores) is kept: %s", dir)
	} else {
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	w.dir, w.creds = dir, filepath.Join(dir, "creds")
	// The market's log beside the agent's: a slow bid or capture shows in
	// both.
	logFile, err := os.Create(filepath.Join(dir, "market.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logFile.Close() })
	logger, err := obs.NewLogger(logFile, "info", "text")
	if err != nil {
		t.Fatal(err)
	}
	m, err := market.Start(context.Background(), market.Config{Dir: filepath.Join(dir, "market"), NATSHost: "127.0.0.1", NATSPort: -1, Users: users,
		Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	w.m = m
	w.creds = filepath.Join(dir, "market", "creds")
	t.Setenv("MRM_NATS_URL", m.URL)
	t.Setenv("MRM_CREDS", w.creds)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go m.Run(ctx)

	for _, u := range users {
		w.must(t, "bank", "grant", "--user", u, "--amount", "1000")
	}
	w.must(t, "bank", "principal", "add", "--name", host, "--role", wire.RoleAgent)

	// Worker i of every cluster on host CPU i: each CPU is contested by
	// one guest of each user.
	for i := range runtime.NumCPU() {
		w.cpus = append(w.cpus, i)
	}
	boot := func(name, owner string, workers, first int, inputs []worker.Input) *workertest.Cluster {
		c := workertest.Guests(t, workertest.Options{Name: name, Owner: owner, Workers: workers, Inputs: inputs, Slots: 2, ScratchMiB: 2048, Create: w.create})
		for k, vm := range c.Workers {
			w.pin(vm, w.cpus[(first+k)%len(w.cpus)])
			if w.taps[vm], err = c.Tap(vm); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
	for i, u := range users {
		w.clusters[u] = boot(fmt.Sprintf("e2%c%d", 'a'+i, os.Getpid()%100000), u, 2, 0, inputs)
	}
	// Stage k's guest on CPU k (modulo): each stage contested by one of the
	// second user's workers.
	for k := range stages {
		w.stages = append(w.stages, boot(fmt.Sprintf("e2s%d%d", k, os.Getpid()%100000), users[0], 1, k, []worker.Input{stageInput}))
	}
	w.diskKiBps = w.diskSpeed()
	w.startAgent()
	return w
}

// diskSpeed is what the device under the guests' disks reads (KiB/s):
// each user's first worker's input image read whole, both at once, in the
// 1 MiB direct reads the guests' virtio disks make. The agent is told it
// (--disk-kibps), as an operator states a disk's speed measured with fio,
// so its disk caps divide the device rather than an estimate from what
// the guests move — which their CPUs hold at a hundredth of it, and caps
// planned near it would slow their CPU-bound jobs (docs/E2E.md).
func (w *world) diskSpeed() uint {
	var paths []string
	for _, u := range slices.Sorted(maps.Keys(w.clusters)) {
		c := w.clusters[u]
		paths = append(paths, cluster.InputImage(c.Spec, c.Workers[0]))
	}
	read := make([]int64, len(paths))
	errs := make([]error, len(paths))
	var wg sync.WaitGroup
	start := time.Now()
	for i, p := range paths {
		wg.Go(func() {
			d, err := worker.OpenDisk(p, false)
			if err != nil {
				errs[i] = err
				return
			}
			defer d.Close()
			if !d.Direct {
				errs[i] = fmt.Errorf("%s: its file system refuses direct I/O, so the page cache would be measured", p)
				return
			}
			errs[i] = d.ReadAt(0, d.Size(), func(b []byte) error { read[i] += int64(len(b)); return nil })
		})
	}
	wg.Wait()
	took := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		w.t.Fatalf("measuring the guests' disk device: %v", err)
	}
	var total int64
	for _, n := range read {
		total += n
	}
	kibps := uint(float64(total) / 1024 / took.Seconds())
	w.t.Logf("the guests' disk device read %d MiB in %s with %d direct readers: %d MiB/s, the agent's --disk-kibps", total>>20, took.Round(time.Millisecond), len(paths), kibps>>10)
	return kibps
}

// create creates a cluster with `mrmarket cluster create`.
func (w *world) create(s cluster.Spec) ([]cluster.Node, error) {
	u := func(n uint) string { return fmt.Sprint(n) }
	args := []string{"cluster", "create", "--name", s.Name, "--owner", s.Owner, "--workers", fmt.Sprint(s.Workers),
		"--host", s.Hosts[0].ID + "=" + s.Hosts[0].URI, "--guest", s.Guest, "--input-dir", s.InputDir, "--seed-dir", s.SeedDir,
		"--images-dir", s.ImagesDir, "--bridge", s.Bridge, "--domain-type", s.DomainType, "--memory", u(s.MemoryMiB),
		"--vcpus", u(s.VCPUs), "--scratch-mib", u(s.ScratchMiB), "--slots", fmt.Sprint(s.Slots)}
	var out, errb bytes.Buffer
	if code := cli.Main(append([]string{"mrmarket"}, args...), &out, &errb); code != 0 {
		return nil, fmt.Errorf("mrmarket %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	w.t.Logf("$ mrmarket %s\n%s", strings.Join(args, " "), out.String())
	return cluster.Plan(s)
}

// pin pins a guest's vCPU to one host CPU.
func (w *world) pin(vm string, cpu int) {
	w.t.Helper()
	d, err := w.conn.LookupDomainByName(vm)
	if err != nil {
		w.t.Fatal(err)
	}
	defer d.Free()
	cpumap := make([]bool, runtime.NumCPU())
	cpumap[cpu] = true
	if err := d.PinVcpuFlags(0, cpumap, libvirt.DOMAIN_AFFECT_LIVE); err != nil {
		w.t.Fatalf("pinning %s to CPU %d: %v", vm, cpu, err)
	}
	w.pinned[vm] = cpu
}

// waitAlone waits until no other test's managed guests run on this
// libvirt: the agent governs every domain that names an owner, and another
// test's agent would govern these guests.
func (w *world) waitAlone() {
	err := testpoll.Wait(10*time.Minute, 5*time.Second, func() error {
		doms, err := w.conn.ListAllDomains(libvirt.CONNECT_LIST_DOMAINS_ACTIVE)
		if err != nil {
			return err
		}
		var others []string
		for _, d := range doms {
			if _, err := d.GetMetadata(libvirt.DOMAIN_METADATA_ELEMENT, "https://mrmarket.dev/xmlns/vm/1", libvirt.DOMAIN_AFFECT_LIVE); err == nil {
				name, _ := d.GetName()
				others = append(others, name)
			}
			d.Free()
		}
		if len(others) > 0 {
			return fmt.Errorf("other managed guests run on %s: %v", workertest.QEMUURI, others)
		}
		return nil
	})
	if err != nil {
		w.t.Fatalf("%v: the measurements need the host's guests to themselves", err)
	}
}

// startAgent starts the host's agent.
func (w *world) startAgent() {
	w.agent = &testproc.Proc{Name: "agent", Bin: w.bin, Ready: "mrmarket agent " + host, Log: filepath.Join(w.dir, "agent.log"),
		Args: []string{"agent", "--host", host, "--libvirt", workertest.QEMUURI, "--nats", w.m.URL, "--creds", w.creds,
			"--capacity", fmt.Sprint(runtime.NumCPU()), "--tick", "1s", "--state", filepath.Join(w.dir, "agent.json"), "--http", "",
			"--log-level", "debug", // idle VMs and their waking, in agent.log
			"--link-kibps", fmt.Sprint(linkKiBps), "--disk-kibps", fmt.Sprint(w.diskKiBps)}}
	w.t.Cleanup(w.agent.Stop)
	w.agent.Start(w.t)
	// The broker knows every guest.
	testpoll.CheckFor(w.t, time.Minute, 200*time.Millisecond, func() error {
		vms := w.m.Broker.VMs(&wire.VMsRequest{})
		for _, vm := range w.guests() {
			if !slices.ContainsFunc(vms.VMs, func(v wire.HostVM) bool { return v.VM == vm }) {
				return fmt.Errorf("the broker does not know %s yet", vm)
			}
		}
		return nil
	})
}

// linkKiBps is the guests' link, each direction: the network the agent
// divides.
const linkKiBps = 2048

// shares are the agent's shares of the VMs, as the broker last heard, with
// the time of the host state they are from.
func (w *world) shares() map[string]wire.HostVM {
	out := map[string]wire.HostVM{}
	for _, v := range w.m.Broker.VMs(&wire.VMsRequest{}).VMs {
		out[v.VM] = v
	}
	return out
}

// run submits a job to user's cluster and waits for it: an error unless
// it succeeded.
func (w *world) run(ctx context.Context, user string, spec yarnfacade.JobSpec) (yarnfacade.Result, error) {
	res, err := w.clusters[user].Run(ctx, spec)
	w.mark()
	if err == nil && !res.Succeeded {
		err = fmt.Errorf("%s's %s failed: %s", user, spec.Name, res.Diagnostics)
	}
	return res, err
}

// vms are every user's workers, alice's first.
func (w *world) vms() []string {
	var out []string
	for _, u := range slices.Sorted(maps.Keys(w.clusters)) {
		out = append(out, w.clusters[u].Workers...)
	}
	return out
}

// guests are every guest of the world: the users' workers, then the
// workflow's stages.
func (w *world) guests() []string { return append(w.vms(), w.stageVMs()...) }

// stageVMs are the workflow's guests, a stage's each, in order.
func (w *world) stageVMs() []string {
	var out []string
	for _, c := range w.stages {
		out = append(out, c.Workers...)
	}
	return out
}

// add adds a row to the suite's report.
func (w *world) add(r row) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rows = append(w.rows, r)
}

// report logs the suite's table: each case, what it measures, expected
// and measured, and the suite's wall time.
func (w *world) report(wall time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tRESOURCE\tEXPECTED\tMEASURED")
	for _, r := range w.rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Case, r.Resource, r.Expected, r.Measured)
	}
	tw.Flush()
	w.t.Logf("end-to-end report (wall time %.0f s):\n%s", wall.Seconds(), b.String())
}
