package worker

import (
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
)

// File is an entry of an initramfs: a regular file (Mode 0o755 for the
// init, 0o644 for the rest) whose parent directories are made for it.
type File struct {
	Name string
	Mode uint32
	Data []byte
}

// WriteInitramfs writes files as a newc cpio archive, the format the
// kernel unpacks into its rootfs. Archives concatenate: the kernel unpacks
// one after the other, so a node's seed is appended to the guest's
// initramfs without rewriting it.
func WriteInitramfs(w io.Writer, files []File) error {
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	cw := &cpioWriter{w: w}
	dirs := map[string]bool{}
	for _, f := range sorted {
		name := strings.TrimPrefix(path.Clean("/"+f.Name), "/")
		var parents []string
		for d := path.Dir(name); d != "." && !dirs[d]; d = path.Dir(d) {
			parents = append(parents, d)
			dirs[d] = true
		}
		for i := len(parents) - 1; i >= 0; i-- {
			cw.entry(parents[i], 0o040755, nil)
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		cw.entry(name, 0o100000|mode, f.Data)
	}
	cw.entry("TRAILER!!!", 0, nil)
	return cw.err
}

type cpioWriter struct {
	w   io.Writer
	n   int64
	ino int
	err error
}

func (c *cpioWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	k, err := c.w.Write(b)
	c.n += int64(k)
	c.err = err
}

func (c *cpioWriter) pad() {
	if r := c.n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

func (c *cpioWriter) entry(name string, mode uint32, data []byte) {
	c.ino++
	nlink := 1
	if mode&0o040000 != 0 {
		nlink = 2
	}
	c.write(fmt.Appendf(nil, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0))
	c.write(append([]byte(name), 0))
	c.pad()
	c.write(data)
	c.pad()
}
