// Package workertest starts mrmarket's worker guests and their YARN facade
// for tests: a cluster of N workers, each with a generated input disk, whose
// control channels are attached to a facade serving the YARN REST shapes on
// a local address. Two kinds of workers, one API:
//
//   - Guests boots real TCG guests through `cluster create` (cluster.Spec
//     with Guest, or the CLI through Options.Create) on the local
//     libvirtd: the guest is built by .ci/guest.sh (what `make guest`
//     runs; idempotent, so always the worker's current code), the workers'
//     taps are on a bridge of the test's own (no uplink, no address: the
//     traffic stays among the guests), and the agent's throttles apply to
//     them as to any VM. Without libvirtd, QEMU or a kernel it fails in CI
//     and skips elsewhere.
//   - InProcess runs the same worker code as goroutines over files and
//     loopback TCP: the facade, the scheduling and the REST shapes in
//     seconds, with no VM.
//
// A test then submits jobs (Cluster.Job, Cluster.Run), reads their outputs
// from the workers' scratch disks (Cluster.Output) and their timings from
// the result or the REST shapes (Cluster.Monitor).
package workertest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/mrmarket/mrmarket/hadoopvm/cluster"
	"github.com/mrmarket/mrmarket/hadoopvm/worker"
	"github.com/mrmarket/mrmarket/hadoopvm/yarn"
	"github.com/mrmarket/mrmarket/hadoopvm/yarnfacade"
)

// Options describe a cluster of workers.
type Options struct {
	// Name is the cluster's (its VMs are Name-worker-i); default "wt"
	// and the test process's id, so that runs side by side do not meet.
	Name  string
	Owner string // default "alice"
	// Workers is how many (default 2).
	Workers int
	// Inputs are each worker's input disk, one after the other (a CPU-
	// bound word count and a shuffle-bound sort on the same guests);
	// worker i's seeds are each Seed+i. Default: WordCount, 2 splits of
	// 1 MiB.
	Inputs []worker.Input
	// Slots is a worker's task slots (default 2).
	Slots int
	// MemoryMiB and VCPUs size a guest (default 160 and 1); ScratchMiB
	// its scratch disk (default 256).
	MemoryMiB, VCPUs, ScratchMiB uint
	// Create creates the guests' cluster (default cluster.Connector.Create
	// on qemu:///system); a test passes one that runs the CLI's `cluster
	// create`.
	Create func(cluster.Spec) ([]cluster.Node, error)
	// Timeout bounds the guests' boot to their hello (default 3 min).
	Timeout time.Duration
}

func (o *Options) defaults() {
	if o.Name == "" {
		o.Name = fmt.Sprintf("wt%d", os.Getpid())
	}
	if o.Owner == "" {
		o.Owner = "alice"
	}
	if o.Workers == 0 {
		o.Workers = 2
	}
	if len(o.Inputs) == 0 {
		o.Inputs = []worker.Input{{Kind: worker.WordCount, Splits: 2, SplitBytes: 1 << 20, Seed: 1}}
	}
	if o.Slots == 0 {
		o.Slots = 2
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = 160
	}
	if o.VCPUs == 0 {
		o.VCPUs = 1
	}
	if o.ScratchMiB == 0 {
		o.ScratchMiB = 256
	}
	if o.Timeout == 0 {
		o.Timeout = 3 * time.Minute
	}
}

// Cluster is a set of workers and their facade.
type Cluster struct {
	Facade *yarnfacade.Facade
	// URL is the facade's REST address: the ResourceManager's and the
	// history server's.
	URL string
	// Workers are the workers' VM names, in order.
	Workers []string
	// Spec and Nodes are the guests' cluster (Guests only).
	Spec  cluster.Spec
	Nodes []cluster.Node
	// Bridge is the guests' bridge (Guests only).
	Bridge string

	opts    Options
	inputs  map[string]string // VM → input image
	scratch map[string]string // VM → scratch image
	conn    *libvirt.Connect  // Guests only
}

// Tap is a guest's tap on the bridge (Guests only): what the agent shapes.
func (c *Cluster) Tap(vm string) (string, error) {
	if c.conn == nil {
		return "", fmt.Errorf("workertest: %s is not a guest", vm)
	}
	d, err := c.conn.LookupDomainByName(vm)
	if err != nil {
		return "", err
	}
	defer d.Free()
	raw, err := d.GetXMLDesc(0)
	if err != nil {
		return "", err
	}
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(raw); err != nil {
		return "", err
	}
	for _, i := range dom.Devices.Interfaces {
		if i.Target != nil && i.Target.Dev != "" {
			return i.Target.Dev, nil
		}
	}
	return "", fmt.Errorf("workertest: %s has no tap", vm)
}

