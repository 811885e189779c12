package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"libvirt.org/go/libvirt"

	"github.com/mrmarket/mrmarket/agent/virt"
	"github.com/mrmarket/mrmarket/hadoopvm/cluster"
	"github.com/mrmarket/mrmarket/hadoopvm/worker"
)

// testDriver is one connection to libvirt's test driver, whose state lives
// in the connection.
func testDriver(t *testing.T) *libvirt.Connect {
	t.Helper()
	conn, err := libvirt.NewConnect("test:///default")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("libvirt is required in CI: %v", err)
		}
		t.Skipf("libvirt not available (apt-get install libvirt0): %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func spec(t *testing.T) cluster.Spec {
	return cluster.Spec{Name: "digg", Owner: "alice", Workers: 3, Image: "/var/lib/libvirt/images/hadoop.qcow2",
		Hosts:   []cluster.Host{{ID: "host-1", URI: "test:///default"}, {ID: "host-2", URI: "test:///default"}},
		SeedDir: t.TempDir(), DomainType: "test"}
}

func TestPlanAndSeed(t *testing.T) {
	s := spec(t)
	nodes, err := cluster.Plan(s)
	if err != nil {
		t.Fatal(err)
	}
	want := []cluster.Node{{VM: "digg-master-0", Role: "master", Host: "host-1"}, {VM: "digg-worker-0", Role: "worker", Host: "host-2"},
		{VM: "digg-worker-1", Role: "worker", Host: "host-1"}, {VM: "digg-worker-2", Role: "worker", Host: "host-2"}}
	for i := range want {
		if nodes[i] != want[i] {
			t.Fatalf("plan %+v", nodes)
		}
	}
	meta, user := cluster.Seed(s, nodes[1], nodes)
	for _, w := range []string{"instance-id: digg-worker-0", "local-hostname: digg-worker-0"} {
		if !strings.Contains(string(meta), w) {
			t.Errorf("meta-data lacks %q:\n%s", w, meta)
		}
	}
	for _, w := range []string{"#cloud-config", "<name>fs.defaultFS</name><value>hdfs://digg-master-0:9000</value>",
		"<name>yarn.resourcemanager.hostname</name><value>digg-master-0</value>", "<name>dfs.replication</name><value>3</value>",
		"<name>mapreduce.framework.name</name><value>yarn</value>", "yarn --daemon start nodemanager", "hdfs --daemon start datanode"} {
		if !strings.Contains(string(user), w) {
			t.Errorf("user-data lacks %q", w)
		}
	}
	if _, user := cluster.Seed(s, nodes[0], nodes); !strings.Contains(string(user), "yarn --daemon start resourcemanager") {
		t.Error("the master does not start the ResourceManager")
	}
	bad := s
	bad.Name = "a.b"
	if _, err := cluster.Plan(bad); err == nil {
		t.Fatal("a cluster named a.b was accepted")
	}
}

