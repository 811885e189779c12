// Package virt is the agent's libvirt Enforcer: it governs the QEMU/KVM
// domains of one host through libvirt (libvirt.org/go/libvirt, built with
// the libvirt_dlopen tag so only libvirt.so.0 is needed at run time).
//
// # Which domains
//
// A domain is managed when it is running and carries mrmarket's metadata
// element (namespace Namespace), which names its owner:
//
//	<metadata><mrm:vm xmlns:mrm="https://mrmarket.dev/xmlns/vm/1" owner="alice"/></metadata>
//
// The domain's name is the VM id. Other domains are left alone.
//
// # Which domains are cached
//
// The enforcer keeps its managed domains (handle, owner, what it last set)
// in a cache, so a bid reaches libvirt without listing the host: listing
// every domain and reading each one's metadata made a bid's cost grow with
// the domains on the host. libvirt's lifecycle and metadata-change events
// (run by libvirt's default event loop, registered once per process
// before the connection opens) name the domains to read again: one that
// started, stopped, or gained, lost or changed its metadata; a goroutine
// of the enforcer's reads them, off the bids' path. Every VMs
// call, the agent's tick, lists the host in full anyway and repairs what
// an event missed (level-triggered: a lost event costs at most a tick);
// a call that fails on a domain has it read again. Without events (the
// loop or the registration failed, or a connection NewWithConn borrowed)
// every call lists and nothing is kept, as before.
//
// # Mappings and their distortion
//
// CPU (always): cpu_shares = clamp(round(q·S), 2, 10000), with a scale S
// in [10000, 40000] the enforcer keeps. The range is valid both for cgroup
// v1 (cpu.shares, 2…262144) and cgroup v2, where libvirt maps cpu_shares to
// cpu.weight (1…10000). Rounding moves a share by at most 0.5/S ≤ 0.00005
// of the host, so a 2:1 pair is enforced no worse than 6667:3333 (ratio
// 2.0003); a share below 2/S (the agent's floor is 0.0002) is raised to it.
// Shares are weights: they divide the CPU only among VMs that want it
// (work-conserving), as the share rule intends, and only their ratios
// matter. When one VM's bid changes the host's price, every other VM's
// share changes by one common factor; S moves by that factor, so the other
// weights stay as they are and a bid sets one domain's cpu_shares. Apply
// calls libvirt only for a weight that changes (and removes a former cap
// once per domain). All weights are set anew, at the middle of S's range,
// only when keeping them would put a weight above 10000 or S outside its
// range: when the host's total bids have moved about twofold since, or one
// VM's share grows past 10000/S. S at least 10000 keeps the rounding no
// coarser than q·10000; at most 40000 bounds how far the managed domains,
// whose weights sum to about S, outweigh an unmanaged domain: at most four
// times as far as at q·10000. A lone VM's q is 1, and S is 10000.
//
// CPU hard cap (optional, HardCap): additionally vcpu_period = 100 ms and
// vcpu_quota = q·C·period / the domain's vCPUs, at least 1 ms, and the same
// cap on the whole domain (global_period/global_quota = q·C·period), because
// QEMU's emulator threads are outside the vCPU quotas: a VM never uses more
// than its share even on an idle host. C is the CPUs the domain may run on:
// the host's, at most its vCPUs and at most the host CPUs its vCPUs are
// pinned to (a domain pinned to 2 of 8 CPUs capped at q × 8 would not be
// capped at all); agent.VM.CPUs reports the same number, which bounds the
// VM's entitlement in the agent's idle rule. Rounding to whole microseconds
// distorts by at most 1 µs per 100 ms (0.001%); the 1 ms minimum raises
// shares below 1% of a CPU. A cap is absolute, not relative: with HardCap a
// bid that changes the host's price touches every domain whose share
// changes, which is all of them. Without HardCap, Apply removes any cap a
// former run left (quotas back to -1, unlimited), so turning --hard-cap
// off takes effect at the agent's next start.
//
// Disk and network: each resource has a mode (Config.Disk, Config.Net;
// Modes reports them, and the agent publishes them with the host's state,
// so `vms` and the metrics never show a share nothing delivers):
//
//   - throttle (the default for both): per-VM bandwidth caps re-planned
//     every tick by an agent.Throttle from what each domain moved —
//     weighted max-min over the VMs that want more, an idle VM's part lent
//     to the busy ones, the device's bandwidth stated (DiskKiBps,
//     LinkKiBps) or else measured (the most moved together lately, probed
//     upward while the caps bind), no caps while at most one VM uses the
//     device. A stated speed is the operator's to give where the VMs
//     cannot show it: guests whose reads wait on their own CPUs move far
//     less than the device gives, and an estimate from what they move
//     caps them near it, which slows them further (a map task's reads
//     queue behind its cap). Disks: total_bytes_sec on every disk of
//     the domain in one QEMU throttle group ("mrm"), so its disks share
//     the cap (blkdeviotune, which QEMU holds closely: docs/PLATFORM.md).
//     Interfaces: the
//     enforcer shapes each domain's taps itself with iproute2 (tcnet.go),
//     the VM's cap split evenly among them — into the guest an HTB root
//     qdisc on the tap (one class at the cap), out of it an ingress qdisc
//     on the tap whose u32 match-all filter redirects (act_mirred) to an
//     IFB of the tap's own ("mi" and the tap's name) carrying the same
//     HTB; a cap of 0 removes both, the IFB goes with its VM and at Close.
//     Each tick one `tc -s qdisc show` reads how often each of those HTBs
//     held packets back (overlimits, drops): a rise is the VM asking for
//     more than its cap, which a TCP flow backing off behind a small cap
//     does not show in what it moves (agent.Throttle's pressed).
//     Where the link's speed is stated (LinkKiBps), the kernel divides it
//     instead (tcshare.go): one HTB per direction on a shared IFB, a class
//     per VM at its part of 0.92 of the stated speed with the whole as its
//     ceiling, so that what one VM leaves the others borrow at once, in
//     proportion to their shares; each tap's packets are redirected there
//     by a clsact, and classified by the guest's MAC (out of the guest,
//     frames from a MAC not its own are dropped at the tap: forged, they
//     would be charged to another VM's class or pass unshaped). Caps re-planned every
//     tick lend a tick late, and a shuffle's flows turn from one guest to
//     another every second (docs/E2E.md). The per-VM caps below are for a
//     link whose speed is not stated. Either way a class's queue is a
//     bfifo of a fifth of a second at its rate, not the 1,000 packets HTB
//     would give it, behind which a guest's new connections waited
//     seconds.
//     Into and out of the VMs are planned apart, each against its own
//     capacity, at most LinkKiBps when set (and then a lone VM is capped at
//     LinkKiBps too). libvirt's own interface bandwidth is not used: it
//     needs sch_sfq and act_police (policing drops where shaping queues),
//     and fails on kernels without them. Requires the agent to run as root
//     (CAP_NET_ADMIN), iproute2's tc and ip, and the kernel's sch_htb,
//     sch_ingress, sch_fifo, cls_u32, act_mirred and ifb; CheckNetShaping tries them
//     and `mrmarket agent` falls back to none (saying why) without them.
//     TestNetShares holds each guest's part to its bid's, each direction,
//     on two and three TCG guests. Works with any scheduler and cgroup
//     version; taps only (libvirt interface types
//     ethernet, network or bridge — not QEMU user networking).
//   - weights (disk only): blkio weight = clamp(round(q·1000), 100, 1000)
//     (set, like cpu_shares, only when it changes; not rescaled, so a bid
//     sets the weight of every VM whose rounded weight moves),
//     libvirt's range (every share below 0.1 is enforced as 0.1). libvirt
//     writes blkio.bfq.weight, which only BFQ reads: under mq-deadline the
//     weight is accepted and does nothing. Even under BFQ the ratio forms
//     only a while after guests start and is inverted for a while after a
//     pause/resume (docs/PLATFORM.md has both), so weights are used
//     only when asked for, and `mrmarket agent` refuses them unless every
//     device behind the managed disks runs BFQ (DiskDevices, Scheduler;
//     --disk-scheduler bfq switches them, SetScheduler).
//   - none: not governed.
//
// CPU time for utilisation comes from virDomainGetInfo (all vCPUs and the
// emulator). The enforcer is also an agent.IOMeter: each domain's bytes
// read and written on its disks (virDomainBlockStats) and received and
// sent on its interfaces (virDomainInterfaceStats), against the fastest
// the host's domains have moved data together (the link's capacity for the
// network when configured), so a VM waiting on its disk or network is
// busy for the agent's idle rule, not idle.
//
// # Where a domain's threads run
//
// cpu_shares weighs a domain's cgroup as a whole, and the kernel spreads
// that weight over the host's CPUs by where the group's threads are
// runnable: a CPU's part is the group's load there over its load on all
// of them. A domain whose vCPUs are pinned while its emulator threads
// (QEMU's main loop, which under TCG moves the guest's disk and network
// data, and QEMU's helpers) may run anywhere spends part of its weight
// on CPUs its vCPUs cannot use, and weighs less than its share where its
// vCPUs contend, by how much its emulator happens to be runnable
// elsewhere (docs/PLATFORM.md has the figures). So every tick (VMs) the
// enforcer pins the emulator threads of each domain whose vCPUs are
// pinned to the union of its vCPUs' CPUs (virDomainPinEmulator, live),
// where they are not within it already: the domain's weight is then all
// where its vCPUs run, and what its emulator does is paid from its own
// share. Level-triggered: a pin changed behind the enforcer's back, or
// vCPUs pinned anew, is repaired within a tick. A domain whose vCPUs may
// run on every CPU is left alone (its threads balance over the host with
// its weight), and so is an emulator pinned within its vCPUs' CPUs (an
// operator's narrower pin); one pinned apart on purpose (to a
// housekeeping CPU, as OpenStack's emulator_threads_policy=isolate does)
// is moved, since with it the domain's weight cannot be its share where
// its vCPUs run. A pin that fails is logged once for the placement, not
// retried until the vCPUs move. I/O threads (iothreadpin) are not moved:
// listing them asks the domain's QEMU (below); the project's guests have
// none.
//
// # Calls a guest's QEMU must answer
//
// Some libvirt calls go through the domain's QEMU monitor and hold the
// domain's job until QEMU answers: the disks' statistics and caps
// (virDomainBlockStats, virDomainSetBlockIoTune), and the vCPU statistics
// group of virConnectGetAllDomainStats. A domain without a share has the
// least CPU weight, and beside busy guests its QEMU may get no CPU for
// minutes; such a call then does not return, and the weight change its
// first bid needs waits on the same job. A small share can do the same:
// in the e2e suite a workflow's idle guest beside busy ones answered one
// disk statistics call in 16–17 s. So the enforcer makes those calls only
// for domains with a share whose QEMU ran at least minAnswerCPU over the
// last interval (asksQEMU; the CPU time is read without asking QEMU),
// waits for one such call 250 ms at most (ask: a guest can lose the CPU
// during a call, when the host turns busy; the call goes on by itself and
// the domain is left out until it ends), and logs any libvirt call of a
// second or more. A domain left out has no
// disk reading (the agent judges it by its CPU use) and keeps the disk cap
// in force until it is asked again; network counters and caps (the
// host's taps) and CPU time and wait (the host's accounts of the QEMU
// process) never ask it. A weight change does not ask QEMU but takes the
// same job, so it too is made through ask: behind a disk call that a
// starved QEMU answered in 14-25 s, one such change held the agent's
// tick, and a user's top-up reached the host's published shares 14 s
// late. It is not made while another call on the domain waits; the next
// Apply makes the latest.
//
// A call waiting on a starved QEMU also holds other calls of its libvirt
// connection, calls that ask no QEMU among them (docs/PLATFORM.md): on the
// agent's one connection the tick's listing of the domains and its weight
// read-back waited 17-24 s behind two. So each domain's calls to its QEMU
// go on a connection of that domain's own (onQEMUConn), none is made while
// maxStuck wait past askWait (libvirtd's workers are shared by all its
// connections), and a tick reads and sets its domains' disks askTogether at
// a time (eachAtOnce).
//
// # Reconciling
//
// Applied reports, for each VM, the share the enforcer last applied if the
// cpu_shares libvirt reports now still match it, and otherwise the share the
// reported cpu_shares stand for (shares/S), which the agent's reconcile
// pass sees as drift and repairs: Applied takes what it read as the weight
// in force, so the next Apply sets it again.
package virt
