package worker

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestInputsAreTheirSeeds: an input is its description's, byte for byte;
// splits end at a word's or a record's end and are padded with newlines.
func TestInputsAreTheirSeeds(t *testing.T) {
	for _, kind := range []string{WordCount, Sort} {
		in := Input{Kind: kind, Splits: 3, SplitBytes: 3 * BlockSize, Seed: 5}
		var a, b, c bytes.Buffer
		if err := in.Write(&a); err != nil {
			t.Fatal(err)
		}
		_ = in.Write(&b)
		in.Seed++
		_ = in.Write(&c)
		if !bytes.Equal(a.Bytes(), b.Bytes()) || bytes.Equal(a.Bytes(), c.Bytes()) || int64(a.Len()) != in.Size() {
			t.Fatalf("%s: the same seed gave other bytes, or another seed the same, or the size is not %d", kind, in.Size())
		}
		for k := range in.Splits {
			split := a.Bytes()[int64(k)*in.SplitBytes : int64(k+1)*in.SplitBytes]
			body := bytes.TrimRight(split, "\n")
			if len(body) == 0 || len(split)-len(body) >= 2*BlockSize {
				t.Fatalf("%s split %d: %d bytes of content", kind, k, len(body))
			}
			if kind == Sort && (len(body)+1)%RecordSize != 0 {
				t.Fatalf("sort split %d: %d bytes are not whole records", k, len(body)+1)
			}
		}
	}
	if err := (Input{Kind: WordCount, Splits: 1, SplitBytes: 1000}).Check(); err == nil {
		t.Fatal("a split not a multiple of the block size was accepted")
	}
}

// TestMapsAndReducesCompute: a word count's map output, fed in pieces that
// cut words anywhere, reduced across maps, is a plain count; a sort's
// reduces give every record once, in order, the partitions in key order.
func TestMapsAndReducesCompute(t *testing.T) {
	var text bytes.Buffer
	_ = Input{Kind: WordCount, Splits: 2, SplitBytes: 2 * BlockSize, Seed: 1}.Write(&text)
	want := map[string]int64{}
	for _, w := range strings.Fields(text.String()) {
		want[w]++
	}
	const reduces = 3
	runs := make([][][]byte, reduces)
	half := text.Len() / 2
	for _, part := range [][]byte{text.Bytes()[:half], text.Bytes()[half:]} { // two maps
		m, _ := newMapper(WordCount)
		for i := 0; i < len(part); i += 7 {
			m.feed(part[i:min(i+7, len(part))])
		}
		parts, _, _ := m.partitions(reduces)
		for r := range parts {
			runs[r] = append(runs[r], parts[r])
		}
	}
	got := map[string]int64{}
	for r := range reduces {
		merged, err := mergeRuns(WordCount, runs[r])
		if err != nil {
			t.Fatal(err)
		}
		out, _, _, err := reduceRun(WordCount, merged)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(out)) {
			w, c, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
			n, _ := strconv.ParseInt(c, 10, 64)
			if partitionOf([]byte(w), reduces) != r {
				t.Fatalf("%q in reduce %d", w, r)
			}
			got[w] += n
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d words, want %d", len(got), len(want))
	}
	for w, n := range want {
		if got[w] != n {
			t.Fatalf("%q: %d, want %d", w, got[w], n)
		}
	}

	var recs bytes.Buffer
	_ = Input{Kind: Sort, Splits: 2, SplitBytes: 4 * BlockSize, Seed: 2}.Write(&recs)
	var all [][]byte
	runs = make([][][]byte, reduces)
	for k := range 2 {
		split := recs.Bytes()[k*4*BlockSize : (k+1)*4*BlockSize]
		m, _ := newMapper(Sort)
		m.feed(split[:333])
		m.feed(split[333:])
		parts, in, out := m.partitions(reduces)
		if in != out || in != int64(4*BlockSize/RecordSize) {
			t.Fatalf("sort map: %d records in, %d out", in, out)
		}
		for r := range parts {
			runs[r] = append(runs[r], parts[r])
		}
		for off := 0; off+RecordSize <= len(split) && split[off] != '\n'; off += RecordSize {
			all = append(all, split[off:off+RecordSize])
		}
	}
	slices.SortFunc(all, bytes.Compare)
	var sorted []byte
	for r := range reduces {
		merged, err := mergeRuns(Sort, runs[r])
		if err != nil {
			t.Fatal(err)
		}
		out, _, _, _ := reduceRun(Sort, merged)
		sorted = append(sorted, out...)
	}
	if !bytes.Equal(sorted, bytes.Join(all, nil)) {
		t.Fatal("the reduces' outputs, in order, are not the records sorted")
	}
}

