package e2e

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mrmarket/mrmarket/agent/virt"
	"github.com/mrmarket/mrmarket/hadoopvm/workertest"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// sample is what the guests did and got at one moment: the agent's view
// (share, caps, idle) as the broker last heard it, and libvirt's counters
// (CPU time, disk and network bytes).
type sample struct {
	at  time.Time
	vms map[string]wire.HostVM
	cnt map[string]counters
}

// setAt is when the agent set what the sample shows: the time of the host
// state it is from (a tick's), at most the sample's. The broker hears a
// state as its tick ends, and a tick held by a slow call ends seconds
// after it set the shares and charged the rates; taken at the sample's
// time, a change would reach the model that late. (The suite's guests
// are all on one host: one state.)
func (s sample) setAt() time.Time {
	var t time.Time
	for _, v := range s.vms {
		if v.Updated.After(t) {
			t = v.Updated
		}
	}
	if t.IsZero() || t.After(s.at) {
		return s.at
	}
	return t
}

// counters are a domain's cumulative use.
type counters struct {
	cpu          time.Duration // the whole domain's: its vCPUs and QEMU's other threads
	vcpu         time.Duration // its vCPUs', on the host CPU they are pinned to
	vwait        time.Duration // its vCPUs' time runnable but waiting for a CPU
	weight       string        // its cgroup's CPU weight as the kernel holds it (domain/vcpu0/emulator)
	perCPU       string        // its group's weight on each CPU, as the scheduler splits it (schedWeights)
	disk, rx, tx int64
}

// sampler samples the world every period until stopped.
type sampler struct {
	w       *world
	mu      sync.Mutex
	samples []sample
	stop    chan struct{}
	done    chan struct{}
}

