package worker

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
)

// BlockSize is the unit of the disks' I/O: splits, map outputs and reduce
// outputs start on it and are padded to it, so the worker can read and
// write them with O_DIRECT (every byte through the virtio disk and its
// throttle, none from the guest's page cache).
const BlockSize = 4096

// RecordSize is a Sort record's size: a 10-byte key, 89 bytes of payload
// and a newline.
const (
	RecordSize = 100
	KeySize    = 10
)

// Input describes a generated input image: Splits splits of SplitBytes
// each (a multiple of BlockSize), split k at k·SplitBytes. A WordCount
// split is words of a Zipf-distributed vocabulary separated by spaces and
// newlines, ending at a word's end and padded with newlines; a Sort split
// is whole records padded with newlines. Seed makes the image: the same
// Input writes the same bytes.
type Input struct {
	Kind       string `json:"kind"`
	Splits     int    `json:"splits"`
	SplitBytes int64  `json:"split_bytes"`
	Seed       uint64 `json:"seed"`
}

// Check validates the description.
func (in Input) Check() error {
	switch {
	case in.Kind != WordCount && in.Kind != Sort:
		return fmt.Errorf("worker: input kind %q: want %s or %s", in.Kind, WordCount, Sort)
	case in.Splits < 1:
		return fmt.Errorf("worker: input needs at least one split")
	case in.SplitBytes < BlockSize || in.SplitBytes%BlockSize != 0:
		return fmt.Errorf("worker: split size %d: want a positive multiple of %d", in.SplitBytes, BlockSize)
	}
	return nil
}

// Size is the image's size in bytes.
func (in Input) Size() int64 { return int64(in.Splits) * in.SplitBytes }

// SplitsOn are the input's splits, on the input disk of vm.
func (in Input) SplitsOn(vm string) []Split {
	out := make([]Split, in.Splits)
	for k := range out {
		out[k] = Split{VM: vm, Offset: int64(k) * in.SplitBytes, Length: in.SplitBytes}
	}
	return out
}

// vocabulary is the WordCount input's words: syllables strung together,
// distinct by construction (a word's syllables spell its number).
func vocabulary(n int) []string {
	syll := []string{"ka", "lo", "mi", "nu", "pe", "ra", "si", "to", "ve", "zu", "bar", "den", "fil", "gor", "hum", "jet"}
	words := make([]string, n)
	for i := range words {
		w := ""
		for x := i + 1; x > 0; x /= len(syll) {
			w += syll[x%len(syll)]
		}
		words[i] = w
	}
	return words
}

// vocabularySize is how many distinct words a WordCount input draws from.
const vocabularySize = 5000

// Write writes the image.
func (in Input) Write(w io.Writer) error {
	if err := in.Check(); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	rng := rand.New(rand.NewPCG(in.Seed, 0x6d726d61726b6574))
	split := make([]byte, 0, in.SplitBytes)
	for range in.Splits {
		split = split[:0]
		if in.Kind == WordCount {
			split = wordSplit(split, in.SplitBytes, rng)
		} else {
			split = recordSplit(split, in.SplitBytes, rng)
		}
		for int64(len(split)) < in.SplitBytes {
			split = append(split, '\n')
		}
		if _, err := bw.Write(split); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// zipf draws word ranks with Zipf's law (exponent 1.1), as words in text
// fall.
type zipf struct{ cdf []float64 }

func newZipf(n int) *zipf {
	z := &zipf{cdf: make([]float64, n)}
	var sum float64
	for i := range n {
		sum += 1 / math.Pow(float64(i+1), 1.1)
		z.cdf[i] = sum
	}
	for i := range z.cdf {
		z.cdf[i] /= sum
	}
	return z
}

func (z *zipf) draw(rng *rand.Rand) int {
	u := rng.Float64()
	lo, hi := 0, len(z.cdf)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if z.cdf[mid] < u {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

var (
	words    = vocabulary(vocabularySize)
	wordRank = newZipf(vocabularySize)
)

// wordSplit appends words up to size bytes (a line of about 12 words).
func wordSplit(b []byte, size int64, rng *rand.Rand) []byte {
	for n := 0; ; n++ {
		w := words[wordRank.draw(rng)]
		if int64(len(b)+len(w)+1) > size {
			return b
		}
		b = append(b, w...)
		if n%12 == 11 {
			b = append(b, '\n')
		} else {
			b = append(b, ' ')
		}
	}
}

// keyFirst and keyLast bound a key's bytes: printable ASCII without the
// space, so a key never starts with padding.
const (
	keyFirst = '!'
	keyLast  = '~'
)

// recordSplit appends whole records up to size bytes.
func recordSplit(b []byte, size int64, rng *rand.Rand) []byte {
	const payload = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	for int64(len(b)+RecordSize) <= size {
		for range KeySize {
			b = append(b, byte(keyFirst+rng.IntN(keyLast-keyFirst+1)))
		}
		for i := range RecordSize - KeySize - 1 {
			b = append(b, payload[(i+rng.IntN(4))%len(payload)])
		}
		b = append(b, '\n')
	}
	return b
}
