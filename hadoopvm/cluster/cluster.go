// Package cluster provisions a user's virtual Hadoop cluster as libvirt
// domains: a master (NameNode, ResourceManager, JobHistory Server) and
// workers (DataNode, NodeManager) spread over hypervisor hosts, each with
// the owner metadata the agent reads (so the market governs it as soon as
// it runs) and a cloud-init NoCloud seed that writes Hadoop's core-site,
// hdfs-site, yarn-site and mapred-site and starts the node's daemons.
//
// Decisions:
//   - VM names are "<cluster>-master-0" and "<cluster>-worker-<i>"; they
//     are also the nodes' host names (the YARN monitor maps nodes to VMs by
//     them). The master goes on the first host, workers round-robin from
//     the second (the first when there is one host).
//   - Each VM boots a copy-on-write overlay "<images>/<vm>.qcow2" of the
//     base image (created with qemu-img when missing), and its seed: the
//     files meta-data and user-data under SeedDir/<vm>/, packed as the
//     "cidata" ISO cloud-init looks for (cloud-localds or genisoimage) when
//     BuildSeedImage is set.
//   - Domains are persistent (defined) and started; delete destroys and
//     undefines them. Membership is read back from the metadata, so list
//     and delete work from any machine that reaches the hosts.
//   - Spec.Guest boots mrmarket's own worker guest instead of a Hadoop
//     image (guest.go): workers only, the master being the YARN facade on
//     the host (hadoopvm/yarnfacade).
package cluster

import (
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"libvirt.org/go/libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/mrmarket/mrmarket/agent/virt"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Errors of provisioning.
var (
	ErrSpec = errors.New("cluster: invalid specification")
)

// Roles of the nodes.
const (
	Master = "master"
	Worker = "worker"
)

// Host is a hypervisor and its libvirt URI.
type Host struct {
	ID  string
	URI string
}

// Spec describes a cluster.
type Spec struct {
	Name, Owner    string
	Workers        int
	Hosts          []Host
	Image          string // base disk image (qcow2)
	ImagesDir      string // where the VMs' overlays go; default the image's directory
	MemoryMiB      uint   // default 2048
	VCPUs          uint   // default 2
	Network        string // libvirt network; default "default"
	SeedDir        string // where the seeds are written
	BuildSeedImage bool   // pack each seed as a cidata ISO
	DomainType     string // libvirt domain type; default "kvm" ("qemu" for TCG, "test" for the test driver)

	// The project's worker guest (guest.go), in place of Image.
	Guest      string // directory of `make guest`: vmlinuz and initrd.img
	InputDir   string // each worker's input disk: <InputDir>/<vm>.img
	ScratchMiB uint   // each worker's scratch disk; default 1024
	Bridge     string // a host bridge for the workers' taps, in place of Network
	Subnet     string // the workers' addresses, worker i at the (10+i)-th; default 10.83.0.0/16
	Slots      int    // task slots a worker offers; default 2
}

// Node is one VM of a cluster.
type Node struct {
	VM   string `json:"vm"`
	Role string `json:"role"`
	Host string `json:"host"`
	// Address is a worker guest's, with its prefix.
	Address string `json:"address,omitempty"`
}

func (s *Spec) check() error {
	if err := wire.CheckName("cluster name", s.Name); err != nil {
		return fmt.Errorf("%w: %v", ErrSpec, err)
	}
	if err := wire.CheckName("owner", s.Owner); err != nil {
		return fmt.Errorf("%w: %v", ErrSpec, err)
	}
	if s.Workers < 1 || s.Workers > 1000 {
		return fmt.Errorf("%w: workers must be 1 to 1000, got %d", ErrSpec, s.Workers)
	}
	if len(s.Hosts) == 0 {
		return fmt.Errorf("%w: at least one host", ErrSpec)
	}
	if s.Guest != "" {
		return s.checkGuest()
	}
	if s.Image == "" || s.SeedDir == "" {
		return fmt.Errorf("%w: an image and a seed directory are required", ErrSpec)
	}
	if s.MemoryMiB == 0 {
		s.MemoryMiB = 2048
	}
	if s.VCPUs == 0 {
		s.VCPUs = 2
	}
	if s.Network == "" {
		s.Network = "default"
	}
	if s.DomainType == "" {
		s.DomainType = "kvm"
	}
	if s.ImagesDir == "" {
		s.ImagesDir = filepath.Dir(s.Image)
	}
	return nil
}

// Plan places the cluster's nodes on its hosts.
func Plan(s Spec) ([]Node, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if s.Guest != "" {
		return planGuests(s)
	}
	nodes := []Node{{VM: s.Name + "-master-0", Role: Master, Host: s.Hosts[0].ID}}
	for i := range s.Workers {
		h := s.Hosts[(1+i)%len(s.Hosts)]
		if len(s.Hosts) == 1 {
			h = s.Hosts[0]
		}
		nodes = append(nodes, Node{VM: fmt.Sprintf("%s-worker-%d", s.Name, i), Role: Worker, Host: h.ID})
	}
	return nodes, nil
}

// memberMeta is the metadata element of a cluster VM (the agent reads owner).
type memberMeta struct {
	XMLName xml.Name `xml:"vm"`
	Owner   string   `xml:"owner,attr"`
	Cluster string   `xml:"cluster,attr"`
	Role    string   `xml:"role,attr"`
}

// metadata is a node's metadata element: its owner for the agent, its
// cluster and role for List.
func metadata(s Spec, n Node) *libvirtxml.DomainMetadata {
	return &libvirtxml.DomainMetadata{XML: fmt.Sprintf(`<mrm:vm xmlns:mrm=%q owner=%q cluster=%q role=%q/>`, virt.Namespace, s.Owner, s.Name, n.Role)}
}

// DomainXML is the libvirt definition of a node.
func DomainXML(s Spec, n Node) (string, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	if s.Guest != "" {
		return guestXML(s, n)
	}
	d := domain(s, n)
	d.OS = &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Arch: "x86_64", Type: "hvm"}}
	d.Devices = &libvirtxml.DomainDeviceList{
		Disks: []libvirtxml.DomainDisk{
			{Device: "disk", Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "qcow2"},
				Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: filepath.Join(s.ImagesDir, n.VM+".qcow2")}},
				Target: &libvirtxml.DomainDiskTarget{Dev: "vda", Bus: "virtio"}},
			{Device: "cdrom", Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "raw"},
				Source:   &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: seedISO(s, n)}},
				Target:   &libvirtxml.DomainDiskTarget{Dev: "sda", Bus: "sata"},
				ReadOnly: &libvirtxml.DomainDiskReadOnly{}},
		},
		Interfaces: []libvirtxml.DomainInterface{{
			Source: &libvirtxml.DomainInterfaceSource{Network: &libvirtxml.DomainInterfaceSourceNetwork{Network: s.Network}},
			Model:  &libvirtxml.DomainInterfaceModel{Type: "virtio"},
		}},
		MemBalloon: &libvirtxml.DomainMemBalloon{Model: "virtio"},
	}
	return d.Marshal()
}

