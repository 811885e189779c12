package cluster

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/mrmarket/mrmarket/hadoopvm/worker"
)

// The project's worker guest (hadoopvm/worker), for when no Hadoop can be
// installed (docs/PLATFORM.md): `make guest` builds a kernel and an
// initramfs whose init is the worker, and Spec.Guest names that directory.
//
//   - Workers only. The master's services are the YARN facade
//     (hadoopvm/yarnfacade) on the host, which the workers report to over
//     a virtio-serial channel, so a cluster of n workers is n domains;
//     workers go round-robin over the hosts from the first.
//   - Direct kernel boot: the domain boots Guest/vmlinuz with its own
//     initramfs, the guest's with the node's seed appended as a second
//     cpio archive (/seed/meta-data, /seed/user-data: a worker.Config),
//     the NoCloud seed's counterpart with no ISO tools and no cloud-init.
//   - Disks by serial: vda is the worker's scratch disk (a sparse raw
//     image, <ImagesDir>/<vm>.scratch, ScratchMiB), vdb its input (the
//     read-only raw image <InputDir>/<vm>.img that `mrm-guest data`
//     writes), both without host caching so what a worker reads and
//     writes is what its drive's throttle lets through.
//   - Network: a tap on Bridge (a bridge the operator or the test made) or
//     on the libvirt Network; the worker's address is in its seed (the
//     (10+i)-th of Subnet for worker i), as are every worker's, so the
//     workers shuffle among themselves with no DHCP or DNS. The agent
//     shapes those taps like any other. A cluster's workers trust each
//     other (their data servers answer whoever asks): give each user's
//     cluster a bridge of its own.
//   - The control channel's socket is libvirt's to place (ControlSocket
//     reads where from the live domain): QEMU listens, the facade
//     connects.
//   - The serial console goes to <SeedDir>/<vm>/console.log, a crash
//     powers the guest off (panic=-1, on_reboot destroy).

// Guest files in a `make guest` directory.
const (
	GuestKernel = "vmlinuz"
	GuestInitrd = "initrd.img"
)

const defaultSubnet = "10.83.0.0/16"

func (s *Spec) checkGuest() error {
	if s.SeedDir == "" || s.InputDir == "" {
		return fmt.Errorf("%w: a guest needs a seed directory and an input directory", ErrSpec)
	}
	if s.Network != "" && s.Bridge != "" {
		return fmt.Errorf("%w: a network or a bridge, not both", ErrSpec)
	}
	if s.Network == "" && s.Bridge == "" {
		s.Network = "default"
	}
	if s.MemoryMiB == 0 {
		s.MemoryMiB = 160
	}
	if s.VCPUs == 0 {
		s.VCPUs = 1
	}
	if s.ScratchMiB == 0 {
		s.ScratchMiB = 1024
	}
	if s.Slots == 0 {
		s.Slots = 2
	}
	if s.Subnet == "" {
		s.Subnet = defaultSubnet
	}
	if s.DomainType == "" {
		s.DomainType = "kvm"
	}
	if s.ImagesDir == "" {
		s.ImagesDir = s.SeedDir
	}
	if _, _, err := net.ParseCIDR(s.Subnet); err != nil {
		return fmt.Errorf("%w: subnet: %v", ErrSpec, err)
	}
	return nil
}

// planGuests places the workers and gives each its address.
func planGuests(s Spec) ([]Node, error) {
	_, subnet, _ := net.ParseCIDR(s.Subnet)
	base := subnet.IP.To4()
	if base == nil {
		return nil, fmt.Errorf("%w: subnet %s is not IPv4", ErrSpec, s.Subnet)
	}
	ones, _ := subnet.Mask.Size()
	var nodes []Node
	for i := range s.Workers {
		ip := make(net.IP, 4)
		binary.BigEndian.PutUint32(ip, binary.BigEndian.Uint32(base)+uint32(10+i))
		if !subnet.Contains(ip) {
			return nil, fmt.Errorf("%w: subnet %s has no room for %d workers", ErrSpec, s.Subnet, s.Workers)
		}
		nodes = append(nodes, Node{VM: fmt.Sprintf("%s-worker-%d", s.Name, i), Role: Worker, Host: s.Hosts[i%len(s.Hosts)].ID,
			Address: fmt.Sprintf("%s/%d", ip, ones)})
	}
	return nodes, nil
}

// GuestFile is one of a guest node's files under the seed directory.
func GuestFile(s Spec, vm, name string) string { return filepath.Join(s.SeedDir, vm, name) }

// ScratchImage is a worker's scratch disk.
func ScratchImage(s Spec, vm string) string {
	dir := s.ImagesDir
	if dir == "" {
		dir = s.SeedDir
	}
	return filepath.Join(dir, vm+".scratch")
}

// InputImage is a worker's input disk.
func InputImage(s Spec, vm string) string { return filepath.Join(s.InputDir, vm+".img") }

