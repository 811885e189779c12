package worker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mrmarket/mrmarket/internal/retry"
)

// Config is a worker's seed: who it is and where its peers are (the
// user-data `mrmarket cluster create` writes for the project's guest).
type Config struct {
	VM string `json:"vm"`
	// Address is the guest's eth0 address with its prefix (10.83.0.10/16).
	Address string `json:"address"`
	// Peers is every worker's address by VM (its own included): where
	// their data servers are, as /etc/hosts is a Hadoop node's. An
	// address with a port (workers sharing a host, in tests) overrides
	// Port.
	Peers map[string]string `json:"peers"`
	// Slots is how many task attempts the facade runs here at once.
	Slots int `json:"slots"`
	// Port is the data servers' port (DataPort when 0).
	Port int `json:"port,omitempty"`
}

func (c Config) port() int {
	if c.Port == 0 {
		return DataPort
	}
	return c.Port
}

// Worker runs the map and reduce attempts the facade sends it, reading
// splits from its input disk (or a peer's), keeping map outputs and
// shuffled runs on its scratch disk and serving both to its peers.
type Worker struct {
	cfg            Config
	input, scratch *Disk
	Logf           func(format string, args ...any)

	mu      sync.Mutex
	conn    *Conn
	outputs map[string][]Extent          // a map attempt's output, by partition
	reduces map[string]map[string]*rattr // job → attempt → a running reduce here
	cancels map[string][]context.CancelFunc
}

// rattr is a running reduce attempt: the map outputs it learns of.
type rattr struct {
	outputs chan MapOutput
}

// New is a worker on its disks.
func New(cfg Config, input, scratch *Disk) *Worker {
	if cfg.Slots < 1 {
		cfg.Slots = 1
	}
	return &Worker{cfg: cfg, input: input, scratch: scratch, Logf: log.Printf,
		outputs: map[string][]Extent{}, reduces: map[string]map[string]*rattr{}, cancels: map[string][]context.CancelFunc{}}
}

// send sends an event on the current control session; an event sent
// while there is none is lost, as the facade fails the attempts of a
// worker it lost.
func (w *Worker) send(ev Event) {
	w.mu.Lock()
	c := w.conn
	w.mu.Unlock()
	if c == nil {
		return
	}
	if err := c.Send(ev); err != nil {
		w.Logf("worker: %v", err)
	}
}

// Run is one control session over rw: the worker says hello, then runs
// the commands it receives until rw ends (io.EOF) or ctx does. Attempts
// started go on after a session ends and report on the next.
func (w *Worker) Run(ctx context.Context, rw io.ReadWriter) error {
	c := NewConn(rw)
	w.mu.Lock()
	w.conn = c
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		if w.conn == c {
			w.conn = nil
		}
		w.mu.Unlock()
	}()
	if err := c.Send(Event{Type: EvHello, VM: w.cfg.VM, Slots: w.cfg.Slots}); err != nil {
		return err
	}
	for ctx.Err() == nil {
		var cmd Command
		if err := c.Recv(&cmd); err != nil {
			return err
		}
		w.dispatch(ctx, cmd)
	}
	return ctx.Err()
}

func (w *Worker) dispatch(ctx context.Context, cmd Command) {
	switch cmd.Type {
	case CmdMap:
		actx := w.attemptContext(ctx, cmd.Job)
		go func() { w.send(w.runMap(actx, cmd)) }()
	case CmdReduce:
		actx := w.attemptContext(ctx, cmd.Job)
		r := &rattr{outputs: make(chan MapOutput, cmd.Maps+len(cmd.Outputs))}
		for _, o := range cmd.Outputs {
			r.outputs <- o
		}
		w.mu.Lock()
		if w.reduces[cmd.Job] == nil {
			w.reduces[cmd.Job] = map[string]*rattr{}
		}
		w.reduces[cmd.Job][cmd.Attempt] = r
		w.mu.Unlock()
		go func() {
			ev := w.runReduce(actx, cmd, r)
			w.mu.Lock()
			delete(w.reduces[cmd.Job], cmd.Attempt)
			w.mu.Unlock()
			w.send(ev)
		}()
	case CmdOutput:
		w.mu.Lock()
		for _, r := range w.reduces[cmd.Job] {
			for _, o := range cmd.Outputs {
				select {
				case r.outputs <- o:
				default: // more than its maps: a map's second output, not needed
				}
			}
		}
		w.mu.Unlock()
	case CmdEnd:
		w.mu.Lock()
		for _, cancel := range w.cancels[cmd.Job] {
			cancel()
		}
		delete(w.cancels, cmd.Job)
		for _, o := range cmd.Outputs {
			delete(w.outputs, o.Attempt)
		}
		w.mu.Unlock()
	default:
		w.Logf("worker: unknown command %q", cmd.Type)
	}
}

// attemptContext is the context of an attempt of job, ended when the
// job is (CmdEnd), not with the control session.
func (w *Worker) attemptContext(ctx context.Context, job string) context.Context {
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.mu.Lock()
	w.cancels[job] = append(w.cancels[job], cancel)
	w.mu.Unlock()
	return actx
}

