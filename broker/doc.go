// Package broker is the market's front office: the registry of hosts and
// their prices (fed by the agents' state messages), the spend plans that
// turn users' budgets into bids, the strategies run for every plan every
// tick, and the price predictions users ask what-if questions of.
//
// # Plans
//
// Spend checks that every VM is known and owned by the user, records the
// plan, holds the whole budget in the bank (expiring Settle+HoldGrace after
// the plan's end, so money is never stranded) and runs the plan's first
// round; if any host refuses its first bids, they are cancelled and the hold
// released: a plan runs whole or not at all. Spend --more extends the hold;
// --less lowers what the plan may spend (the rest comes back at its end).
// Cancel stops the bids (agents settle them at once) and releases the rest.
// Settle after its end a plan is done and its remainder released.
//
// # Rounds
//
// Every tick, for every plan it runs, the broker asks the plan's strategy
// (package strategies) how to spend what remains over the time left, given
// the hosts' prices and which VMs are idle: fair (constant rate), workflow
// and stage priority (weights, stages advancing when all of a stage's VMs
// are idle), bottleneck elimination (boosts capped system-wide at MaxBoost)
// or best response (across the plan's hosts, against the others' rates).
// Bids are a budget over a duration from now, so the budgets a round sends
// never add up to more than the plan has left, and the bank's hold caps it
// all. Only bids whose rate moves by more than 1% are sent, one request per
// host.
//
// # Replicas
//
// With a JetStream bucket (MRM_PLANS) the plans are shared by every broker
// replica in the queue group: each follows the bucket through a watch,
// writes only by compare-and-set on revisions, and beats a heartbeat every
// tick. A plan is run by its owner; when an owner's heartbeat is two ticks
// old, the first replica to win the compare-and-set takes its plans over, so
// a survivor runs them from its next round (within three ticks of the
// death), and no plan is ever run by two replicas for one revision.
// Without a bucket, plans live in the process's memory.
package broker