// TestCreateListDeleteOnTheTestDriver: the cluster's domains are defined
// and started with their seeds, the agent's enforcer sees them as alice's,
// list reads them back and delete removes them.
func TestCreateListDeleteOnTheTestDriver(t *testing.T) {
	conn := testDriver(t)
	s := spec(t)
	c := &cluster.Connector{Dial: func(string) (*libvirt.Connect, error) { return conn, nil }}
	nodes, err := c.Create(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 4 {
		t.Fatalf("nodes %+v", nodes)
	}
	for _, n := range nodes {
		for _, f := range []string{"meta-data", "user-data"} {
			if _, err := os.Stat(filepath.Join(s.SeedDir, n.VM, f)); err != nil {
				t.Fatal(err)
			}
		}
	}
	members, err := c.List(s.Hosts[:1])
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 4 || !members[0].Running || members[0].Owner != "alice" || members[0].Cluster != "digg" {
		t.Fatalf("members %+v", members)
	}
	enf, err := virt.NewWithConn(virt.Config{}, conn)
	if err != nil {
		t.Fatal(err)
	}
	vms, err := enf.VMs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	owned := 0
	for _, v := range vms {
		if strings.HasPrefix(v.ID, "digg-") && v.Owner == "alice" {
			owned++
		}
	}
	if owned != 4 {
		t.Fatalf("the agent sees %d of the cluster's VMs: %+v", owned, vms)
	}
	gone, err := c.Delete("digg", s.Hosts[:1])
	if err != nil || len(gone) != 4 {
		t.Fatalf("delete: %+v %v", gone, err)
	}
	if left, _ := c.List(s.Hosts[:1]); len(left) != 0 {
		t.Fatalf("left after delete: %+v", left)
	}
	// A second cluster with the same names fails half way and rolls back.
	if _, err := c.Create(s); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(s); err == nil {
		t.Fatal("a cluster created twice")
	}
	if left, _ := c.List(s.Hosts[:1]); len(left) != 4 {
		t.Fatalf("the failed create touched the first cluster: %+v", left)
	}
}

// guestSpec is a cluster of the project's worker guest, its input images
// made.
func guestSpec(t *testing.T) cluster.Spec {
	t.Helper()
	dir := t.TempDir()
	guest := filepath.Join(dir, "guest")
	inputs := filepath.Join(dir, "inputs")
	for _, d := range []string{guest, inputs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(guest, cluster.GuestInitrd), []byte("the guest's archive"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := cluster.Spec{Name: "wc", Owner: "alice", Workers: 3, Guest: guest, InputDir: inputs, SeedDir: filepath.Join(dir, "seeds"),
		Hosts: []cluster.Host{{ID: "host-1", URI: "test:///default"}, {ID: "host-2", URI: "test:///default"}}, Bridge: "br-test",
		Subnet: "10.9.0.0/24", DomainType: "test", ScratchMiB: 8}
	for i := range 3 {
		if err := os.WriteFile(filepath.Join(inputs, fmt.Sprintf("wc-worker-%d.img", i)), make([]byte, 4096), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// TestGuestPlanSeedAndDomain: a worker guest cluster is its workers only,
// round-robin from the first host, each with an address of the subnet; a
// worker's seed names every worker's address and is appended to the
// guest's initramfs; its domain boots that initramfs with its disks by
// serial, a tap on the bridge and the control channel.
func TestGuestPlanSeedAndDomain(t *testing.T) {
	s := guestSpec(t)
	nodes, err := cluster.Plan(s)
	if err != nil {
		t.Fatal(err)
	}
	want := []cluster.Node{{VM: "wc-worker-0", Role: "worker", Host: "host-1", Address: "10.9.0.10/24"},
		{VM: "wc-worker-1", Role: "worker", Host: "host-2", Address: "10.9.0.11/24"}, {VM: "wc-worker-2", Role: "worker", Host: "host-1", Address: "10.9.0.12/24"}}
	if !slices.Equal(nodes, want) {
		t.Fatalf("plan %+v", nodes)
	}
	if err := cluster.WriteSeed(s, nodes[1], nodes); err != nil {
		t.Fatal(err)
	}
	var cfg worker.Config
	b, err := os.ReadFile(cluster.GuestFile(s, "wc-worker-1", "user-data"))
	if err != nil || json.Unmarshal(b, &cfg) != nil {
		t.Fatalf("user-data %s %v", b, err)
	}
	if cfg.VM != "wc-worker-1" || cfg.Address != "10.9.0.11/24" || cfg.Slots != 2 || len(cfg.Peers) != 3 || cfg.Peers["wc-worker-2"] != "10.9.0.12" {
		t.Fatalf("seed %+v", cfg)
	}
	initrd, err := os.ReadFile(cluster.GuestFile(s, "wc-worker-1", cluster.GuestInitrd))
	if err != nil || !bytes.HasPrefix(initrd, []byte("the guest's archive")) || !bytes.Contains(initrd, []byte("seed/user-data")) ||
		!bytes.Contains(initrd, b) {
		t.Fatalf("the worker's initramfs is not the guest's with its seed appended: %v", err)
	}
	if st, err := os.Stat(cluster.ScratchImage(s, "wc-worker-1")); err != nil || st.Size() != 8<<20 {
		t.Fatalf("scratch disk %+v %v", st, err)
	}
	x, err := cluster.DomainXML(s, nodes[1])
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"<kernel>" + filepath.Join(s.Guest, "vmlinuz") + "</kernel>",
		"<initrd>" + cluster.GuestFile(s, "wc-worker-1", "initrd.img") + "</initrd>",
		"<serial>mrm-scratch</serial>", "<serial>mrm-input</serial>", "<readonly></readonly>", `<source bridge="br-test">`,
		`<target type="virtio" name="org.mrmarket.worker.0">`, `<memory unit="MiB">160</memory>`, `owner="alice"`, `cache="none"`} {
		if !strings.Contains(x, w) {
			t.Errorf("domain lacks %s:\n%s", w, x)
		}
	}
	bad := s
	bad.InputDir = ""
	if _, err := cluster.Plan(bad); err == nil {
		t.Error("a guest cluster without inputs was accepted")
	}
	bad = guestSpec(t)
	bad.Subnet = "10.9.0.0/29" // room for .10? no
	if _, err := cluster.Plan(bad); err == nil {
		t.Error("a subnet too small was accepted")
	}
}

// TestCreateGuestsOnTheTestDriver: the workers are defined and started
// with their seeds, owned by alice for the agent; a worker without its
// input image is refused before anything is defined.
func TestCreateGuestsOnTheTestDriver(t *testing.T) {
	conn := testDriver(t)
	s := guestSpec(t)
	c := &cluster.Connector{Dial: func(string) (*libvirt.Connect, error) { return conn, nil }}
	nodes, err := c.Create(s)
	if err != nil {
		t.Fatal(err)
	}
	members, err := c.List(s.Hosts[:1])
	if err != nil || len(members) != len(nodes) || members[0].Owner != "alice" || !members[0].Running {
		t.Fatalf("members %+v %v", members, err)
	}
	if _, err := c.Delete("wc", s.Hosts[:1]); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(cluster.InputImage(s, "wc-worker-2")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(s); err == nil || !strings.Contains(err.Error(), "input disk") {
		t.Fatalf("created without an input disk: %v", err)
	}
	if left, _ := c.List(s.Hosts[:1]); len(left) != 0 {
		t.Fatalf("left after a failed create: %+v", left)
	}
}
