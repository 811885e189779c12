package worker

import (
	"bytes"
	"container/heap"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
)

// mapper is a map's computation over its split, fed piece by piece.
type mapper interface {
	// feed takes the next piece of the split.
	feed(p []byte)
	// partitions ends the input and returns each reduce's part of the
	// output, sorted, and the records read and written.
	partitions(reduces int) (parts [][]byte, in, out int64)
}

func newMapper(kind string) (mapper, error) {
	switch kind {
	case WordCount:
		return &wordMapper{counts: map[string]int64{}}, nil
	case Sort:
		return &sortMapper{}, nil
	}
	return nil, fmt.Errorf("worker: unknown job kind %q", kind)
}

// wordMapper counts words; a word may straddle two pieces.
type wordMapper struct {
	counts map[string]int64
	carry  []byte
	words  int64
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

func (m *wordMapper) feed(p []byte) {
	i := 0
	if len(m.carry) > 0 {
		for i < len(p) && !isSpace(p[i]) {
			i++
		}
		m.carry = append(m.carry, p[:i]...)
		if i == len(p) {
			return
		}
		m.count(m.carry)
		m.carry = m.carry[:0]
	}
	for i < len(p) {
		for i < len(p) && isSpace(p[i]) {
			i++
		}
		j := i
		for j < len(p) && !isSpace(p[j]) {
			j++
		}
		if j == len(p) {
			m.carry = append(m.carry, p[i:j]...)
			return
		}
		m.count(p[i:j])
		i = j
	}
}

func (m *wordMapper) count(w []byte) {
	if len(w) == 0 {
		return
	}
	m.counts[string(w)]++
	m.words++
}

// partitionOf is a word's reduce: its FNV-1a hash modulo the reduces.
func partitionOf(word []byte, reduces int) int {
	h := fnv.New32a()
	h.Write(word)
	return int(h.Sum32() % uint32(reduces))
}

func (m *wordMapper) partitions(reduces int) ([][]byte, int64, int64) {
	m.count(m.carry)
	m.carry = nil
	keys := make([]string, 0, len(m.counts))
	for w := range m.counts {
		keys = append(keys, w)
	}
	slices.Sort(keys)
	parts := make([][]byte, reduces)
	for _, w := range keys {
		p := partitionOf([]byte(w), reduces)
		parts[p] = append(parts[p], w...)
		parts[p] = append(parts[p], '\t')
		parts[p] = strconv.AppendInt(parts[p], m.counts[w], 10)
		parts[p] = append(parts[p], '\n')
	}
	return parts, m.words, int64(len(keys))
}

// sortMapper collects records; pieces split records anywhere.
type sortMapper struct{ data []byte }

func (m *sortMapper) feed(p []byte) { m.data = append(m.data, p...) }

// rangeOf is a key's reduce: its first byte's place in the keys' range.
func rangeOf(key []byte, reduces int) int {
	return min(int(key[0]-keyFirst)*reduces/(keyLast-keyFirst+1), reduces-1)
}

func (m *sortMapper) partitions(reduces int) ([][]byte, int64, int64) {
	buckets := make([][][]byte, reduces)
	var n int64
	for off := 0; off+RecordSize <= len(m.data) && m.data[off] != '\n'; off += RecordSize {
		r := m.data[off : off+RecordSize]
		p := rangeOf(r, reduces)
		buckets[p] = append(buckets[p], r)
		n++
	}
	parts := make([][]byte, reduces)
	for p, b := range buckets {
		slices.SortFunc(b, func(x, y []byte) int { return bytes.Compare(x, y) })
		parts[p] = make([]byte, 0, len(b)*RecordSize)
		for _, r := range b {
			parts[p] = append(parts[p], r...)
		}
	}
	m.data = nil
	return parts, n, n
}

// mergeRuns merges a reduce's sorted runs (one from each map) into one
// sorted run: Hadoop's merge (sort) phase.
func mergeRuns(kind string, runs [][]byte) ([]byte, error) {
	size := 0
	switch kind {
	case WordCount:
	case Sort:
		size = RecordSize
		for _, r := range runs {
			if len(r)%RecordSize != 0 {
				return nil, fmt.Errorf("worker: a sorted run of %d bytes is not whole records", len(r))
			}
		}
	default:
		return nil, fmt.Errorf("worker: unknown job kind %q", kind)
	}
	var total int
	for _, r := range runs {
		total += len(r)
	}
	out := make([]byte, 0, total)
	err := merge(runs, size, func(entry, _ []byte) error {
		out = append(out, entry...)
		return nil
	})
	return out, err
}

// reduceRun computes a reduce's output from its merged run: each word's
// counts summed, or the records as they are. It returns the output and
// the records read and written.
func reduceRun(kind string, run []byte) ([]byte, int64, int64, error) {
	if kind == Sort {
		n := int64(len(run) / RecordSize)
		return run, n, n, nil
	}
	var out, word []byte
	var sum, in, n int64
	flush := func() {
		if word != nil {
			out = append(out, word...)
			out = append(out, '\t')
			out = strconv.AppendInt(out, sum, 10)
			out = append(out, '\n')
			n++
		}
	}
	for line := range bytes.Lines(run) {
		key, v, ok := bytes.Cut(bytes.TrimSuffix(line, []byte{'\n'}), []byte{'\t'})
		c, err := strconv.ParseInt(string(v), 10, 64)
		if !ok || err != nil {
			return nil, 0, 0, fmt.Errorf("worker: malformed map output line %q", line)
		}
		in++
		if word == nil || !bytes.Equal(word, key) {
			flush()
			word, sum = append(word[:0:0], key...), 0
		}
		sum += c
	}
	flush()
	return out, in, n, nil
}

// cursor walks a run's entries: lines (words) or records.
type cursor struct {
	run  []byte
	pos  int
	cur  []byte // the current entry
	size int    // a record's size; 0: lines
}

func (c *cursor) next() bool {
	if c.pos >= len(c.run) {
		return false
	}
	end := c.pos + c.size
	if c.size == 0 {
		end = c.pos + bytes.IndexByte(c.run[c.pos:], '\n') + 1
		if end <= c.pos {
			end = len(c.run)
		}
	}
	c.cur, c.pos = c.run[c.pos:end], end
	return true
}

// key is the current entry's key: a record's whole bytes, a line's word.
func (c *cursor) key() []byte {
	if c.size > 0 {
		return c.cur
	}
	k, _, _ := bytes.Cut(c.cur, []byte{'\t'})
	return k
}

// merger is a heap of cursors by key.
type merger []*cursor

func (m merger) Len() int           { return len(m) }
func (m merger) Less(i, j int) bool { return bytes.Compare(m[i].key(), m[j].key()) < 0 }
func (m merger) Swap(i, j int)      { m[i], m[j] = m[j], m[i] }
func (m *merger) Push(x any)        { *m = append(*m, x.(*cursor)) }
func (m *merger) Pop() any {
	old := *m
	c := old[len(old)-1]
	*m = old[:len(old)-1]
	return c
}

// merge calls each with the runs' entries in key order.
func merge(runs [][]byte, size int, each func(entry, key []byte) error) error {
	h := merger{}
	for _, r := range runs {
		c := &cursor{run: r, size: size}
		if c.next() {
			h = append(h, c)
		}
	}
	heap.Init(&h)
	for h.Len() > 0 {
		c := h[0]
		if err := each(c.cur, c.key()); err != nil {
			return err
		}
		if c.next() {
			heap.Fix(&h, 0)
		} else {
			heap.Pop(&h)
		}
	}
	return nil
}
