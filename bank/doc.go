// Package bank is mrmarket's ledger: accounts, grants, holds, batched
// idempotent captures and releases, kept by double entry in SQL.
//
// # Accounts
//
// Every user has an account ("user:<name>", created by its first grant),
// every host a provider account ("provider:<host>", created by its first
// capture). Two system accounts close the books: "mint", whose balance is
// minus everything ever granted, and "escrow", which holds the money of open
// holds. Every movement is one transfer from a debit to a credit account, so
// the sum of all accounts is always zero, and the market's invariant
//
//	Σ user and provider balances + Σ open holds = Σ granted
//
// holds after every transaction. Ledger checks it (and more) on demand.
//
// # Money flow
//
// Grant mints into a user's account. Hold moves a user's money into escrow
// for a plan, with an expiry. Capture moves money from a hold to a host's
// provider account; each leg names the cumulative total it wants captured for
// (hold, host, vm), so a retried, replayed or reordered batch moves each
// micro-credit at most once, and no leg can capture beyond the hold: the last
// leg is cut to what remains and reports the hold exhausted. Release returns
// a hold's remainder to its owner; Tick releases holds whose expiry passed.
//
// # Idempotency
//
// Grants and holds carry ids. A repeated id with the same content replies as
// the first did (Replayed); with other content it is a conflict and changes
// nothing. Capture legs carry ids "hold/host/vm/tick"; a repeated leg id moves
// nothing.
//
// # Decisions for this version
//
//   - The store is SQLite (modernc.org/sqlite, WAL) in the data directory,
//     behind one connection, so every transaction is serialised. PostgreSQL
//     and CockroachDB come with the [bank] issue.
//   - Requests are not signed yet: any client on the NATS account can act.
//     Ownership is still checked where the request names it (only a hold's
//     owner may release it).
//   - Balance lists only the user's open holds.
package bank
