package virt_test

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// sharedDisk is a block device for the disk share tests: an NBD server
// (the fixed-newstyle protocol QEMU speaks, read-only, zeros) whose exports
// all draw on one bandwidth — a shared disk of bounded speed that divides
// itself among its readers in arrival order, as a disk under mq-deadline
// does, whatever the VMs pay. A real shared bottleneck is needed because
// this host's own disk outruns TCG guests, which are bound by their
// emulated CPU (docs/PLATFORM.md): the guests, not the disk, would be what
// limits them.
type sharedDisk struct {
	ln   net.Listener
	size uint64

	mu   sync.Mutex // held while a read waits for its bytes: arrival order
	rate float64    // bytes per second
	next time.Time  // when the device is free
}

// NBD protocol constants (https://github.com/NetworkBlockDevice/nbd/blob/master/doc/proto.md).
const (
	nbdMagic          = 0x4e42444d41474943 // "NBDMAGIC"
	nbdOptMagic       = 0x49484156454f5054 // "IHAVEOPT"
	nbdRepMagic       = 0x3e889045565a9
	nbdReqMagic       = 0x25609513
	nbdSimpleReply    = 0x67446698
	nbdFlagFixed      = 1 << 0
	nbdFlagNoZeroes   = 1 << 1
	nbdOptExportName  = 1
	nbdOptAbort       = 2
	nbdOptGo          = 7
	nbdRepAck         = 1
	nbdRepInfo        = 3
	nbdRepErrUnsup    = 1<<31 + 1
	nbdInfoExport     = 0
	nbdTransHasFlags  = 1 << 0
	nbdTransReadOnly  = 1 << 1
	nbdCmdRead        = 0
	nbdCmdDisc        = 2
	nbdCmdFlush       = 3
	nbdErrPerm        = 1
	nbdErrInval       = 22
	nbdTransSendFlush = 1 << 2
)

// startSharedDisk serves exports of size bytes at mibps MiB/s in all on a
// random loopback port until the test ends.
func startSharedDisk(t testing.TB, size uint64, mibps float64) *sharedDisk {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &sharedDisk{ln: ln, size: size, rate: mibps * (1 << 20)}
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); _ = d.serve(c) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return d
}

// port is the server's port.
func (d *sharedDisk) port() int { return d.ln.Addr().(*net.TCPAddr).Port }

// take waits until the device has moved n bytes for the caller.
func (d *sharedDisk) take(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	if d.next.Before(now) {
		d.next = now
	}
	d.next = d.next.Add(time.Duration(float64(n) / d.rate * float64(time.Second)))
	time.Sleep(time.Until(d.next))
}

func (d *sharedDisk) serve(c net.Conn) error {
	be := binary.BigEndian
	hello := make([]byte, 18)
	be.PutUint64(hello, nbdMagic)
	be.PutUint64(hello[8:], nbdOptMagic)
	be.PutUint16(hello[16:], nbdFlagFixed|nbdFlagNoZeroes)
	if _, err := c.Write(hello); err != nil {
		return err
	}
	var clientFlags [4]byte
	if _, err := io.ReadFull(c, clientFlags[:]); err != nil {
		return err
	}
	flags := uint16(nbdTransHasFlags | nbdTransReadOnly | nbdTransSendFlush)
	reply := func(opt, typ uint32, data []byte) error {
		b := make([]byte, 20+len(data))
		be.PutUint64(b, nbdRepMagic)
		be.PutUint32(b[8:], opt)
		be.PutUint32(b[12:], typ)
		be.PutUint32(b[16:], uint32(len(data)))
		copy(b[20:], data)
		_, err := c.Write(b)
		return err
	}
	for { // options
		var h [16]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return err
		}
		if be.Uint64(h[:]) != nbdOptMagic {
			return errors.New("nbd: bad option magic")
		}
		opt, n := be.Uint32(h[8:]), be.Uint32(h[12:])
		if _, err := io.CopyN(io.Discard, c, int64(n)); err != nil {
			return err
		}
		switch opt {
		case nbdOptExportName: // the old way in: size and flags, no reply header
			b := make([]byte, 10)
			be.PutUint64(b, d.size)
			be.PutUint16(b[8:], flags)
			if _, err := c.Write(b); err != nil {
				return err
			}
		case nbdOptGo:
			info := make([]byte, 12)
			be.PutUint16(info, nbdInfoExport)
			be.PutUint64(info[2:], d.size)
			be.PutUint16(info[10:], flags)
			if err := reply(opt, nbdRepInfo, info); err != nil {
				return err
			}
			if err := reply(opt, nbdRepAck, nil); err != nil {
				return err
			}
		case nbdOptAbort:
			_ = reply(opt, nbdRepAck, nil)
			return nil
		default:
			if err := reply(opt, nbdRepErrUnsup, nil); err != nil {
				return err
			}
			continue
		}
		break
	}
	zeros := make([]byte, 4<<20)
	for { // transmission
		var r [28]byte
		if _, err := io.ReadFull(c, r[:]); err != nil {
			return err
		}
		if be.Uint32(r[:]) != nbdReqMagic {
			return errors.New("nbd: bad request magic")
		}
		typ, handle, off, n := be.Uint16(r[6:]), be.Uint64(r[8:]), be.Uint64(r[16:]), be.Uint32(r[24:])
		var errno uint32
		var data []byte
		switch typ {
		case nbdCmdRead:
			if off+uint64(n) > d.size || int(n) > len(zeros) {
				errno = nbdErrInval
				break
			}
			d.take(int(n))
			data = zeros[:n]
		case nbdCmdFlush:
		case nbdCmdDisc:
			return nil
		default:
			errno = nbdErrPerm // read-only
			if typ == 1 {      // a write's payload follows its header
				if _, err := io.CopyN(io.Discard, c, int64(n)); err != nil {
					return err
				}
			}
		}
		head := make([]byte, 16)
		be.PutUint32(head, nbdSimpleReply)
		be.PutUint32(head[4:], errno)
		be.PutUint64(head[8:], handle)
		reply := net.Buffers{head, data}
		if _, err := reply.WriteTo(c); err != nil {
			return err
		}
	}
}
