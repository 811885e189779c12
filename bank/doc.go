// Package bank is mrmarket's ledger: accounts, grants, transfers, holds,
// batched idempotent captures, releases, income schedules and statements,
// kept by double entry in SQL, served on NATS to signed principals.
//
// # Accounts
//
// Every user has an account ("user:<name>", created by its first grant,
// income or transfer to it), every host a provider account
// ("provider:<host>", created by its first capture). A bank with an admin
// key creates user accounts only for registered principals of role user: a
// grant, an income schedule or a transfer to any other name is refused
// (ErrUnknownUser, not_found), since nobody could ever spend or return what
// it would hold. Two system accounts close the books: "mint", whose balance
// is minus everything ever granted, and "escrow", which holds the money of
// open holds. The escrow's balance is summed from its transfers, not kept
// in its row: every hold, capture and release moves money through it, and
// one row written by all of them makes concurrent transactions abort each
// other under SERIALIZABLE. A provider's balance stays in its row: only its
// host's agent captures into it, and a replica commits the batches that
// arrive together as one group (see Captures below), crediting each
// provider once per group, so a replica's captures do not contend for it;
// summed from its transfers instead, it would cost every statement and
// ledger read a sum over a transfer per tick for ever. Every movement is
// one immutable transfer from a debit to a credit account, so the sum of
// all accounts is always zero, and
//
//	Σ user and provider balances + Σ open holds = Σ granted
//
// holds after every transaction, with no account but the mint below zero.
// Ledger checks these invariants (and that every hold's captures add up).
//
// # Money flow
//
// Grant and income mint into a user's account; Transfer moves money between
// users. Hold moves a user's money into escrow for a plan, with an expiry and
// optionally the hosts allowed to capture from it. Capture moves money from
// holds to a host's provider account: each leg names the cumulative total it
// wants for (hold, host, vm), so a retried, replayed or reordered batch moves
// each micro-credit at most once; the leg that would pass the hold's amount is
// cut to what remains and reports the hold exhausted, and a leg on an
// exhausted, closed, expired or foreign hold is refused on its own while the
// rest of the batch applies. A batch moves its money as one transfer. A hold placed with its user's mandate keeps the
// mandate's terms (terms.go, migration 0006): every leg is checked in the
// capture's transaction against where the mandate places its VM and
// against its schedule (its pace and VM share), a leg asking more cut to
// that bound through the same capture rule (CaptureLeg, which the
// simulator's ledger charges by too). Release returns a hold's remainder
// to its owner; Tick releases expired holds, pays income and forgets old
// nonces.
//
// # Captures
//
// Every agent sends a batch per tick, so a replica serving many hosts gets
// many small batches at once. It commits those that arrive together as one
// group (group.go): one SERIALIZABLE transaction whose dozen statements
// carry every batch's rows as arrays (unnest on PostgreSQL, json_each on
// SQLite), so its cost is one commit and a fixed number of round trips
// however many batches and legs it holds, and the hold rows many hosts
// capture from are written once per group rather than by competing
// transactions. The batches are decided in order against what the earlier
// ones took — the result of committing each alone in that order — and each
// is answered and audited on its own; a group that fails is committed batch
// by batch, so one batch's failure is its own. What still contends is a
// hold captured through several replicas at once: each group updates the
// hold's row, and SERIALIZABLE retries the one that loses. Striping the
// hold's captured total would not help: every leg reads the hold's whole
// remainder, and under SERIALIZABLE a read of the other stripes conflicts
// with their writers as a write does; splitting the remainder into budgets
// each replica spends alone would, and is not done. The throughput and
// latency measured are in docs/MEASUREMENTS.md.
//
// # Idempotency
//
// Grants, transfers and holds carry client ids. A repeated id with the same
// content replies as the first did (Replayed); with other content it is a
// conflict and changes nothing. Capture legs carry ids "hold/host/vm/round";
// a repeated leg id moves nothing. Income is granted under ids
// "income:<user>:<period>", so each period pays once whatever the number of
// ticks or bank replicas.
//
// An id lives in the namespace of whoever chose it (migration 0003): holds
// are keyed by (user, id), transfers by (scope, id) where the scope is the
// chooser's account — the payer's for a transfer, the hold owner's for a
// hold, extension or release, the host's provider account for a capture,
// the mint for grants and income — and capture legs by (host, id). So the
// same id from two users never conflicts, and nobody blocks another's
// request by taking its id first (mandate.HoldIDFor is public). Transfer ids
// read as before ("transfer:t1", "hold:h1"). A capture leg names the VM's
// owner (agents that know identities do) and charges that user's hold of
// the id; a leg without an owner, of an id several users have, is refused
// (ErrOwnerNeeded). Holds (holds.get) answers every user's hold of an id.
//
// # Principals and signatures
//
// Identities are NKey (ed25519) public keys registered with a name and a
// role: admin, user, agent (named by its host), broker or bank (the bank's
// own key). The trust anchor is the admin's public key (Options.AdminKey,
// creds/admin.pub): a bank that knows it registers a principal only with
// the admin's sealed record of exactly that key, name and role
// (signing.SealPrincipal), keeps the record (migration 0002) and gives it out
// with every whois answer, so agents and brokers believe an identity only
// if the record opens with the anchor — never because an answer says so.
// The newest record wins; an older one replayed is refused
// (ErrOlderRecord).
//
// A principal (a name and a role) has one live key: a new key for a name
// that has one is refused (ErrNameTaken), since both keys would move the
// same money. Its accounts, holds and plans are by name, so the admin
// replaces a key by rotating it (RotatePrincipal: the new key registered
// and the old revoked in one transaction, nothing released) and retires
// one by revoking it (RevokePrincipal). A revocation is the admin's sealed
// record of the key marked revoked (signing.SealRevocation), stored as its
// newest (migration 0005) and final: no later record of the key is taken,
// so no replay and no new record un-revokes it. From the commit the key is
// nobody here (Whois refuses it with signing.ErrRevoked, for the bank's own
// requests and for whoever asks), a revoked user's open holds are released
// to her account in the same transaction, OnPrincipal reloads the embedded
// NATS server's users (the key's connections close), and Serve announces
// the revocation on wire.RegistryRevoked: the other replicas, the brokers
// and the agents forget the key at once (their caches' TTL bounds a lost
// notice; the bank's own is principalCacheTTL), and the brokers retire the
// host of an agent revoked without a successor. The anchor is never
// revoked; without one, neither is the last live admin key (ErrLastAdmin).
// ListPrincipals is the registry, revoked keys included, for the admin.
//
// With Options.Signer every reply is signed by the bank's
// key, its record attached (service.Options.Signer), and bank.Client with
// AdminKey believes the answers it acts on (capture, hold, release, extend)
// only when so signed. On NATS every
// mutating request must be signed (package signing: subject, body, time, nonce);
// a bad signature, a time more than signing.MaxSkew from the bank's signing
// clock (Options.SigningClock, the wall clock by default), a nonce seen
// before (nonces are stored, so this holds across restarts and
// replicas), an unknown or a revoked key is refused. Roles: grants, income
// schedules and the registry (registering, revoking, rotating and listing
// keys) are the admin's; a user holds, releases and transfers only
// its own money; the broker holds and releases for users (it acts only on
// spends those users signed, and carries the spend as its mandate: the
// bank holds and extends no more than the user signed, under the hold id
// derived from it, within its period, for its VMs' hosts — mandate.go);
// only host H's agent captures, and only to H's provider account, never
// into a hold of another user than the VM's owner the leg names, and —
// where the bank has an admin key — only from a hold with its mandate's
// terms, for the VMs it places on H, within their schedule (terms.go).
// Reads are signed too, as replayable reads (no nonce is stored): a
// balance by its user, an admin or the broker; a
// statement by an admin, its user or, for a provider account, that host's
// agent; the ledger by an admin; open holds by the broker or an admin.
// whois stays open to every (authenticated) connection: its answer is the
// registry record the asker verifies (a whois answer is only as good as
// the admin-sealed record it carries). Requests are queued per signer and
// served in turn, so one principal's flood does not starve the others (see
// package service). The in-process methods trust their caller.
//
// # Audit
//
// Every successful mutating request over NATS (grant, income, principal,
// revoke, rotate, hold, release, extend, transfer, capture) writes its
// audit event — the
// signed request as received, its principal and the reply's result, as
// package service shapes it — into the outbox table in the transaction
// that moves the money (migration 0004): the money moves only with its
// event, whatever JetStream is doing. A publisher in each serving replica
// sends the outbox to the MRM_EVENTS stream in order and deletes each event
// once the stream acknowledged it; with the stream gone the events wait.
// Several replicas on one database publish one at a time (a lease in the
// database), each publish fenced in the stream behind the last bank event
// the publisher knows (so a publisher that stalled past its lease appends
// nothing behind newer events), duplicates stored once by their id
// (Nats-Msg-Id) — outbox.go has the details.
//
// # Stores
//
// One SQL code path serves SQLite (modernc.org/sqlite, WAL, one connection
// per process: the default, in the data directory) and PostgreSQL or
// CockroachDB through pgx. PostgreSQL runs every transaction SERIALIZABLE
// and retries the whole transaction from BEGIN on SQLSTATE 40001, 40P01 and
// 23505, including a failure raised by COMMIT itself (crdb.ExecuteTx would
// report such a transaction as done: see TestWriteSkewAtCommit). Statements
// are planned with their real parameters (plan_cache_mode=force_custom_plan).
// Migrations are embedded and run on Open; a store of an older schema opens
// and keeps its rows, ids and retries (TestStoreOfTheOldSchemaOpens). A
// bank from before migration 0003 cannot write the tables it recreates
// (their keys changed): stop every older bank replica before the first new
// one opens the store, rather than upgrading them one at a time. The
// SQLite files (the database, -wal, -shm) are created 0600, and a looser
// one is tightened at Open rather than refused: the ledger and the principal
// registry are the bank's alone, and a bank that can repair the mode should
// not stop on a restart for it.
//
// # Losing the database machine
//
// On PostgreSQL the bank runs on a primary with a synchronous streaming
// standby (synchronous_commit=on, synchronous_standby_names naming the
// standby, the standby made with pg_basebackup -R) and a URL listing both,
// postgres://h1:5432,h2:5432/mrm?target_session_attrs=read-write: pgx tries
// the hosts in order and keeps the one that accepts writes. A URL listing
// several hosts gets connect_timeout=2 unless it sets one, so a first host
// that is gone without resetting connections costs a new connection 2 s,
// not the request's whole deadline. When the primary dies, every transaction
// on it fails unavailable (a broken connection is never reused: pgx marks it
// closed and database/sql drops it) and its caller retries by id; once the
// standby is promoted the same URL reaches it. A COMMIT cut by the failure
// has an unknown outcome; the retry by id answers it exactly once either
// way. Every PostgreSQL transaction writes an empty transactional logical
// message (prefix "mrmarket") so that its COMMIT waits for the standby even
// when it only read: a COMMIT whose wait for the standby is cancelled
// (pgx cancels when a context runs out) stays committed on the primary
// alone, and a retry that merely read it would otherwise answer "done" for
// something the standby may never get (see store.durableCommit). Keep
// statement_timeout off for the bank's user and do not pg_cancel_backend
// its sessions, for the same reason; keep synchronous_standby_names out of
// the standby's configuration (a promoted standby that names a standby waits
// for it on every COMMIT). Promotion is a failover manager's — Patroni in
// the production layout (deploy/patroni, which sets the standby names
// itself) — or an operator's; the bank does not promote.
//
// Tested (TestFailover, on PostgreSQL 15 here): six concurrent clients
// transfer, hold, capture and release with ids; the standby is paused
// (SIGSTOP) for 2.5 s so that COMMITs are in flight and attempts time out,
// the primary is killed with SIGKILL (every server process), the standby
// promoted 1 s later; every acknowledged operation is in the ledger exactly
// once, the invariant holds throughout, nothing is acknowledged while the
// standby is paused, and the bank acknowledges again as soon as the standby
// is promoted (the test logs the outage). TestFailoverPassesSilentHost: a first host that accepts
// TCP and never answers is passed over. Not tested here: CockroachDB (it
// shares this code path — multi-host URLs and retries by id — but not the
// logical message, which it lacks and does not need: its commits are
// replicated by consensus); a real network partition or a host that
// vanishes with connections open (only SIGKILL on one machine, where the
// kernel resets them; an in-flight query on a silent host is bounded by the
// request's context); re-attaching the old primary as a standby (pg_rewind);
// a failover manager; the bank served over NATS during the failover (the
// test calls the in-process methods the NATS handlers call).
package bank
