package cluster_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"libvirt.org/go/libvirt"

	"github.com/mrmarket/mrmarket/agent/virt"
	"github.com/mrmarket/mrmarket/hadoopvm/cluster"
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
