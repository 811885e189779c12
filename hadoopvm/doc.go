// Package hadoopvm holds Hadoop-in-VM support for mrmarket:
//
//   - hadoopvm/cluster provisions a user's virtual Hadoop cluster as libvirt
//     domains with owner metadata and cloud-init NoCloud seeds (mrmarket
//     cluster create|list|delete);
//   - hadoopvm/yarn is the monitor of the YARN ResourceManager, MapReduce
//     Application Master and Job History Server REST APIs (workflow stages
//     and progress, per-VM activity, ARIA job profiles), and
//     hadoopvm/yarn/yarntest a REST emulator serving the documented Hadoop
//     3.x shapes (Hadoop itself cannot be installed on these machines);
//   - hadoopvm/mapreduce is the one model of a MapReduce job's tasks (slots,
//     waves, slow start, phases, task times drawn from a distribution or an
//     ARIA profile, progress), which the simulator drives by events and
//     `mrmarket up`'s simulated Hadoop by the CPU its hosts delivered;
//   - hadoopvm/sim is the discrete-event cluster simulator that runs the real
//     agents (share rule, charging) and the real broker strategies on a
//     virtual clock, drives the emulator, and hadoopvm/sim/workload the
//     GridMix, Digg and VideoToon workflows of Sandholm and Lai's "MapReduce
//     Optimization Using Regulated Dynamic Prioritization" (docs/PAPERS.md).
package hadoopvm