func guestXML(s Spec, n Node) (string, error) {
	rawDisk := func(file, dev, serial string, readOnly bool) libvirtxml.DomainDisk {
		d := libvirtxml.DomainDisk{Device: "disk",
			Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw", Cache: "none", IO: "native"},
			Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: file}},
			Target: &libvirtxml.DomainDiskTarget{Dev: dev, Bus: "virtio"}, Serial: serial}
		if readOnly {
			d.ReadOnly = &libvirtxml.DomainDiskReadOnly{}
		}
		return d
	}
	iface := libvirtxml.DomainInterface{Model: &libvirtxml.DomainInterfaceModel{Type: "virtio"}}
	if s.Bridge != "" {
		iface.Source = &libvirtxml.DomainInterfaceSource{Bridge: &libvirtxml.DomainInterfaceSourceBridge{Bridge: s.Bridge}}
	} else {
		iface.Source = &libvirtxml.DomainInterfaceSource{Network: &libvirtxml.DomainInterfaceSourceNetwork{Network: s.Network}}
	}
	port := uint(0)
	d := domain(s, n)
	d.OS = &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Arch: "x86_64", Machine: "pc", Type: "hvm"},
		Kernel: filepath.Join(s.Guest, GuestKernel), Initrd: GuestFile(s, n.VM, GuestInitrd), Cmdline: "console=ttyS0 quiet panic=-1"}
	d.OnReboot = "destroy"
	d.Devices = &libvirtxml.DomainDeviceList{
		Disks: []libvirtxml.DomainDisk{
			rawDisk(ScratchImage(s, n.VM), "vda", worker.ScratchSerial, false),
			rawDisk(InputImage(s, n.VM), "vdb", worker.InputSerial, true),
		},
		Interfaces: []libvirtxml.DomainInterface{iface},
		Channels: []libvirtxml.DomainChannel{{
			Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind"}},
			Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: worker.ControlPort}},
		}},
		Serials: []libvirtxml.DomainSerial{{
			Source: &libvirtxml.DomainChardevSource{File: &libvirtxml.DomainChardevSourceFile{Path: GuestFile(s, n.VM, "console.log")}},
			Target: &libvirtxml.DomainSerialTarget{Port: &port},
		}},
		MemBalloon: &libvirtxml.DomainMemBalloon{Model: "none"},
	}
	return d.Marshal()
}

// GuestConfig is a worker's seed: its address, every worker's, its slots.
func GuestConfig(s Spec, n Node, nodes []Node) worker.Config {
	cfg := worker.Config{VM: n.VM, Address: n.Address, Slots: s.Slots, Peers: map[string]string{}}
	for _, p := range nodes {
		if p.Role == Worker {
			ip, _, _ := strings.Cut(p.Address, "/")
			cfg.Peers[p.VM] = ip
		}
	}
	return cfg
}

// writeGuestSeed writes a worker's seed, its initramfs (the guest's with
// the seed appended) and its scratch disk.
func writeGuestSeed(s Spec, n Node, nodes []Node) error {
	dir := filepath.Join(s.SeedDir, n.VM)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(InputImage(s, n.VM)); err != nil {
		return fmt.Errorf("cluster: %s's input disk (mrm-guest data writes one): %w", n.VM, err)
	}
	meta := fmt.Appendf(nil, "instance-id: %s\nlocal-hostname: %s\n", n.VM, n.VM)
	user, err := json.MarshalIndent(GuestConfig(s, n, nodes), "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "meta-data"), meta, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "user-data"), user, 0o644); err != nil {
		return err
	}
	base, err := os.Open(filepath.Join(s.Guest, GuestInitrd))
	if err != nil {
		return fmt.Errorf("cluster: the guest's initramfs (make guest builds it): %w", err)
	}
	defer base.Close()
	var seed bytes.Buffer
	if err := worker.WriteInitramfs(&seed, []worker.File{{Name: "seed/meta-data", Data: meta}, {Name: "seed/user-data", Data: user}}); err != nil {
		return err
	}
	if err := writeAtomic(GuestFile(s, n.VM, GuestInitrd), io.MultiReader(base, &seed)); err != nil {
		return err
	}
	scratch := ScratchImage(s, n.VM)
	f, err := os.OpenFile(scratch, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	err = f.Truncate(int64(s.ScratchMiB) << 20)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeAtomic writes path from r whole or not at all, readable by
// libvirt's QEMU user.
func writeAtomic(path string, r io.Reader) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// ControlSocket is the unix socket of a running worker guest's control
// channel, where libvirt placed it.
func (c *Connector) ControlSocket(h Host, vm string) (string, error) {
	cn, err := c.conn(h.URI)
	if err != nil {
		return "", err
	}
	d, err := cn.LookupDomainByName(vm)
	if err != nil {
		return "", fmt.Errorf("cluster: %s on %s: %w", vm, h.ID, err)
	}
	defer d.Free()
	raw, err := d.GetXMLDesc(0)
	if err != nil {
		return "", err
	}
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(raw); err != nil {
		return "", err
	}
	if dom.Devices != nil {
		for _, ch := range dom.Devices.Channels {
			if ch.Target != nil && ch.Target.VirtIO != nil && ch.Target.VirtIO.Name == worker.ControlPort &&
				ch.Source != nil && ch.Source.UNIX != nil && ch.Source.UNIX.Path != "" {
				return ch.Source.UNIX.Path, nil
			}
		}
	}
	return "", fmt.Errorf("cluster: %s has no control channel socket", vm)
}
