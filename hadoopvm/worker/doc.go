// Package worker is mrmarket's MapReduce worker: what runs in the project's
// own guest (cmd/mrm-init is its /init), since no Hadoop installs on these
// machines (docs/PLATFORM.md). It runs real map and reduce tasks that use
// what the market sells — the guest's CPU, its disk and its network — so
// that the agent's shares of each show in how fast a job goes; the job
// master and the YARN REST facade are on the host (hadoopvm/yarnfacade).
//
// Decisions:
//   - Tasks do real work on generated data (Input, `mrm-guest data`): a
//     word count (words of a Zipf vocabulary; maps count with a combiner,
//     reduces sum) and a sort (TeraSort's 100-byte records; maps partition
//     by key range and sort, reduces merge). A map reads its split from
//     the guest's input disk (or, when the facade put it elsewhere, from
//     the holder's data server over TCP), computes, and writes its output's
//     partitions to the scratch disk. A reduce fetches its partition of
//     each map's output over TCP as the facade announces them, writing each
//     run to the scratch disk (shuffle), reads the runs back and merges
//     them (merge), reduces and writes the result (reduce): Hadoop's three
//     phases, whose ends it reports for ARIA's profile.
//   - Every disk access is O_DIRECT in BlockSize units (Disk): what a task
//     reads and writes goes through the virtio disk and its throttle, not
//     the guest's page cache. The scratch disk is a bump allocator, made
//     anew by each boot; the host reads a reduce's result from the image
//     at the extent the worker reports.
//   - Data between workers is plain TCP on DataPort ("SPLIT off len",
//     "MAPOUT attempt partition"), one request a connection, fetches
//     retried (internal/retry) while nothing was received.
//   - Control is a virtio-serial port (ControlPort), JSON lines (Conn):
//     commands from the facade, events back (hello, progress at most every
//     250 ms, the reduce phases' ends, done with counters). Kept off the
//     network: the network is what the agent shapes and the shuffle fills,
//     and the facade's view of progress must not depend on the share a VM
//     bought of it.
//   - The guest has no shell and no file system but its initramfs
//     (WriteInitramfs: newc; the node's seed is a second archive appended
//     by `cluster create`); its init mounts, loads the virtio modules,
//     configures eth0 from the seed and finds its disks by serial and its
//     port by name (guest_linux.go).
package worker