// progress sends an attempt's progress at most every progressEvery.
type progress struct {
	w       *Worker
	attempt string
	last    time.Time
}

const progressEvery = 250 * time.Millisecond

func (p *progress) report(f float64) {
	if now := time.Now(); now.Sub(p.last) >= progressEvery {
		p.last = now
		p.w.send(Event{Type: EvProgress, Attempt: p.attempt, Progress: f})
	}
}

func failed(attempt string, err error) Event {
	return Event{Type: EvDone, Attempt: attempt, Error: err.Error()}
}

// runMap reads the split, computes, and writes the output's partitions
// one after the other on the scratch disk.
func (w *Worker) runMap(ctx context.Context, cmd Command) Event {
	if cmd.Split == nil || cmd.Reduces < 1 {
		return failed(cmd.Attempt, errors.New("worker: a map needs a split and at least one reduce"))
	}
	m, err := newMapper(cmd.Kind)
	if err != nil {
		return failed(cmd.Attempt, err)
	}
	p := &progress{w: w, attempt: cmd.Attempt}
	var read int64
	feed := func(piece []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		m.feed(piece)
		read += int64(len(piece))
		p.report(0.9 * float64(read) / float64(cmd.Split.Length))
		return nil
	}
	s := cmd.Split
	if s.VM == w.cfg.VM {
		err = w.input.ReadAt(s.Offset, s.Length, feed)
	} else {
		err = w.fetch(ctx, s.VM, fmt.Sprintf("SPLIT %d %d", s.Offset, s.Length), feed)
	}
	if err != nil {
		return failed(cmd.Attempt, fmt.Errorf("reading split %d: %w", cmd.Index, err))
	}
	parts, in, out := m.partitions(cmd.Reduces)
	var all []byte
	rel := make([]Extent, len(parts))
	for i, part := range parts {
		rel[i] = Extent{Offset: int64(len(all)), Length: int64(len(part))}
		all = append(all, part...)
	}
	ext, err := w.scratch.Append(all)
	if err != nil {
		return failed(cmd.Attempt, err)
	}
	for i := range rel {
		rel[i].Offset += ext.Offset
	}
	w.mu.Lock()
	w.outputs[cmd.Attempt] = rel
	w.mu.Unlock()
	return Event{Type: EvDone, Attempt: cmd.Attempt, OK: true, Progress: 1,
		Counters: Counters{BytesRead: read, MapOutputBytes: int64(len(all)), RecordsIn: in, RecordsOut: out}}
}

// parallelCopies is how many map outputs a reduce fetches at once
// (Hadoop's mapreduce.reduce.shuffle.parallelcopies is 5; these guests
// have one vCPU).
const parallelCopies = 2

// runReduce fetches its partition of every map's output as the facade
// announces them, each written to the scratch disk as it arrives
// (shuffle); reads the runs back and merges them (merge); reduces and
// writes the result (reduce).
func (w *Worker) runReduce(ctx context.Context, cmd Command, r *rattr) Event {
	p := &progress{w: w, attempt: cmd.Attempt}
	var (
		mu       sync.Mutex
		segments = make([]Extent, cmd.Maps)
		fetched  int
		shuffled int64
		firstErr error
	)
	seen := map[int]bool{}
	sem := make(chan struct{}, parallelCopies)
	var wg sync.WaitGroup
	for started := 0; started < cmd.Maps; {
		var o MapOutput
		select {
		case o = <-r.outputs:
		case <-ctx.Done():
			return failed(cmd.Attempt, ctx.Err())
		}
		if seen[o.Map] || o.Map < 0 || o.Map >= cmd.Maps {
			continue
		}
		seen[o.Map] = true
		started++
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			var run []byte
			err := w.fetch(ctx, o.VM, fmt.Sprintf("MAPOUT %s %d", o.Attempt, cmd.Index), func(b []byte) error {
				run = append(run, b...)
				return nil
			})
			var ext Extent
			if err == nil {
				ext, err = w.scratch.Append(run)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("fetching map %d's output from %s: %w", o.Map, o.VM, err)
				}
				return
			}
			segments[o.Map] = ext
			fetched++
			shuffled += int64(len(run))
			p.report(float64(fetched) / float64(cmd.Maps) / 3)
		}()
		mu.Lock()
		err := firstErr
		mu.Unlock()
		if err != nil {
			break
		}
	}
	wg.Wait()
	if firstErr != nil {
		return failed(cmd.Attempt, firstErr)
	}
	w.send(Event{Type: EvPhase, Attempt: cmd.Attempt, Phase: PhaseShuffle, Progress: 1.0 / 3})

	runs := make([][]byte, len(segments))
	for i, s := range segments {
		b, err := w.scratch.Read(s.Offset, s.Length)
		if err != nil {
			return failed(cmd.Attempt, err)
		}
		runs[i] = b
	}
	merged, err := mergeRuns(cmd.Kind, runs)
	if err != nil {
		return failed(cmd.Attempt, err)
	}
	runs = nil
	w.send(Event{Type: EvPhase, Attempt: cmd.Attempt, Phase: PhaseMerge, Progress: 2.0 / 3})

	out, in, n, err := reduceRun(cmd.Kind, merged)
	if err != nil {
		return failed(cmd.Attempt, err)
	}
	ext, err := w.scratch.Append(out)
	if err != nil {
		return failed(cmd.Attempt, err)
	}
	return Event{Type: EvDone, Attempt: cmd.Attempt, OK: true, Progress: 1, Output: &ext,
		Counters: Counters{ShuffleBytes: shuffled, BytesWritten: int64(len(out)), RecordsIn: in, RecordsOut: n}}
}

