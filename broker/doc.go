// Package broker is the market's front office: the registry of hosts and
// their prices, fed by the agents' state messages, and the spend plans that
// turn a user's budget into bids on the agents.
//
// # Spending
//
// Spend checks that every VM is known and owned by the user, asks the plan's
// strategy (package strategies) for per-VM budgets, places a hold in the bank
// for the whole budget ("hold-<plan>", expiring Settle+HoldGrace after the
// plan's end, so a broker that dies never strands money), then sends one bid
// request per host. If any host refuses, the bids already placed are
// cancelled and the hold released: a plan runs whole or not at all. A plan
// ends at start+duration; Settle later (time for the agents' last captures)
// Tick releases what the plan did not spend and marks it done. Cancel stops
// the bids (the agents settle them at once) and releases the rest.
//
// # Decisions for this version
//
//   - Plans live in the broker's memory: a restarted broker forgets them, and
//     their holds are released by the bank when they expire. Durable plans
//     come with the [strategies] issue.
//   - Hosts are learnt from state messages only (and the MRM_HOSTS bucket at
//     start); a VM unknown to every host cannot be spent on.
//   - A spend with an id is idempotent: the same id and content returns the
//     existing plan, other content is a conflict.
package broker
