package virt

import (
	"testing"

	"libvirt.org/go/libvirtxml"
)

// TestNetworkDisksAreNamedByTheirServer: a guest's NBD disk is no host
// block device; the agent's start line names it by its server, with no
// scheduler, rather than saying the host has no managed disk.
func TestNetworkDisksAreNamedByTheirServer(t *testing.T) {
	for _, c := range []struct {
		src  *libvirtxml.DomainDiskSource
		want string
	}{
		{&libvirtxml.DomainDiskSource{Network: &libvirtxml.DomainDiskSourceNetwork{Protocol: "nbd", Name: "d1",
			Hosts: []libvirtxml.DomainDiskSourceHost{{Name: "127.0.0.1", Port: "10809"}}}}, "nbd 127.0.0.1:10809"},
		{&libvirtxml.DomainDiskSource{Network: &libvirtxml.DomainDiskSourceNetwork{Protocol: "nbd",
			Hosts: []libvirtxml.DomainDiskSourceHost{{Transport: "unix", Socket: "/run/nbd.sock"}}}}, "nbd /run/nbd.sock"},
		{&libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: "/var/lib/a.img"}}, ""},
		{nil, ""},
	} {
		if got := networkSource(libvirtxml.DomainDisk{Source: c.src}); got != c.want {
			t.Errorf("%+v: %q, want %q", c.src, got, c.want)
		}
	}
}
