// Package hadoopvm holds Hadoop-in-VM support for mrmarket:
//
//   - hadoopvm/cluster provisions a user's virtual Hadoop cluster as libvirt
//     domains with owner metadata and cloud-init NoCloud seeds (mrmarket
//     cluster create|list|delete), or a cluster of the project's own worker
//     guest (--guest);
//   - hadoopvm/worker is that guest's MapReduce worker (its init is
//     worker/cmd/mrm-init; `make guest` builds the kernel and initramfs):
//     real map and reduce tasks over the guest's disks and network, since
//     Hadoop cannot be installed here; hadoopvm/yarnfacade is their job
//     master on the host, serving what they report in the YARN REST shapes,
//     and hadoopvm/workertest starts both for tests;
//   - hadoopvm/yarn is the monitor of the YARN ResourceManager, MapReduce
//     Application Master and Job History Server REST APIs (workflow stages
//     and progress, per-VM activity, ARIA job profiles), and yarn.Server
//     those shapes served, through which hadoopvm/yarn/yarntest emulates
//     the documented Hadoop 3.x APIs (Hadoop itself cannot be installed on
//     these machines) and the worker guests' facade serves real tasks;
//   - hadoopvm/mapreduce is the one model of a MapReduce job's tasks (slots,
//     waves, slow start, locality, phases, task times drawn from a
//     distribution or an ARIA profile, progress), which the simulator drives
//     by events, `mrmarket up`'s simulated Hadoop by the CPU its hosts
//     delivered, and the worker guests' facade by their real tasks;
//   - hadoopvm/sim is the discrete-event cluster simulator that runs the real
//     agents (share rule, charging) and the real broker strategies on a
//     virtual clock, drives the emulator, and hadoopvm/sim/workload the
//     GridMix, Digg and VideoToon workflows of Sandholm and Lai's "MapReduce
//     Optimization Using Regulated Dynamic Prioritization" (docs/PAPERS.md).
package hadoopvm
