package virt

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"libvirt.org/go/libvirtxml"
)

// Disk weights act only where the block device's I/O scheduler reads them:
// libvirt writes blkio.bfq.weight, which BFQ alone honours; under
// mq-deadline, kyber or none a blkio weight is accepted, reported back,
// and does nothing (docs/PLATFORM.md). So the agent
// says at start, for every device backing a managed domain's disks, which
// scheduler it runs and whether the disk shares it sets are delivered.

// DiskDevice is a block device backing managed domains' disks.
type DiskDevice struct {
	Name      string   // the whole disk, e.g. sda, nvme0n1, dm-0
	Scheduler string   // its active I/O scheduler (queue/scheduler), "" if unreadable
	Domains   []string // the managed domains with a disk on it
}

// Weighs reports whether blkio weights act on the device (BFQ).
func (d DiskDevice) Weighs() bool { return d.Scheduler == "bfq" }

// DiskDevices lists the block devices backing the managed domains' disks
// (file-backed disks by the filesystem they live on, block-backed ones by
// their device), read under sysfs ("" for /sys), and the servers of their
// network disks (by protocol and address, with no scheduler).
func (e *Enforcer) DiskDevices(sysfs string) ([]DiskDevice, error) {
	if sysfs == "" {
		sysfs = "/sys"
	}
	doms, _, err := e.managed()
	if err != nil {
		return nil, err
	}
	defer freeAll(doms)
	byName := map[string]*DiskDevice{}
	for vm, d := range doms {
		desc, err := d.GetXMLDesc(0)
		if err != nil {
			continue
		}
		var dx libvirtxml.Domain
		if dx.Unmarshal(desc) != nil || dx.Devices == nil {
			continue
		}
		for _, disk := range dx.Devices.Disks {
			name := networkSource(disk)
			if name == "" {
				path := diskSource(disk)
				if path == "" {
					continue
				}
				if name, err = blockDevice(sysfs, path); err != nil {
					continue
				}
			}
			dev := byName[name]
			if dev == nil {
				dev = &DiskDevice{Name: name}
				if disk.Source.Network == nil {
					dev.Scheduler, _ = Scheduler(sysfs, name)
				} else {
					dev.Scheduler = "no host I/O scheduler"
				}
				byName[name] = dev
			}
			if len(dev.Domains) == 0 || dev.Domains[len(dev.Domains)-1] != vm {
				dev.Domains = append(dev.Domains, vm)
			}
		}
	}
	out := make([]DiskDevice, 0, len(byName))
	for _, d := range byName {
		sort.Strings(d.Domains)
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// diskSource is the host path behind a domain disk: its file or block
// device ("" for network and other sources).
func diskSource(d libvirtxml.DomainDisk) string {
	switch {
	case d.Source == nil:
		return ""
	case d.Source.File != nil:
		return d.Source.File.File
	case d.Source.Block != nil:
		return d.Source.Block.Dev
	}
	return ""
}

// networkSource names a network disk's server ("nbd 127.0.0.1:10809"):
// the guest reads it through QEMU's own client, past every host I/O
// scheduler, so only a throttle shares it; "" for other sources.
func networkSource(d libvirtxml.DomainDisk) string {
	if d.Source == nil || d.Source.Network == nil {
		return ""
	}
	n := d.Source.Network
	name := n.Protocol
	for _, h := range n.Hosts {
		switch {
		case h.Socket != "":
			name += " " + h.Socket
		case h.Port != "":
			name += " " + h.Name + ":" + h.Port
		default:
			name += " " + h.Name
		}
	}
	return name
}

// blockDevice is the whole block device a path lives on (a file: its
// filesystem's; a block device node: itself), by its number in
// sysfs/dev/block.
func blockDevice(sysfs, path string) (string, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return "", err
	}
	dev := st.Dev
	if st.Mode&syscall.S_IFMT == syscall.S_IFBLK {
		dev = st.Rdev
	}
	major := (dev>>8)&0xfff | (dev>>32)&^uint64(0xfff)
	minor := dev&0xff | (dev>>12)&^uint64(0xff)
	link := filepath.Join(sysfs, "dev", "block", fmt.Sprintf("%d:%d", major, minor))
	dir, err := filepath.EvalSymlinks(link)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "partition")); err == nil {
		dir = filepath.Dir(dir) // a partition's queue is its disk's
	}
	return filepath.Base(dir), nil
}

// Scheduler is block device name's active I/O scheduler under sysfs: the
// bracketed entry of queue/scheduler ("none" where it has no choice).
func Scheduler(sysfs, name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(sysfs, "block", name, "queue", "scheduler"))
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if i, j := strings.IndexByte(s, '['), strings.IndexByte(s, ']'); i >= 0 && j > i {
		return s[i+1 : j], nil
	}
	return s, nil
}

// SetScheduler switches block device name's I/O scheduler under sysfs
// (e.g. to "bfq", so that blkio weights act): the kernel refuses one it
// does not have (modprobe bfq first).
func SetScheduler(sysfs, name, scheduler string) error {
	if sysfs == "" {
		sysfs = "/sys"
	}
	path := filepath.Join(sysfs, "block", name, "queue", "scheduler")
	if err := os.WriteFile(path, []byte(scheduler), 0o644); err != nil {
		return fmt.Errorf("virt: switching %s to %s: %w", name, scheduler, err)
	}
	if got, err := Scheduler(sysfs, name); err != nil || got != scheduler {
		return fmt.Errorf("virt: %s runs %q after switching to %s (%v)", name, got, scheduler, err)
	}
	return nil
}

// IOController reports whether the cgroup v2 io controller (io.weight) is
// available under the cgroup root cgroupfs ("" for /sys/fs/cgroup): only
// on a unified (v2) hierarchy, where cgroup.controllers lists "io". On a
// v1 or hybrid host libvirt's blkio weights go to blkio.bfq.weight.
func IOController(cgroupfs string) bool {
	if cgroupfs == "" {
		cgroupfs = "/sys/fs/cgroup"
	}
	b, err := os.ReadFile(filepath.Join(cgroupfs, "cgroup.controllers"))
	if err != nil {
		return false
	}
	for _, c := range strings.Fields(string(b)) {
		if c == "io" {
			return true
		}
	}
	return false
}
