package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrmarket/mrmarket/internal/retry"
)

// What the guest's init does before the worker runs, in Go rather than a
// shell: the initramfs holds the init, the kernel's modules and the seed,
// nothing else.

// Paths in the initramfs.
const (
	ModulesDir = "/modules" // the virtio modules and their load-order
	SeedDir    = "/seed"    // meta-data and user-data (a Config)
	UserData   = SeedDir + "/user-data"
	LoadOrder  = ModulesDir + "/load-order"
)

// Disk serials: the project's guest finds its disks by them, not by the
// order the kernel names them in.
const (
	InputSerial   = "mrm-input"
	ScratchSerial = "mrm-scratch"
)

// MountBasics mounts devtmpfs, proc and sysfs.
func MountBasics() error {
	for _, m := range []struct{ src, dir, fs string }{{"devtmpfs", "/dev", "devtmpfs"}, {"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}} {
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, m.dir, m.fs, 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount %s: %w", m.dir, err)
		}
	}
	return nil
}

// LoadModules loads the modules listed in LoadOrder, dependencies first.
func LoadModules() error {
	order, err := os.ReadFile(LoadOrder)
	if err != nil {
		return err
	}
	for _, m := range strings.Fields(string(order)) {
		f, err := os.Open(filepath.Join(ModulesDir, m+".ko"))
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("loading %s: %w", m, err)
		}
	}
	return nil
}

// deviceWait is how long the guest waits for a device the kernel probes
// after its module loaded.
var deviceWait = retry.Options{InitialBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, Multiplier: 2, MaxTries: 60}

// ConfigureNet sets iface's address (with its prefix) and brings it and
// the loopback up: the prefix's route is the only one the workers need.
func ConfigureNet(iface, cidr string) error {
	ip, ipnet, err := net.ParseCIDR(cidr)
	if err != nil || ip.To4() == nil {
		return fmt.Errorf("address %q: want an IPv4 address with its prefix", cidr)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	up := func(name string) error {
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return err
		}
		if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
			return err
		}
		ifr.SetUint16(ifr.Uint16() | unix.IFF_UP | unix.IFF_RUNNING)
		return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
	}
	if err := up("lo"); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	set := func(req uint, addr net.IP) error {
		ifr, err := unix.NewIfreq(iface)
		if err != nil {
			return err
		}
		if err := ifr.SetInet4Addr(addr.To4()); err != nil {
			return err
		}
		return unix.IoctlIfreq(fd, req, ifr)
	}
	err = retry.Do(context.Background(), deviceWait, func(error) bool { return true }, func(context.Context) error {
		return set(unix.SIOCSIFADDR, ip)
	})
	if err != nil {
		return fmt.Errorf("%s address: %w", iface, err)
	}
	if err := set(unix.SIOCSIFNETMASK, net.IP(ipnet.Mask)); err != nil {
		return fmt.Errorf("%s netmask: %w", iface, err)
	}
	return up(iface)
}

// FindDisk is the block device whose serial is serial (/dev/vdX).
func FindDisk(serial string) (string, error) {
	return findDevice("/sys/block/*/serial", serial, "disk with serial")
}

// FindPort is the virtio-serial port named name (/dev/vportNpM).
func FindPort(name string) (string, error) {
	return findDevice("/sys/class/virtio-ports/*/name", name, "virtio-serial port")
}

// findDevice waits for the device whose sysfs attribute (glob, one
// device a match) reads want, and returns its /dev node.
func findDevice(glob, want, what string) (string, error) {
	var found string
	err := retry.Do(context.Background(), deviceWait, func(error) bool { return true }, func(context.Context) error {
		attrs, _ := filepath.Glob(glob)
		for _, a := range attrs {
			if b, err := os.ReadFile(a); err == nil && strings.TrimSpace(string(b)) == want {
				found = "/dev/" + filepath.Base(filepath.Dir(a))
				return nil
			}
		}
		return fmt.Errorf("no %s %s", what, want)
	})
	return found, err
}