// TestDiskReadsWhatItAppended: appends start on blocks; reads at any
// offset and length give back the bytes.
func TestDiskReadsWhatItAppended(t *testing.T) {
	path := filepath.Join(t.TempDir(), "scratch")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 4<<20); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDisk(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a := bytes.Repeat([]byte("abcdefg"), 1000)
	b := bytes.Repeat([]byte("0123456789"), 200_000) // more than a chunk
	ea, err := d.Append(a)
	if err != nil {
		t.Fatal(err)
	}
	eb, err := d.Append(b)
	if err != nil {
		t.Fatal(err)
	}
	if ea.Offset != 0 || eb.Offset != roundUp(int64(len(a))) {
		t.Fatalf("extents %+v %+v", ea, eb)
	}
	for _, c := range []struct {
		off, n int64
		want   []byte
	}{{ea.Offset, ea.Length, a}, {eb.Offset, eb.Length, b}, {ea.Offset + 3, 10, a[3:13]}, {eb.Offset + chunk - 5, 17, b[chunk-5 : chunk+12]}} {
		got, err := d.Read(c.off, c.n)
		if err != nil || !bytes.Equal(got, c.want) {
			t.Fatalf("read %d at %d: %q… %v", c.n, c.off, got[:min(len(got), 20)], err)
		}
	}
	if _, err := d.Append(make([]byte, 4<<20)); err == nil {
		t.Fatal("appended beyond the disk")
	}
}

// TestInitramfsIsNewc: the archive is newc, its files under their
// directories, and a second archive appended after the first's trailer.
func TestInitramfsIsNewc(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteInitramfs(&buf, []File{{Name: "init", Mode: 0o755, Data: []byte("#!")}, {Name: "/modules/a.ko", Data: []byte("ko")}}); err != nil {
		t.Fatal(err)
	}
	if err := WriteInitramfs(&buf, []File{{Name: "seed/user-data", Data: []byte("{}")}}); err != nil {
		t.Fatal(err)
	}
	type entry struct {
		name string
		mode uint64
		data string
	}
	var got []entry
	b := buf.Bytes()
	for len(b) > 0 {
		if len(b) < 110 || string(b[:6]) != "070701" {
			t.Fatalf("no newc header at %d: %q", buf.Len()-len(b), b[:min(len(b), 16)])
		}
		field := func(i int) uint64 {
			v, _ := strconv.ParseUint(string(b[6+8*i:14+8*i]), 16, 64)
			return v
		}
		mode, size, nameSize := field(1), field(6), field(11)
		name := string(b[110 : 110+nameSize-1])
		off := (110 + int(nameSize) + 3) &^ 3
		data := string(b[off : off+int(size)])
		b = b[(off+int(size)+3)&^3:]
		got = append(got, entry{name, mode, data})
	}
	want := []entry{{"modules", 0o40755, ""}, {"modules/a.ko", 0o100644, "ko"}, {"init", 0o100755, "#!"}, {"TRAILER!!!", 0, ""},
		{"seed", 0o40755, ""}, {"seed/user-data", 0o100644, "{}"}, {"TRAILER!!!", 0, ""}}
	if !slices.Equal(got, want) {
		t.Fatalf("archive %+v\n%s", got, hex.Dump(buf.Bytes()[:min(buf.Len(), 256)]))
	}
}