// fetchRetry is how a fetch from a peer tries again: a peer still
// booting, or a connection lost, is worth a few tries (Hadoop's fetcher
// retries too); an error the peer answered is not.
var fetchRetry = retry.Options{InitialBackoff: 200 * time.Millisecond, MaxBackoff: 2 * time.Second, Multiplier: 2, Jitter: 0.2, MaxTries: 5}

// errAnswered is an error the data server answered with.
var errAnswered = errors.New("peer refused")

// fetch asks vm's data server for req and passes each piece of its answer
// to each, trying again from the start while nothing was passed on.
func (w *Worker) fetch(ctx context.Context, vm, req string, each func([]byte) error) error {
	host, ok := w.cfg.Peers[vm]
	if !ok {
		return fmt.Errorf("worker: no address for %s", vm)
	}
	addr := host
	if _, _, err := net.SplitHostPort(host); err != nil {
		addr = net.JoinHostPort(host, strconv.Itoa(w.cfg.port()))
	}
	passed := false
	return retry.Do(ctx, fetchRetry, func(err error) bool { return !passed && !errors.Is(err, errAnswered) }, func(ctx context.Context) error {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		stop := context.AfterFunc(ctx, func() { c.Close() })
		defer stop()
		if _, err := io.WriteString(c, req+"\n"); err != nil {
			return err
		}
		br := bufio.NewReaderSize(c, 64<<10)
		line, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		n, ok := strings.CutPrefix(strings.TrimSpace(line), "OK ")
		if !ok {
			return fmt.Errorf("%w: %s: %s", errAnswered, vm, strings.TrimSpace(line))
		}
		left, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			return fmt.Errorf("%w: %s: malformed answer %q", errAnswered, vm, line)
		}
		buf := make([]byte, 64<<10)
		for left > 0 {
			k, err := br.Read(buf[:min(int64(len(buf)), left)])
			if k > 0 {
				passed = true
				if err := each(buf[:k]); err != nil {
					return err
				}
				left -= int64(k)
			}
			if err != nil && left > 0 {
				return err
			}
		}
		return nil
	})
}

// Serve answers peers' requests on ln until it closes: "SPLIT off len"
// (bytes of the input disk) and "MAPOUT attempt partition" (a partition
// of a map attempt's output), each answered "OK n" and the n bytes, or
// "ERR why".
func (w *Worker) Serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			if err := w.answer(c); err != nil {
				w.Logf("worker: data request from %s: %v", c.RemoteAddr(), err)
			}
		}()
	}
}

func (w *Worker) answer(c net.Conn) error {
	line, err := bufio.NewReader(io.LimitReader(c, 256)).ReadString('\n')
	if err != nil {
		return err
	}
	f := strings.Fields(line)
	refuse := func(format string, args ...any) error {
		msg := fmt.Sprintf(format, args...)
		_, _ = fmt.Fprintf(c, "ERR %s\n", msg)
		return errors.New(msg)
	}
	var disk *Disk
	var ext Extent
	switch {
	case len(f) == 3 && f[0] == "SPLIT":
		off, err1 := strconv.ParseInt(f[1], 10, 64)
		n, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil || off < 0 || n < 0 || off+n > w.input.Size() {
			return refuse("bad split %q", strings.TrimSpace(line))
		}
		disk, ext = w.input, Extent{Offset: off, Length: n}
	case len(f) == 3 && f[0] == "MAPOUT":
		part, err := strconv.Atoi(f[2])
		w.mu.Lock()
		parts, ok := w.outputs[f[1]]
		w.mu.Unlock()
		if !ok || err != nil || part < 0 || part >= len(parts) {
			return refuse("no output %s partition %s here", f[1], f[2])
		}
		disk, ext = w.scratch, parts[part]
	default:
		return refuse("unknown request %q", strings.TrimSpace(line))
	}
	bw := bufio.NewWriterSize(c, 64<<10)
	fmt.Fprintf(bw, "OK %d\n", ext.Length)
	if err := disk.ReadAt(ext.Offset, ext.Length, func(p []byte) error {
		_, err := bw.Write(p)
		return err
	}); err != nil {
		return err
	}
	return bw.Flush()
}
