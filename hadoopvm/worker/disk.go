package worker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// Disk is a block device (or, in tests, a file) read and written in
// BlockSize units with O_DIRECT where the file system allows it: in the
// guest every byte goes through the virtio disk, whose throughput the
// agent shares out, and none is served from the page cache.
type Disk struct {
	f      *os.File
	Direct bool
	size   int64

	mu   sync.Mutex
	next int64 // the scratch allocator's next free byte
}

// OpenDisk opens path for reading (and writing when write), with O_DIRECT
// unless the file system refuses it (tmpfs does).
func OpenDisk(path string, write bool) (*Disk, error) {
	flags := os.O_RDONLY
	if write {
		flags = os.O_RDWR
	}
	d := &Disk{Direct: true}
	f, err := os.OpenFile(path, flags|syscall.O_DIRECT, 0)
	if errors.Is(err, syscall.EINVAL) {
		d.Direct = false
		f, err = os.OpenFile(path, flags, 0)
	}
	if err != nil {
		return nil, err
	}
	d.f = f
	if d.size, err = f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil, err
	}
	return d, nil
}

// Size is the disk's size in bytes.
func (d *Disk) Size() int64 { return d.size }

// Close closes the disk.
func (d *Disk) Close() error { return d.f.Close() }

// aligned is a buffer of n bytes (a multiple of BlockSize) whose start is
// aligned to BlockSize, as O_DIRECT requires of memory.
func aligned(n int) []byte {
	b := make([]byte, n+BlockSize)
	off := int(uintptr(unsafe.Pointer(&b[0])) & (BlockSize - 1))
	if off != 0 {
		off = BlockSize - off
	}
	return b[off : off+n : off+n]
}

// roundUp is n rounded up to a multiple of BlockSize.
func roundUp(n int64) int64 { return (n + BlockSize - 1) / BlockSize * BlockSize }

// chunk is the largest single read or write: 1 MiB, what the guest's
// virtio disk moves in one request.
const chunk = 1 << 20

// ReadAt reads length bytes at off (both BlockSize multiples, or the
// read is widened to them) and calls each with the successive pieces, in
// order, at most a chunk each.
func (d *Disk) ReadAt(off, length int64, each func([]byte) error) error {
	start := off / BlockSize * BlockSize
	end := roundUp(off + length)
	if end > d.size {
		return fmt.Errorf("worker: reading %d bytes at %d beyond the disk's %d", length, off, d.size)
	}
	buf := aligned(chunk)
	skip := off - start
	left := length
	for pos := start; pos < end && left > 0; pos += chunk {
		n := min(int64(chunk), end-pos)
		if _, err := d.f.ReadAt(buf[:n], pos); err != nil {
			return err
		}
		piece := buf[skip:n]
		skip = 0
		if int64(len(piece)) > left {
			piece = piece[:left]
		}
		left -= int64(len(piece))
		if err := each(piece); err != nil {
			return err
		}
	}
	return nil
}

// Read reads length bytes at off into memory.
func (d *Disk) Read(off, length int64) ([]byte, error) {
	out := make([]byte, 0, length)
	err := d.ReadAt(off, length, func(p []byte) error {
		out = append(out, p...)
		return nil
	})
	return out, err
}

// Append writes data at the scratch allocator's next free block and
// returns where it went; the space stays taken until the worker stops
// (its scratch disk is its own, made anew by each boot).
func (d *Disk) Append(data []byte) (Extent, error) {
	n := roundUp(int64(len(data)))
	d.mu.Lock()
	off := d.next
	if off+n > d.size {
		d.mu.Unlock()
		return Extent{}, fmt.Errorf("worker: scratch disk full: %d bytes more at %d of %d", n, off, d.size)
	}
	d.next += n
	d.mu.Unlock()
	buf := aligned(chunk)
	for pos := int64(0); pos < n; pos += chunk {
		k := min(int64(chunk), n-pos)
		m := copy(buf[:k], data[min(pos, int64(len(data))):])
		clear(buf[m:k])
		if _, err := d.f.WriteAt(buf[:k], off+pos); err != nil {
			return Extent{}, err
		}
	}
	if !d.Direct {
		if err := d.f.Sync(); err != nil {
			return Extent{}, err
		}
	}
	return Extent{Offset: off, Length: int64(len(data))}, nil
}