// inputsOf are a worker's inputs: the Options' with its seeds.
func (c *Cluster) inputsOf(vm string) []worker.Input {
	ins := slices.Clone(c.opts.Inputs)
	i := slices.Index(c.Workers, vm)
	for k := range ins {
		ins[k].Seed += uint64(i)
	}
	return ins
}

// Splits are the splits of a worker's first input of kind, where they are
// on its input disk.
func (c *Cluster) Splits(vm, kind string) []worker.Split {
	var off int64
	for _, in := range c.inputsOf(vm) {
		if in.Kind == kind {
			splits := in.SplitsOn(vm)
			for i := range splits {
				splits[i].Offset += off
			}
			return splits
		}
		off += in.Size()
	}
	return nil
}

// Input is the bytes of a worker's input disk.
func (c *Cluster) Input(vm string) ([]byte, error) { return os.ReadFile(c.inputs[vm]) }

// Inputs are the bytes of every worker's input disk, by VM.
func (c *Cluster) Inputs() (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, vm := range c.Workers {
		b, err := c.Input(vm)
		if err != nil {
			return nil, err
		}
		out[vm] = b
	}
	return out, nil
}

// Job is a job of kind over every worker's splits of that kind, named
// name, of the cluster's owner.
func (c *Cluster) Job(name, kind string, reduces int, slowStart float64) yarnfacade.JobSpec {
	spec := yarnfacade.JobSpec{Name: name, User: c.opts.Owner, Kind: kind, Reduces: reduces, SlowStart: slowStart}
	for _, vm := range c.Workers {
		spec.Splits = append(spec.Splits, c.Splits(vm, kind)...)
	}
	return spec
}

// Run submits a job and waits for its end.
func (c *Cluster) Run(ctx context.Context, spec yarnfacade.JobSpec) (yarnfacade.Result, error) {
	app, err := c.Facade.Submit(spec)
	if err != nil {
		return yarnfacade.Result{}, err
	}
	return c.Facade.Wait(ctx, app)
}

// Output reads each reduce's output from its worker's scratch disk.
func (c *Cluster) Output(res yarnfacade.Result) ([][]byte, error) {
	out := make([][]byte, len(res.Outputs))
	for i, o := range res.Outputs {
		f, err := os.Open(c.scratch[o.VM])
		if err != nil {
			return nil, fmt.Errorf("reduce %d's output on %q: %w", i, o.VM, err)
		}
		out[i] = make([]byte, o.Length)
		_, err = f.ReadAt(out[i], o.Offset)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("reduce %d's output on %s: %w", i, o.VM, err)
		}
	}
	return out, nil
}

// Monitor is a YARN monitor of the facade.
func (c *Cluster) Monitor() *yarn.Monitor { return &yarn.Monitor{RM: c.URL, History: c.URL} }

// serve serves the facade's REST shapes until the test ends.
func (c *Cluster) serve(t testing.TB) {
	srv := httptest.NewServer(c.Facade.Handler())
	t.Cleanup(srv.Close)
	c.URL = srv.URL
}