// sample starts a sampler. Besides its period it samples whenever a job
// ends (mark): the jobs' CPU clock is read at their ends, not interpolated
// over a period that a loaded host's libvirt stretches to seconds.
func (w *world) sample(period time.Duration) *sampler {
	s := &sampler{w: w, stop: make(chan struct{}), done: make(chan struct{})}
	w.smpMu.Lock()
	w.samplers[s] = true
	w.smpMu.Unlock()
	go func() {
		defer close(s.done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			s.take()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) take() {
	smp := sample{at: time.Now(), vms: s.w.shares(), cnt: map[string]counters{}}
	s.mu.Lock()
	var last map[string]counters
	if n := len(s.samples); n > 0 {
		last = s.samples[n-1].cnt
	}
	s.mu.Unlock()
	guests := s.w.guests()
	// First what the host reads without asking the guests' QEMU (CPU
	// time, the taps' bytes), all at the sample's moment: the jobs' CPU
	// clock is read from these. Then the disks' bytes, which libvirt asks
	// each QEMU for under the domain's job: with the jobs' disks busy one
	// such call took up to 16 s (docs/E2E.md), and the CPU times read
	// after it were of a later moment than the sample's.
	perCPU := schedWeights()
	for _, vm := range guests {
		c := s.w.counters(vm)
		c.perCPU = perCPU[vm]
		smp.cnt[vm] = c
	}
	for _, vm := range guests {
		c := smp.cnt[vm]
		// A guest without a share is not asked at all, for the agent's
		// reason (agent/virt's asksQEMU): its QEMU may get no CPU, and
		// the call would wait for it. Nor is one waited for long, for the
		// agent's other reason (agent/virt's askWait): a QEMU that loses
		// the CPU during the call answers seconds later, and the sample
		// (with the jobs' CPU clock) would be of a later moment. Either
		// way its disk counts what it did when last read.
		c.disk = last[vm].disk
		if smp.vms[vm].Share > 0 {
			if n, ok := s.w.diskBytes(vm); ok {
				c.disk = n
			}
		}
		smp.cnt[vm] = c
	}
	s.mu.Lock()
	s.samples = append(s.samples, smp)
	s.mu.Unlock()
}

// snapshot returns the samples so far, in time order.
func (s *sampler) snapshot() []sample {
	s.take()
	s.mu.Lock()
	defer s.mu.Unlock()
	return inOrder(slices.Clone(s.samples))
}

// inOrder sorts samples by time: a job's end samples beside the period's.
func inOrder(samples []sample) []sample {
	slices.SortStableFunc(samples, func(a, b sample) int { return a.at.Compare(b.at) })
	return samples
}

// end stops sampling and returns the samples, in time order.
func (s *sampler) end() []sample {
	s.w.smpMu.Lock()
	delete(s.w.samplers, s)
	s.w.smpMu.Unlock()
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return inOrder(s.samples)
}

// mark samples on every running sampler: a job has just ended.
func (w *world) mark() {
	w.smpMu.Lock()
	running := slices.Collect(maps.Keys(w.samplers))
	w.smpMu.Unlock()
	for _, s := range running {
		s.take()
	}
}

// diskWait is how long a sample waits for a domain's disk counters.
const diskWait = 250 * time.Millisecond

// maxDiskCalls is how many of the samples' disk calls may wait on QEMUs at
// once: libvirtd's workers are shared by every connection, and a sampler
// holding one per guest (seven) beside the agent's would make the agent
// wait for them (docs/PLATFORM.md, "A stuck call holds others on its
// connection").
const maxDiskCalls = 2

// diskBytes is the bytes a domain's disks have read and written, if its
// QEMU answers within diskWait; a call not answered goes on by itself,
// and the domain is not asked again until it ends, nor another while
// maxDiskCalls wait.
func (w *world) diskBytes(vm string) (int64, bool) {
	w.diskMu.Lock()
	if w.asking[vm] || len(w.asking) >= maxDiskCalls {
		w.diskMu.Unlock()
		return 0, false
	}
	w.asking[vm] = true
	w.diskMu.Unlock()
	done := make(chan int64, 1)
	go func() {
		defer func() {
			w.diskMu.Lock()
			delete(w.asking, vm)
			w.diskMu.Unlock()
		}()
		d, err := w.diskConn.LookupDomainByName(vm)
		if err != nil {
			done <- 0
			return
		}
		defer d.Free()
		var n int64
		for _, dev := range []string{"vda", "vdb"} {
			if st, err := d.BlockStats(dev); err == nil {
				n += st.RdBytes + st.WrBytes
			}
		}
		done <- n
	}()
	select {
	case n := <-done:
		return n, true
	case <-time.After(diskWait):
		return 0, false
	}
}

// counters reads a domain's CPU time and its taps' bytes from libvirt,
// none of which asks the guest's QEMU.
func (w *world) counters(vm string) counters {
	var c counters
	d, err := w.conn.LookupDomainByName(vm)
	if err != nil {
		return c
	}
	defer d.Free()
	if info, err := d.GetInfo(); err == nil {
		c.cpu = time.Duration(info.CpuTime)
	}
	if vcpus, err := d.GetVcpus(); err == nil {
		for _, v := range vcpus {
			c.vcpu += time.Duration(v.CpuTime)
		}
	}
	c.vwait, _ = virt.VCPUWait(workertest.QEMUURI, vm) // 0 when unreadable
	c.weight = cgroupWeight(vm)
	if tap := w.taps[vm]; tap != "" {
		if st, err := d.InterfaceStats(tap); err == nil {
			c.rx, c.tx = st.RxBytes, st.TxBytes
		}
	}
	return c
}

// cgroupWeight is the CPU weight the kernel holds for vm's domain, its
// vCPU and its emulator threads, "domain/vcpu0/emulator": cgroup v1's
// cpu.shares under libvirt's machine group, or v2's cpu.weight. "?" where
// unreadable.
func cgroupWeight(vm string) string {
	for _, pat := range []string{"/sys/fs/cgroup/cpu/machine/*%s*", "/sys/fs/cgroup/cpu,cpuacct/machine/*%s*", "/sys/fs/cgroup/machine.slice/*%s*"} {
		dirs, _ := filepath.Glob(fmt.Sprintf(pat, vm))
		if len(dirs) == 0 {
			continue
		}
		read := func(dir string) string {
			for _, f := range []string{"cpu.shares", "cpu.weight"} {
				if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
					return strings.TrimSpace(string(b))
				}
			}
			return "?"
		}
		d := dirs[0]
		if _, err := os.Stat(filepath.Join(d, "libvirt")); err == nil {
			d = filepath.Join(d, "libvirt") // v2: the domain's threads below the scope
		}
		return read(dirs[0]) + "/" + read(filepath.Join(d, "vcpu0")) + "/" + read(filepath.Join(d, "emulator"))
	}
	return "?"
}

// schedWeights is the weight the scheduler gives each domain's group on
// each CPU (its entity's load.weight there, in units of a nice-0 task:
// the group's weight split over the CPUs by its load), by domain name,
// from debugfs' sched/debug when mounted: "c0 5.64 c1 0.00". Read once a
// sample: the kernel builds the file from every CPU's run queues.
func schedWeights() map[string]string {
	raw, err := os.ReadFile("/sys/kernel/debug/sched/debug")
	if err != nil {
		return nil
	}
	return parseSchedWeights(string(raw))
}

// parseSchedWeights is schedWeights of a sched/debug text.
func parseSchedWeights(raw string) map[string]string {
	out := map[string]string{}
	cpu, vm := "", ""
	for _, line := range strings.Split(raw, "\n") {
		if strings.HasPrefix(line, "cfs_rq[") {
			// cfs_rq[0]:/machine/qemu-54-<name>.libvirt-qemu
			cpu, vm = "", ""
			i := strings.Index(line, "]:")
			group, ok := strings.CutSuffix(line[max(i, 0):], ".libvirt-qemu")
			if i < 0 || !ok {
				continue
			}
			if _, rest, ok := strings.Cut(group[strings.LastIndex(group, "/")+1:], "-"); ok { // qemu-
				if _, name, ok := strings.Cut(rest, "-"); ok { // <id>-
					cpu, vm = line[len("cfs_rq["):i], name
				}
			}
			continue
		}
		if vm != "" && strings.Contains(line, ".se->load.weight") {
			f := strings.Fields(line)
			if w, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				out[vm] = strings.TrimSpace(out[vm] + fmt.Sprintf(" c%s %.2f", cpu, w/(1024*1024)))
			}
		}
	}
	return out
}

