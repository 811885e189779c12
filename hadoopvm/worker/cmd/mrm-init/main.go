// Command mrm-init is the /init of mrmarket's worker guest: a static Go
// binary (CGO_ENABLED=0) in an initramfs beside the kernel's virtio modules
// and the node's seed. It mounts /dev, /proc and /sys, loads the modules,
// reads its seed (/seed/user-data, a worker.Config), sets eth0's address,
// finds its input and scratch disks by serial and the control port by
// name, serves its data to the other workers and runs the facade's tasks
// (hadoopvm/worker). The guest has nothing else: no shell, no file system
// but the initramfs. As PID 1 it must not exit, so on a fatal error it
// says why on the console and powers the guest off.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrmarket/mrmarket/hadoopvm/worker"
	"github.com/mrmarket/mrmarket/internal/retry"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("mrm-init: ")
	log.Print(run()) // it returns only on a fatal error
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {}
}

// sessionRetry is how the worker opens its control port again after a
// session ended (the facade went away or has not come yet).
var sessionRetry = retry.Options{InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, Multiplier: 2}

func run() error {
	if err := worker.MountBasics(); err != nil {
		return err
	}
	limitMemory()
	if err := worker.LoadModules(); err != nil {
		return err
	}
	var cfg worker.Config
	b, err := os.ReadFile(worker.UserData)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("%s: %w", worker.UserData, err)
	}
	if err := worker.ConfigureNet("eth0", cfg.Address); err != nil {
		return err
	}
	disk := func(serial string, write bool) (*worker.Disk, error) {
		dev, err := worker.FindDisk(serial)
		if err != nil {
			return nil, err
		}
		return worker.OpenDisk(dev, write)
	}
	input, err := disk(worker.InputSerial, false)
	if err != nil {
		return err
	}
	scratch, err := disk(worker.ScratchSerial, true)
	if err != nil {
		return err
	}
	w := worker.New(cfg, input, scratch)
	port := cfg.Port
	if port == 0 {
		port = worker.DataPort
	}
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return err
	}
	go func() { log.Print(w.Serve(ln)) }()
	path, err := worker.FindPort(worker.ControlPort)
	if err != nil {
		return err
	}
	log.Printf("%s: %s, input %d MiB, scratch %d MiB, control %s, %d MiB available", cfg.VM, cfg.Address, input.Size()>>20, scratch.Size()>>20,
		path, memAvailable()>>20)
	ctx := context.Background()
	for {
		for r := retry.Start(ctx, sessionRetry); r.Next(); {
			if session(ctx, w, path) {
				break // a session ran: the next try starts at once
			}
		}
	}
}

// session runs one control session on the port, opened blocking (not
// through Go's poller: the port reports a hang-up while no host is
// connected). It reports whether the facade sent anything.
func session(ctx context.Context, w *worker.Worker, path string) bool {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		log.Printf("control port: %v", err)
		return false
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	c := &counting{File: f}
	err = w.Run(ctx, c)
	if c.read > 0 {
		log.Printf("control session ended: %v", err)
	}
	return c.read > 0
}

// counting counts what a session read.
type counting struct {
	*os.File
	read int
}

func (c *counting) Read(p []byte) (int, error) {
	n, err := c.File.Read(p)
	c.read += n
	return n, err
}

// limitMemory keeps the Go heap within most of what the guest has: the
// kernel and the initramfs hold the rest.
func limitMemory() {
	if avail := memAvailable(); avail > 0 {
		debug.SetMemoryLimit(avail * 8 / 10)
	}
}

// memAvailable is the guest's available memory in bytes (0: unknown).
func memAvailable() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemAvailable:" {
			if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