// writeInputs writes a worker's input image: its inputs one after the
// other.
func writeInputs(t testing.TB, path string, ins []worker.Input) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range ins {
		if err == nil {
			err = in.Write(f)
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// InProcess starts the workers as goroutines: each on an input image and
// a scratch file of its own, its data server on a loopback port, its
// control channel a pipe to the facade.
func InProcess(t testing.TB, o Options) *Cluster {
	t.Helper()
	o.defaults()
	c := &Cluster{Facade: yarnfacade.New(yarnfacade.Config{Logf: t.Logf}), opts: o, inputs: map[string]string{}, scratch: map[string]string{}}
	dir := t.TempDir()
	peers := map[string]string{}
	lns := map[string]net.Listener{}
	for i := range o.Workers {
		vm := fmt.Sprintf("%s-worker-%d", o.Name, i)
		c.Workers = append(c.Workers, vm)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		lns[vm], peers[vm] = ln, ln.Addr().String()
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// The workers' goroutines outlive the test (a guest's would too): they
	// stop logging to it when it ends.
	var logMu sync.Mutex
	ended := false
	t.Cleanup(func() {
		logMu.Lock()
		ended = true
		logMu.Unlock()
	})
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		if !ended {
			t.Logf(format, args...)
		}
	}
	for _, vm := range c.Workers {
		c.inputs[vm], c.scratch[vm] = filepath.Join(dir, vm+".img"), filepath.Join(dir, vm+".scratch")
		writeInputs(t, c.inputs[vm], c.inputsOf(vm))
		if err := os.WriteFile(c.scratch[vm], nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(c.scratch[vm], int64(o.ScratchMiB)<<20); err != nil {
			t.Fatal(err)
		}
		input, err := worker.OpenDisk(c.inputs[vm], false)
		if err != nil {
			t.Fatal(err)
		}
		scratch, err := worker.OpenDisk(c.scratch[vm], true)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { input.Close(); scratch.Close() })
		w := worker.New(worker.Config{VM: vm, Slots: o.Slots, Peers: peers}, input, scratch)
		w.Logf = logf
		go func() { _ = w.Serve(lns[vm]) }()
		guestEnd, hostEnd := net.Pipe()
		t.Cleanup(func() { guestEnd.Close() })
		go func() { _ = w.Run(ctx, guestEnd) }()
		c.Facade.Attach(vm, hostEnd)
	}
	t.Cleanup(c.Facade.Close) // before the workers' ends close: a worker lost at the end is no news
	c.serve(t)
	rctx, rcancel := context.WithTimeout(context.Background(), o.Timeout)
	defer rcancel()
	if err := c.Facade.Ready(rctx, c.Workers...); err != nil {
		t.Fatal(err)
	}
	return c
}

// QEMUURI is the libvirt the guests run on.
const QEMUURI = "qemu:///system"

// ImagesDir is where the guests' files go: libvirt's QEMU user reads
// there (a test's temporary directory it cannot).
const ImagesDir = "/var/lib/libvirt/images"

// missing fails in CI and skips elsewhere.
func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...) + " (run .ci/libvirt.sh as root: libvirtd, QEMU and the guest kernel)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// repoRoot is the module's root: the directory of go.mod above the test's.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// BuildGuest builds the guest with .ci/guest.sh into the images
// directory and returns that directory.
func BuildGuest(t testing.TB) string {
	t.Helper()
	out := filepath.Join(ImagesDir, "mrm-guest")
	if err := os.MkdirAll(out, 0o755); err != nil {
		missing(t, "guest directory: %v", err)
	}
	cmd := exec.Command("bash", filepath.Join(repoRoot(t), ".ci", "guest.sh"), out)
	cmd.Dir = repoRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		missing(t, "building the guest: %v\n%s", err, b)
	}
	return out
}

// Guests boots the workers as real guests through cluster create and
// attaches them to a facade.
func Guests(t testing.TB, o Options) *Cluster {
	t.Helper()
	o.defaults()
	conn, err := libvirt.NewConnect(QEMUURI)
	if err != nil {
		missing(t, "libvirtd not reachable at %s: %v", QEMUURI, err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := exec.LookPath("ip"); err != nil {
		missing(t, "no ip (iproute2) for the guests' bridge")
	}
	guest := BuildGuest(t)

	dir := filepath.Join(ImagesDir, o.Name)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, filepath.Join(dir, "seeds"), filepath.Join(dir, "inputs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bridge := bridgeName(o.Name)
	makeBridge(t, bridge)

	c := &Cluster{opts: o, Bridge: bridge, inputs: map[string]string{}, scratch: map[string]string{}, conn: conn}
	c.Spec = cluster.Spec{Name: o.Name, Owner: o.Owner, Workers: o.Workers, Hosts: []cluster.Host{{ID: "host-1", URI: QEMUURI}},
		Guest: guest, InputDir: filepath.Join(dir, "inputs"), SeedDir: filepath.Join(dir, "seeds"), ImagesDir: dir,
		Bridge: bridge, DomainType: "qemu", MemoryMiB: o.MemoryMiB, VCPUs: o.VCPUs, ScratchMiB: o.ScratchMiB, Slots: o.Slots}
	nodes, err := cluster.Plan(c.Spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		c.Workers = append(c.Workers, n.VM)
	}
	for _, vm := range c.Workers {
		c.inputs[vm], c.scratch[vm] = cluster.InputImage(c.Spec, vm), cluster.ScratchImage(c.Spec, vm)
		writeInputs(t, c.inputs[vm], c.inputsOf(vm))
	}

	connector := &cluster.Connector{Dial: func(string) (*libvirt.Connect, error) { return conn, nil }}
	create := o.Create
	if create == nil {
		create = connector.Create
	}
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			for _, vm := range c.Workers {
				if b, err := os.ReadFile(cluster.GuestFile(c.Spec, vm, "console.log")); err == nil {
					t.Logf("%s console:\n%s", vm, b)
				}
			}
		}
		if _, err := connector.Delete(o.Name, c.Spec.Hosts); err != nil {
			t.Logf("deleting the guests: %v", err)
		}
	})
	if c.Nodes, err = create(c.Spec); err != nil {
		t.Fatalf("cluster create: %v", err)
	}

	c.Facade = yarnfacade.New(yarnfacade.Config{Logf: t.Logf})
	t.Cleanup(c.Facade.Close)
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()
	for _, n := range c.Nodes {
		path, err := connector.ControlSocket(c.Spec.Hosts[0], n.VM)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Facade.AttachUnix(ctx, n.VM, path); err != nil {
			t.Fatal(err)
		}
	}
	c.serve(t)
	start := time.Now()
	if err := c.Facade.Ready(ctx, c.Workers...); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d guests up in %.1f s", len(c.Workers), time.Since(start).Seconds())
	return c
}

