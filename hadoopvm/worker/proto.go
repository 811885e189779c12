package worker

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sync"
)

// ControlPort is the name of the virtio-serial port the worker and the
// facade talk on (libvirt's <channel><target type='virtio' name=…/>).
const ControlPort = "org.mrmarket.worker.0"

// DataPort is the TCP port of a worker's data server: input splits and
// map outputs (Hadoop's shuffle handler listens on 13562 too).
const DataPort = 13562

// Job kinds: what a job's maps and reduces compute.
const (
	// WordCount counts the words of a text: a map counts its split's
	// words (combining in the map, as Hadoop's WordCount does with its
	// reducer as combiner) and partitions them by hash; a reduce sums
	// each word's counts. Its output is "word\tcount\n" lines in byte
	// order.
	WordCount = "wordcount"
	// Sort sorts 100-byte records by their 10-byte keys (TeraSort's
	// records): a map partitions its records by key range and sorts each
	// partition, a reduce merges its sorted runs. The shuffle moves all
	// the input, so the network matters as much as the CPU.
	Sort = "sort"
)

// Split is a map's input: Length bytes at Offset on the input disk of VM.
type Split struct {
	VM     string `json:"vm"`
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
}

// MapOutput is a finished map's output, served by the worker of VM under
// the id of the attempt that wrote it.
type MapOutput struct {
	Map     int    `json:"map"`
	VM      string `json:"vm"`
	Attempt string `json:"attempt"`
}

// Extent is a run of bytes on a worker's scratch disk.
type Extent struct {
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
}

// Commands the facade sends.
const (
	CmdMap    = "map"    // run a map attempt
	CmdReduce = "reduce" // run a reduce attempt
	CmdOutput = "output" // one more map output for a job's reduces here
	CmdEnd    = "end"    // the job is over: stop its attempts here, forget its outputs
)

// Command is one message from the facade to a worker.
type Command struct {
	Type    string `json:"type"`
	Job     string `json:"job"`
	Attempt string `json:"attempt,omitempty"`
	Kind    string `json:"kind,omitempty"`
	// Index is the map's or the reduce's number (the reduce's partition).
	Index   int `json:"index"`
	Reduces int `json:"reduces,omitempty"`
	// Split is a map's input.
	Split *Split `json:"split,omitempty"`
	// Maps is how many map outputs a reduce fetches; Outputs those known
	// when it starts (CmdReduce) or one more (CmdOutput).
	Maps    int         `json:"maps,omitempty"`
	Outputs []MapOutput `json:"outputs,omitempty"`
}

// Events a worker sends.
const (
	EvHello    = "hello"    // the worker is up: its VM and slots
	EvProgress = "progress" // an attempt's progress
	EvPhase    = "phase"    // a reduce attempt ended its shuffle or its merge
	EvDone     = "done"     // an attempt ended, succeeded or failed
)

// Reduce phases an EvPhase ends.
const (
	PhaseShuffle = "shuffle"
	PhaseMerge   = "merge"
)

// Counters are an attempt's byte and record counts, Hadoop's counters of
// the same meaning: what a map read (HDFS_BYTES_READ) and wrote as output
// (MAP_OUTPUT_BYTES), what a reduce fetched (REDUCE_SHUFFLE_BYTES) and
// wrote (HDFS_BYTES_WRITTEN), and the records in and out.
type Counters struct {
	BytesRead      int64 `json:"bytes_read,omitempty"`
	MapOutputBytes int64 `json:"map_output_bytes,omitempty"`
	ShuffleBytes   int64 `json:"shuffle_bytes,omitempty"`
	BytesWritten   int64 `json:"bytes_written,omitempty"`
	RecordsIn      int64 `json:"records_in,omitempty"`
	RecordsOut     int64 `json:"records_out,omitempty"`
}

// Add adds o's counts to c.
func (c *Counters) Add(o Counters) {
	c.BytesRead += o.BytesRead
	c.MapOutputBytes += o.MapOutputBytes
	c.ShuffleBytes += o.ShuffleBytes
	c.BytesWritten += o.BytesWritten
	c.RecordsIn += o.RecordsIn
	c.RecordsOut += o.RecordsOut
}

// Event is one message from a worker to the facade.
type Event struct {
	Type    string `json:"type"`
	VM      string `json:"vm,omitempty"`
	Slots   int    `json:"slots,omitempty"`
	Attempt string `json:"attempt,omitempty"`
	// Progress is the attempt's, 0 to 1.
	Progress float64  `json:"progress,omitempty"`
	Phase    string   `json:"phase,omitempty"`
	OK       bool     `json:"ok,omitempty"`
	Error    string   `json:"error,omitempty"`
	Counters Counters `json:"counters"`
	// Output is where a reduce wrote its result on its scratch disk.
	Output *Extent `json:"output,omitempty"`
}

// Conn is one end of the control channel: JSON messages, one a line.
// Sends are serialized; Recv is for one reader.
type Conn struct {
	mu  sync.Mutex
	w   io.Writer
	dec *json.Decoder
}

// NewConn speaks the control protocol over rw.
func NewConn(rw io.ReadWriter) *Conn {
	return &Conn{w: rw, dec: json.NewDecoder(bufio.NewReader(rw))}
}

// Send writes one message.
func (c *Conn) Send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.w.Write(b); err != nil {
		return fmt.Errorf("worker: sending: %w", err)
	}
	return nil
}

// Recv reads one message into v.
func (c *Conn) Recv(v any) error { return c.dec.Decode(v) }
