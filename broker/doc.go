// Package broker is the market's front office: the registry of hosts and
// their prices (fed by the agents' state messages), the spend plans that
// turn users' budgets into bids, the strategies run for every plan every
// tick, and the price predictions users ask what-if questions of.
//
// It implements five papers, cited by short forms (docs/PAPERS.md has them
// in full): Sandholm and Lai, "MapReduce Optimization Using Regulated
// Dynamic Prioritization" (the strategies and predictions); MRM (Moshref et
// al.), ARIA (Verma, Cherkasova and Campbell) and Jockey (Ferguson et al.),
// the deadline service's; and Lin et al.'s "Joint Optimization of
// Overlapping Phases in MapReduce" (the order of best-effort jobs).
//
// # Host states
//
// With Config.Identities and Config.AdminKey, Serve takes a host's state
// only sealed for that host by the key the admin registered as its agent,
// and not sealed in the future (nor, live, long ago); refusals are counted
// (states.go). Identities count only with the admin's record
// (service.Certified). A VM belongs to the first host whose state reports
// it until that host's own state drops it (Observe), so no host's state
// claims another host's VM. The answers the broker acts on are believed
// only when signed: a bid's by the host's own agent, a hold's or release's
// by the bank (rpc.Trusted); its own replies are signed with its key
// (Config.Signer) for clients that know the anchor (Client.AdminKey).
// Identities are cached a minute, and forgotten at once when the bank
// announces a key revoked; a host whose agent key is revoked (not rotated)
// is retired: offered to nobody, bid on by no plan (retire.go).
//
// # Plans
//
// Spend checks that every VM is known and owned by the user, records the
// plan, holds the whole budget in the bank (expiring Settle+HoldGrace after
// the plan's end, so money is never stranded, or at the end of its
// mandate's period if sooner; naming where its VMs run, mandate.go) and
// runs the plan's first round; if any host refuses its first bids, they are cancelled and the hold
// released: a plan runs whole or not at all. Spend --more extends the hold;
// --less lowers what the plan may spend and gives that back at once (a
// partial release of the hold, once per adjustment id).
// Cancel stops the bids (agents settle them at once) and releases the rest.
// Every answer about plans carries the bank's figures of the plan's hold
// (figures.go).
// Settle after its end a plan is done and its remainder released.
//
// # Rounds
//
// Every tick, for every plan it runs, the broker spends what remains over
// the time left as the plan's strategy says. The strategies are package
// strategies' registry, keyed by the plan's strategy name, and they are
// the only way the broker computes rates: allocate gathers a snapshot of
// the plan (what it has left and the time left, its VMs with their hosts
// and idleness, and whatever else the strategy reads — its workflows and
// active stages, its boost capped with everyone else's at MaxBoost, its
// hosts' prices and its own rates there, or its job and the EDF decision)
// and the strategy answers with a budget over a duration for each VM and
// the new stages: fair (constant rate), workflow and stage priority
// (weights, stages advancing when all of a stage's VMs are idle, or when
// the user's YARN monitor reports the next stage's application on
// mrm.v1.broker.stage: StartStage, `mrmarket stages watch`),
// bottleneck elimination, best response (across the plan's hosts, against
// the others' rates), our stage-bottleneck (stage priority across a
// workflow's stages, bottleneck elimination among the active stage's
// VMs), or deadline (below). A plan with a mandate bids no VM faster than
// the mandate lets one VM spend (mandate.RateCap): agents refuse faster
// bids, and the broker clamps them rather than have them refused, so a
// plan that fell behind catches up only at its signed rate.
//
// A round is a planner and an executor, as in Nomad's scheduler. The
// planner (round.decide) is a pure function of the round, the plan and
// what its strategy wants: per plan it decides to leave it alone (its
// owner is alive, or nothing would change), take it over from a dead
// replica, carry on a plan left half-started (fail it after
// startingTimeout), settle and
// release it Settle after its end, or the new stages and the bid changes
// the strategy's allocations make (bidChanges: one change per host).
// The executor does the compare-and-set writes, bank releases and bid
// requests, then applies what the hosts took to the record (settleRound,
// a pure function). A round sends its plans' bid changes together: every
// change for a host in one signed batch (wire.BidBatch; split only past
// maxBatchBytes), whose changes the agent takes or refuses each on its
// own, so a churn round costs a host one signature, one check and one
// answer however many of its plans moved. (An agent older than the batch
// refuses it as malformed: its bids fail, nothing is charged,
// and each round tries again; brokers and agents are upgraded together.)
// Plans are decided and recorded side by side (errgroup, at most
// roundWorkers) and batches are in flight side by side (at most
// maxInFlight); with Serial all run one at a time in a fixed order, as a
// deterministic simulation needs. Bids are a budget over a duration from
// now, so the budgets a round sends never add up to more than the plan has
// left, and the bank's hold caps it all. Only bids whose rate moves by more
// than 1% are sent.
//
// # Deadlines
//
// The deadline service (MRM, ARIA, Jockey) answers "when will my job
// finish?" and "what does finishing by then cost?" in credits. A job (its
// own VMs, MRM's features, an ARIA profile, optionally a Jockey C(p, a)
// table) is estimated at a full share: ARIA's bounds over the profile (the
// upper bound admitted, as MRM's prediction-interval bound) until
// MinHistory jobs have finished, then MRM's regression per phase (GP, OLS
// fallback) over the share-seconds finished jobs actually held, retrained
// on every quote. The regression's bound is a promise only as far as its
// errors are what it assumes, and a job bought at its earliest finish has
// no slack to absorb a miss; so admission plans the regression's bound
// times a safety margin measured from its own errors: each finished job's
// measured work over the bound it was admitted at, the margin the largest
// of 1, the largest such miss, and the bound a next miss passes with
// chance 10⁻⁵ were they normal (Student's t over the misses measured);
// until MinHistory misses are measured, at the larger of its bound and the
// profile's. The admitted jobs
// sharing a host with the new one form MRM's single-server queue at the
// reserved share Φ (DeadlineShare, 0.8): each needs work/Φ seconds, and the
// earliest finish is MRM's lazy placement. A deadline's price is the cost
// of holding Φ of the job's hosts for its run against best-effort prices
// (now, or their mean + 1.64 sd if higher; admitted jobs' own bids
// excluded, since only one runs per host) plus Eq. 13's premium with κ =
// DeadlineKappa·cost/run, slack normalised by γ̄, the mean run of the queue
// and the job [recon]. So a deadline on an empty queue at zero slack costs
// 1+κ times the run, and the price falls towards the run's cost as the
// deadline moves out.
//
// Submit admits at a deadline (no earlier than the earliest finish) or at
// the earliest deadline a budget pays, holds the price, and runs the job as
// a plan of strategy "deadline" ending a quarter of its window after the
// deadline. Execution is EDF over hosts (strategies.EDF, decided once a
// round over all jobs): in deadline order, a job runs if no earlier job
// holds one of its hosts; a running job bids on each host the rate that
// buys max(Φ, controller share) (at most 0.95) against the others' rates
// there, and spends its hold over its predicted run if that buys more — a
// tighter deadline's higher price buys a larger share. A waiting job bids
// nothing. Since at every moment some job due no later than a waiting one
// runs at Φ or more, each job finishes no later than in the single-server
// EDF schedule admission checked — as long as the estimates hold and
// prices stay below those the quote assumed.
//
// A best-effort job (submitted with a budget and no deadline) waits while
// a deadline job holds one of its hosts; the best-effort jobs on free hosts
// share the reserved share by Lin et al.'s overlap policies (JobOrder:
// MaxSRPT by default, SplitSRPT, k-LPS or FIFO) over their map and shuffle
// work, each at the rate of the station it is in (map while it has maps
// left), scaled down where a host's total would pass Φ.
//
// Progress comes on mrm.v1.broker.progress, signed by the job's user: from
// the YARN monitor (`mrmarket jobs watch`), from up's simulated Hadoop
// (market/jobs.go) or from the simulator's ProgressFeed. Once a
// minute it drives the control loop: Jockey's (slack 1.2, hysteresis 0.2, dead zone min(3 min, a tenth
// of the time left)) over the job's table, else ARIA's minimum slots for
// the tasks left at the pace measured so far, as a share of the job's
// slots. A done job ends its plan; what it did not spend is released.
//
// A job is live while it is not done and its plan runs and is not past its
// end (liveJob): a plan past its end is settled only Settle later, and
// meanwhile its job holds no host in EDF, counts in no admission queue and
// keeps its name from no new job of its user's, so a job of that name is
// admitted, runs and receives the name's progress reports at once.
//
// A job's share (Jobs, so the CLI's jobs and jobs watch and the dashboard)
// is what its VMs get, not only what its own bids buy: on each of its
// hosts, every plan's bids on its VMs — its own as the broker placed them,
// any other plan's (a fair plan of its user's on the same VMs) as the host
// last reported them — against the rest of the host's price (Sandholm and
// Lai's proportional share, without the agents' floor for unfunded VMs),
// the mean over its hosts. A job queued behind another, cancelled, or past
// its plan's end on VMs another plan funds shows the share it runs at; a
// done job shows none. The share-seconds credited as its measured work
// stay what its own bids held (or its VMs used, usedWork).
//
// Admission is safe across replicas. A submit reads the commitment record
// of each of the job's hosts (commit.go: in MRM_PLANS, or the
// MemoryPlans), prices the job against the queue the plans and those
// records give, and commits it to each record by compare-and-set over the
// revision it read. Of two replicas admitting on a host at once, one
// commits first; the other's write fails and it prices again with the
// first job in its queue — refused if its deadline no longer fits, else
// admitted at the new price — up to five times before it refuses with
// ErrAdmitRace (a wire.ErrConflict; a retry may succeed). Money is held
// only once the job is committed, and a job refused after committing is
// taken off the records again, so a refused job holds nothing. The jobs
// admitted on a host are always what MRM admits for some serial order of
// their submits: none over-commits it. Within a replica, quotes and
// submits take turns. A job may share its VMs with running plans: an
// agent keeps one bid per (VM, plan) and their rates add up.
//
// # Replicas
//
// With a JetStream bucket (MRM_PLANS) the plans are shared by every broker
// replica in the queue group: each follows the bucket through a watch,
// writes only by compare-and-set on revisions, and beats a heartbeat every
// tick — and during a round longer than half a tick, so a busy replica is
// not taken for a dead one (heartbeat.go; a round stuck for roundStall
// stops beating); the hosts' deadline commitment records live there too,
// each written by compare-and-set (Deadlines, above). A plan is run by its
// owner; when an owner's heartbeat is two ticks older than the replica's
// own latest one as the watch brought it back (silence counted in the
// bucket's order, so a bucket that takes no writes for a while, or a watch
// that stalls, makes no replica silent), the first replica to win the
// compare-and-set takes its plans over, so a survivor runs them from its
// next round (within three ticks of the death), and no plan is ever run by
// two replicas for one revision.
// Without a bucket, plans live in the process's memory — the replica's
// own, or a MemoryPlans several replicas in one process share.
//
// # Trust
//
// A plan started by a signed spend or submit keeps it (the mandate) and
// sends it with its hold and its bids; its hold id is derived from it
// (mandate.HoldIDFor), so agents and the bank check the plan against what the
// user signed and a broker, a forged record or a replay cannot widen it
// (mandate.go, package mandate). Plan records are sealed by the broker
// that wrote them and verified on read; a record no broker sealed is
// refused, a deleted key or bucket is detected, and both are reported and
// restored from the replica's mirror (seal.go). The hosts' commitment
// records are sealed and verified the same way; one that fails counts as
// empty (the plan records still hold every job but those being admitted)
// and is reported, and the next admission on its host overwrites it. The
// replicas share the nonces of the requests they serve in MRM_NONCES (a
// replay to another replica or after a restart is refused). A plan (and
// so a job) id is its user's own: plans are keyed by user and id (in the
// bucket "plan.<user>.<id>"; a plan stored before keeps the key of its id
// alone), so two users' plans of one id are two plans and nobody blocks
// another's spend or submit by taking its id first. A spend with
// an id is idempotent on every replica, and exactly-once under faults: a
// plan is recorded starting before anything else, then held, bid and
// marked running (plans.go start), each step repeatable — the same hold
// request, so the bank replays it. A refusal rolls the plan back; an
// agent that does not answer gets its bids from later rounds while the
// plan runs; an outage of the bank or the plans bucket decides nothing, so
// the spend is answered unavailable and the plan left starting, and whoever comes next carries it on: a retry of the spend by
// its id on any replica, a round of its replica once no try is on it, a
// survivor's round when its replica died. Plans starting are listed and
// cancellable; one still starting after startingTimeout is failed, its
// hold released.
//
// # Files and tests
//
// broker.go holds the registry of hosts and prices; plans.go spend, cancel
// and adjust; round.go the planner and executor of Tick; allocate.go the
// snapshot a strategy reads; bids.go the bid changes, their sending and
// settling; store.go the plan stores; seal.go their sealing and repair;
// mandate.go the mandates plans carry. The deadline service is in
// estimation.go (processing times), admission.go (prices, Quote, Submit),
// commit.go (the hosts' commitment records), execution.go (EDF's inputs,
// the share-seconds a job held) and control.go (progress, the control
// loop, the jobs' view).
//
// Package brokertest runs real replicas with no network (shared in-memory
// plans, recording agents and bank, an injected clock); the scripts in
// testdata/*.txt drive it (TestScripts; go test -rewrite rewrites their
// expected output) and show every bid request and release each step makes.
package broker