// domain is what every node's domain has: its name, type, size and
// metadata.
func domain(s Spec, n Node) *libvirtxml.Domain {
	return &libvirtxml.Domain{
		Type:     s.DomainType,
		Name:     n.VM,
		Metadata: metadata(s, n),
		Memory:   &libvirtxml.DomainMemory{Value: s.MemoryMiB, Unit: "MiB"},
		VCPU:     &libvirtxml.DomainVCPU{Placement: "static", Value: s.VCPUs},
	}
}

func seedISO(s Spec, n Node) string { return filepath.Join(s.SeedDir, n.VM, "seed.iso") }

// WriteSeed writes a node's NoCloud seed (and its ISO when asked).
func WriteSeed(s Spec, n Node, nodes []Node) error {
	if err := s.check(); err != nil {
		return err
	}
	if s.Guest != "" {
		return writeGuestSeed(s, n, nodes)
	}
	dir := filepath.Join(s.SeedDir, n.VM)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	meta, user := Seed(s, n, nodes)
	if err := os.WriteFile(filepath.Join(dir, "meta-data"), meta, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "user-data"), user, 0o644); err != nil {
		return err
	}
	if !s.BuildSeedImage {
		return nil
	}
	iso := seedISO(s, n)
	if p, err := exec.LookPath("cloud-localds"); err == nil {
		if out, err := exec.Command(p, iso, filepath.Join(dir, "user-data"), filepath.Join(dir, "meta-data")).CombinedOutput(); err != nil {
			return fmt.Errorf("cluster: cloud-localds: %v: %s", err, out)
		}
		return nil
	}
	if p, err := exec.LookPath("genisoimage"); err == nil {
		out, err := exec.Command(p, "-quiet", "-output", iso, "-volid", "cidata", "-joliet", "-rock",
			filepath.Join(dir, "user-data"), filepath.Join(dir, "meta-data")).CombinedOutput()
		if err != nil {
			return fmt.Errorf("cluster: genisoimage: %v: %s", err, out)
		}
		return nil
	}
	return errors.New("cluster: packing a seed needs cloud-localds (cloud-image-utils) or genisoimage")
}

// Connector opens (and keeps) libvirt connections by URI.
type Connector struct {
	Dial  func(uri string) (*libvirt.Connect, error) // default libvirt.NewConnect
	conns map[string]*libvirt.Connect
}

