// Package e2e is mrmarket's end-to-end suite (`make e2e`): the market as
// `up` runs it (market.Start: NATS, the bank, the broker), the host's
// libvirt agent as a process of its own (`mrmarket agent --libvirt`,
// killed and restarted by one case), and two users' clusters of the
// project's worker guests (hadoopvm/worker) booted by `mrmarket cluster
// create --guest --domain-type qemu`, whose jobs the YARN facade runs. The
// users act through the CLI (spend, spend --more, quote, submit, jobs
// watch --yarn), in the test's process.
//
// Decisions:
//   - Expected values come from a fluid model (model.go) fed with the
//     shares the agent set, as the broker heard them, from the time of
//     the host state that carried them (when the agent set them, not
//     when a sample heard them: a tick held by a slow call is heard
//     seconds late); the test never
//     computes a share, a price or a charge itself. The model's work is
//     taken from the run (one job's finish calibrates it), never assumed.
//   - Worker i of every cluster is pinned to host CPU i, so each CPU is
//     contested by one guest of each user and the agent's CPU weights
//     decide how it is divided. The test pins the vCPUs only, as an
//     operator would; the agent keeps each guest's emulator threads on its
//     vCPU's CPU (agent/virt, "Where a domain's threads run"), so that a
//     domain's weight is all where its vCPU contends.
//   - Times are held to the model on the jobs' CPU clock (the CPU time the
//     host gave the guests of the users whose jobs run on the busiest CPU,
//     the one where their ends are made): the
//     market divides what the host gives its guests, and on a machine where
//     other processes take part of the CPUs wall time runs unevenly faster.
//     When the guests had the CPUs (nearly) to themselves, the wall clock
//     is held to the model too; each case reports both.
//   - Money is checked against what the agent published: a plan's bank
//     figure against its bids' rates over the time an agent ran.
//   - One set of guests for every case: booting them is the suite's
//     largest fixed cost, so the cases run one after the other on the same
//     market, each reading the shares as they stand.
//   - The suite runs only with MRM_E2E set (make e2e), alone: its TCG
//     guests fill both cores, and another test's agent would govern them.
package e2e
