// Package hadoopvm will hold Hadoop-in-VM support: libvirt domain and
// cloud-init templates for Hadoop roles, the YARN ResourceManager and
// MapReduce Application Master REST monitor (workflow stage, per-node
// activity, ARIA job profiles), and hadoopvm/sim, the discrete-event cluster
// simulator that runs the agent's share rule and the broker's strategies on
// a virtual clock.
//
// Nothing is implemented here yet: it is the [hadoop] issue. The package
// exists so the module has the layout of DESIGN.md from the start.
package hadoopvm