func (c *Connector) conn(uri string) (*libvirt.Connect, error) {
	if c.conns == nil {
		c.conns = map[string]*libvirt.Connect{}
	}
	if cn, ok := c.conns[uri]; ok {
		return cn, nil
	}
	dial := c.Dial
	if dial == nil {
		dial = libvirt.NewConnect
	}
	cn, err := dial(uri)
	if err != nil {
		return nil, fmt.Errorf("cluster: connecting to %s: %w", uri, err)
	}
	c.conns[uri] = cn
	return cn, nil
}

// Close closes the connections it opened with its default Dial.
func (c *Connector) Close() {
	if c.Dial != nil {
		return // the caller owns them
	}
	for _, cn := range c.conns {
		_, _ = cn.Close()
	}
}

// Create writes the seeds, defines every node's domain and starts it. On
// failure the domains already defined are removed.
func (c *Connector) Create(s Spec) ([]Node, error) {
	nodes, err := Plan(s)
	if err != nil {
		return nil, err
	}
	uris := map[string]string{}
	for _, h := range s.Hosts {
		uris[h.ID] = h.URI
	}
	var done []Node
	rollback := func(cause error) ([]Node, error) {
		for _, n := range done {
			if cn, err := c.conn(uris[n.Host]); err == nil {
				removeDomain(cn, n.VM)
			}
		}
		return nil, cause
	}
	for _, n := range nodes {
		if err := WriteSeed(s, n, nodes); err != nil {
			return rollback(err)
		}
		xmlDesc, err := DomainXML(s, n)
		if err != nil {
			return rollback(err)
		}
		cn, err := c.conn(uris[n.Host])
		if err != nil {
			return rollback(err)
		}
		d, err := cn.DomainDefineXML(xmlDesc)
		if err != nil {
			return rollback(fmt.Errorf("cluster: defining %s on %s: %w", n.VM, n.Host, err))
		}
		done = append(done, n)
		err = d.Create()
		_ = d.Free()
		if err != nil {
			return rollback(fmt.Errorf("cluster: starting %s on %s: %w", n.VM, n.Host, err))
		}
	}
	return nodes, nil
}

// Member is a provisioned VM as read back from its host.
type Member struct {
	Node
	Cluster string `json:"cluster"`
	Owner   string `json:"owner"`
	Running bool   `json:"running"`
}

// List reads every cluster VM on the hosts.
func (c *Connector) List(hosts []Host) ([]Member, error) {
	var out []Member
	for _, h := range hosts {
		cn, err := c.conn(h.URI)
		if err != nil {
			return nil, err
		}
		doms, err := cn.ListAllDomains(0)
		if err != nil {
			return nil, err
		}
		for i := range doms {
			d := &doms[i]
			name, _ := d.GetName()
			active, _ := d.IsActive()
			flags := libvirt.DOMAIN_AFFECT_CONFIG
			if active {
				flags = libvirt.DOMAIN_AFFECT_LIVE
			}
			raw, err := d.GetMetadata(libvirt.DOMAIN_METADATA_ELEMENT, virt.Namespace, flags)
			_ = d.Free()
			var m memberMeta
			if err != nil || xml.Unmarshal([]byte(raw), &m) != nil || m.Cluster == "" {
				continue
			}
			out = append(out, Member{Node: Node{VM: name, Role: m.Role, Host: h.ID}, Cluster: m.Cluster, Owner: m.Owner, Running: active})
		}
	}
	return out, nil
}

// Delete destroys and undefines every VM of cluster name on the hosts.
func (c *Connector) Delete(name string, hosts []Host) ([]Member, error) {
	members, err := c.List(hosts)
	if err != nil {
		return nil, err
	}
	uris := map[string]string{}
	for _, h := range hosts {
		uris[h.ID] = h.URI
	}
	var gone []Member
	for _, m := range members {
		if m.Cluster != name {
			continue
		}
		cn, err := c.conn(uris[m.Host])
		if err != nil {
			return gone, err
		}
		removeDomain(cn, m.VM)
		gone = append(gone, m)
	}
	return gone, nil
}

func removeDomain(cn *libvirt.Connect, vm string) {
	d, err := cn.LookupDomainByName(vm)
	if err != nil {
		return
	}
	defer d.Free()
	if active, _ := d.IsActive(); active {
		_ = d.Destroy()
	}
	_ = d.Undefine()
}

// ParseHosts parses "id=uri" pairs (the CLI's --host).
func ParseHosts(pairs []string) ([]Host, error) {
	var hosts []Host
	for _, p := range pairs {
		id, uri, ok := strings.Cut(p, "=")
		if !ok || wire.CheckName("host", id) != nil || uri == "" {
			return nil, fmt.Errorf("%w: host %q: want id=libvirt-uri", ErrSpec, p)
		}
		hosts = append(hosts, Host{ID: id, URI: uri})
	}
	return hosts, nil
}