// bridgeName is a bridge name of at most 15 bytes for the cluster.
func bridgeName(cluster string) string {
	name := "mrb" + strings.TrimPrefix(cluster, "wt")
	if len(name) > 15 {
		name = name[:15]
	}
	return name
}

// makeBridge makes a bridge with no port but the guests' taps and no
// address, deleted when the test ends. Bridged frames skip iptables
// (nf_call_iptables 0): a host's firewall for routed traffic is not the
// guests' business.
func makeBridge(t testing.TB, name string) {
	t.Helper()
	ip := func(args ...string) error {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	_ = ip("link", "del", name) // a former run's
	if err := ip("link", "add", name, "type", "bridge"); err != nil {
		missing(t, "making the guests' bridge: %v", err)
	}
	t.Cleanup(func() { _ = ip("link", "del", name) })
	_ = ip("link", "set", name, "type", "bridge", "nf_call_iptables", "0")
	if err := ip("link", "set", name, "up"); err != nil {
		t.Fatal(err)
	}
}

// CheckOutput checks a finished job's outputs against its splits
// computed the plainest way: a word count's against a count of their
// words (every word in one reduce's output, with its count, each output
// in byte order), a sort's against their records sorted (the reduces'
// outputs one after the other).
func (c *Cluster) CheckOutput(spec yarnfacade.JobSpec, res yarnfacade.Result) error {
	inputs, err := c.Inputs()
	if err != nil {
		return err
	}
	outs, err := c.Output(res)
	if err != nil {
		return err
	}
	splits := SplitBytes(inputs, spec.Splits)
	switch spec.Kind {
	case worker.WordCount:
		return checkWordCount(WordCounts(splits...), outs)
	case worker.Sort:
		var recs [][]byte
		for _, split := range splits {
			recs = append(recs, records(split)...)
		}
		slices.SortFunc(recs, bytes.Compare)
		if got := bytes.Join(outs, nil); !bytes.Equal(got, bytes.Join(recs, nil)) {
			return fmt.Errorf("the sort's output (%d bytes) is not its %d records in order", len(got), len(recs))
		}
		return nil
	}
	return fmt.Errorf("workertest: no check for kind %q", spec.Kind)
}

// WordCounts counts the words of texts the plainest way.
func WordCounts(texts ...[]byte) map[string]int64 {
	counts := map[string]int64{}
	for _, b := range texts {
		for _, w := range strings.Fields(string(b)) {
			counts[w]++
		}
	}
	return counts
}

// checkWordCount checks a word count's outputs, one a reduce, against
// want.
func checkWordCount(want map[string]int64, outs [][]byte) error {
	got := map[string]int64{}
	for r, out := range outs {
		var last string
		for line := range strings.Lines(string(out)) {
			w, c, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
			n, err := strconv.ParseInt(c, 10, 64)
			if _, dup := got[w]; !ok || err != nil || dup || w <= last {
				return fmt.Errorf("reduce %d's output line %q: malformed, out of order, or a word counted twice", r, line)
			}
			got[w], last = n, w
		}
	}
	for w, n := range want {
		if got[w] != n {
			return fmt.Errorf("%q counted %d, want %d", w, got[w], n)
		}
	}
	if len(got) != len(want) {
		return fmt.Errorf("%d words counted, want %d", len(got), len(want))
	}
	return nil
}

// records are a split's records, as a sort's map reads them (up to the
// padding).
func records(split []byte) [][]byte {
	var out [][]byte
	for r := 0; r+worker.RecordSize <= len(split) && split[r] != '\n'; r += worker.RecordSize {
		out = append(out, split[r:r+worker.RecordSize])
	}
	return out
}

// SplitBytes is the bytes of splits out of the workers' inputs (vm →
// its input disk's bytes).
func SplitBytes(inputs map[string][]byte, splits []worker.Split) [][]byte {
	out := make([][]byte, len(splits))
	for i, s := range splits {
		out[i] = inputs[s.VM][s.Offset : s.Offset+s.Length]
	}
	return out
}
