package cluster

import (
	"bytes"
	"fmt"
	"html"
	"sort"
	"strings"
)

// Seed renders a node's NoCloud meta-data and user-data: the Hadoop site
// files and the daemons its role runs. The image is expected to carry a
// Hadoop 3 distribution in /opt/hadoop (HADOOP_HOME) and a JDK.
func Seed(s Spec, n Node, nodes []Node) (metaData, userData []byte) {
	metaData = fmt.Appendf(nil, "instance-id: %s\nlocal-hostname: %s\n", n.VM, n.VM)
	master := nodes[0].VM
	replication := min(3, max(1, len(nodes)-1))
	files := map[string]map[string]string{
		"core-site.xml": {"fs.defaultFS": "hdfs://" + master + ":9000"},
		"hdfs-site.xml": {"dfs.replication": fmt.Sprint(replication), "dfs.namenode.name.dir": "/var/lib/hadoop/name", "dfs.datanode.data.dir": "/var/lib/hadoop/data"},
		"yarn-site.xml": {
			"yarn.resourcemanager.hostname":        master,
			"yarn.nodemanager.aux-services":        "mapreduce_shuffle",
			"yarn.nodemanager.resource.memory-mb":  fmt.Sprint(max(int(s.MemoryMiB)-512, 512)),
			"yarn.nodemanager.resource.cpu-vcores": fmt.Sprint(s.VCPUs),
			"yarn.nodemanager.hostname":            n.VM,
		},
		"mapred-site.xml": {
			"mapreduce.framework.name":            "yarn",
			"mapreduce.jobhistory.address":        master + ":10020",
			"mapreduce.jobhistory.webapp.address": master + ":19888",
			"yarn.app.mapreduce.am.env":           "HADOOP_MAPRED_HOME=/opt/hadoop",
			"mapreduce.map.env":                   "HADOOP_MAPRED_HOME=/opt/hadoop",
			"mapreduce.reduce.env":                "HADOOP_MAPRED_HOME=/opt/hadoop",
		},
	}
	var u bytes.Buffer
	u.WriteString("#cloud-config\n")
	fmt.Fprintf(&u, "hostname: %s\nfqdn: %s\nmanage_etc_hosts: true\n", n.VM, n.VM)
	u.WriteString("write_files:\n")
	names := make([]string, 0, len(files))
	for f := range files {
		names = append(names, f)
	}
	sort.Strings(names)
	for _, f := range names {
		fmt.Fprintf(&u, "  - path: /opt/hadoop/etc/hadoop/%s\n    permissions: '0644'\n    content: |\n", f)
		for _, line := range strings.Split(siteXML(files[f]), "\n") {
			fmt.Fprintf(&u, "      %s\n", line)
		}
	}
	u.WriteString("runcmd:\n")
	run := func(cmd string) {
		fmt.Fprintf(&u, "  - [sh, -c, %q]\n", "export HADOOP_HOME=/opt/hadoop PATH=/opt/hadoop/bin:$PATH; "+cmd)
	}
	run("mkdir -p /var/lib/hadoop")
	if n.Role == Master {
		run("[ -d /var/lib/hadoop/name/current ] || hdfs namenode -format -nonInteractive")
		run("hdfs --daemon start namenode")
		run("yarn --daemon start resourcemanager")
		run("mapred --daemon start historyserver")
	} else {
		run("hdfs --daemon start datanode")
		run("yarn --daemon start nodemanager")
	}
	return metaData, u.Bytes()
}

// siteXML renders Hadoop's configuration format.
func siteXML(props map[string]string) string {
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("<?xml version=\"1.0\"?>\n<configuration>\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "  <property><name>%s</name><value>%s</value></property>\n", html.EscapeString(k), html.EscapeString(props[k]))
	}
	b.WriteString("</configuration>")
	return b.String()
}