// cpuUsed is the CPU time a domain has used (libvirt's GetInfo alone, not
// its disk and network counters: no call into the guest's QEMU).
func (w *world) cpuUsed(vm string) time.Duration {
	d, err := w.conn.LookupDomainByName(vm)
	if err != nil {
		return 0
	}
	defer d.Free()
	info, err := d.GetInfo()
	if err != nil {
		return 0
	}
	return time.Duration(info.CpuTime)
}

// timeline formats samples: per interval, each VM's CPU fraction, disk
// and network rates, its share and caps.
func timeline(samples []sample, vms []string, t0 time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%6s", "t")
	for _, vm := range vms {
		fmt.Fprintf(&b, " | %-40s", vm)
	}
	b.WriteString("\n")
	for i := 1; i < len(samples); i++ {
		p, c := samples[i-1], samples[i]
		dt := c.at.Sub(p.at).Seconds()
		fmt.Fprintf(&b, "%6.1f", c.at.Sub(t0).Seconds())
		for _, vm := range vms {
			a, z := p.cnt[vm], c.cnt[vm]
			st := c.vms[vm]
			caps := []string{}
			for _, r := range slices.Sorted(maps.Keys(st.Caps)) {
				caps = append(caps, fmt.Sprintf("%s=%.2f", r, st.Caps[r]))
			}
			idle := ""
			if st.Idle {
				idle = "I"
			}
			fmt.Fprintf(&b, " | cpu %.2f v %.2f w %.2f d %5.1f rx %5.2f tx %5.2f q %.3f%s cg %s [%s] %s", (z.cpu-a.cpu).Seconds()/dt, (z.vcpu-a.vcpu).Seconds()/dt, (z.vwait-a.vwait).Seconds()/dt, float64(z.disk-a.disk)/dt/1e6,
				float64(z.rx-a.rx)/dt/1e6, float64(z.tx-a.tx)/dt/1e6, st.Share, idle, z.weight, z.perCPU, strings.Join(caps, ","))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// guestCPU is the CPU time the guests vms had used by t, in seconds,
// interpolated between the samples around it: their domains' whole time,
// QEMU's other threads with their vCPUs.
func guestCPU(samples []sample, vms []string, t time.Time) float64 {
	return guestTime(samples, vms, t, func(c counters) time.Duration { return c.cpu })
}

// guestVCPU is guestCPU of their vCPUs alone: the time the host CPUs
// they are pinned to ran them. QEMU's other threads (its main loop, which
// under TCG moves the guest's disk and network data) run on whichever CPU
// is free, mostly another one.
func guestVCPU(samples []sample, vms []string, t time.Time) float64 {
	return guestTime(samples, vms, t, func(c counters) time.Duration { return c.vcpu })
}

// guestTime is the time of the guests vms by t, as of says, interpolated
// between the samples around it.
func guestTime(samples []sample, vms []string, t time.Time, of func(counters) time.Duration) float64 {
	return guestAmount(samples, vms, t, func(c counters) float64 { return of(c).Seconds() })
}

// guestAmount is the sum over the guests vms of what of counts by t,
// interpolated between the samples around it.
func guestAmount(samples []sample, vms []string, t time.Time, of func(counters) float64) float64 {
	total := func(s sample) float64 {
		sum := 0.0
		for _, vm := range vms {
			sum += of(s.cnt[vm])
		}
		return sum
	}
	if len(samples) == 0 {
		return 0
	}
	if !t.After(samples[0].at) {
		return total(samples[0])
	}
	for i := 1; i < len(samples); i++ {
		if p, c := samples[i-1], samples[i]; !t.After(c.at) {
			f := t.Sub(p.at).Seconds() / c.at.Sub(p.at).Seconds()
			return total(p) + f*(total(c)-total(p))
		}
	}
	return total(samples[len(samples)-1])
}
