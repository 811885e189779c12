// Package hadoopvm holds Hadoop-in-VM support for mrmarket.
//
// Today: hadoopvm/yarn, the monitor of the YARN ResourceManager, MapReduce
// Application Master and Job History Server REST APIs (workflow stages and
// progress, per-VM activity, ARIA job profiles), and hadoopvm/yarn/yarntest,
// a REST emulator serving the documented Hadoop 3.x shapes for its tests
// (Hadoop itself cannot be installed on these machines).
//
// To come with the [hadoop] issue: libvirt domain and cloud-init templates
// for Hadoop roles (mrmarket cluster create|list|delete), and hadoopvm/sim,
// the discrete-event cluster simulator that runs the agent's share rule and
// the broker's strategies on a virtual clock and drives the emulator.
package hadoopvm
