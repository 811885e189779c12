// Package faults holds the market's fault test: the
// distributed market as separate processes on one machine — three
// `mrmarket nats serve` nodes (TLS, NKey users, JetStream R3, the streams and
// buckets made by the admin's `mrmarket nats assets`, as deploy/README.md
// brings a market up), two `mrmarket bank serve` on a PostgreSQL primary
// with a synchronous standby run by Patroni with the production
// configuration (deploy/patroni), two `mrmarket broker` and three `mrmarket
// agent --sim` — under a workload of
// transfers, spends, cancels and deadline submits, each retried by its id
// until it has an answer, while the test kills in turn each NATS node (the
// leader of the plans bucket included), each broker, each bank, an agent and
// the PostgreSQL primary's machine (Patroni promotes the standby by itself;
// the lost member then rejoins as its standby).
//
// It asserts that every acknowledged operation applied exactly once (the
// transfer users' balances are their grants plus the acknowledged transfers;
// the spending users' money is in the holds of their acknowledged plans and
// nowhere else), that the ledger's invariant holds after every fault, that
// every plan's hold ends closed with captured + released = amount, and that
// no kind of operation goes without an answer for more than MaxGap after a
// kill — after the database's primary, Patroni's own failover time (ttl +
// loop_wait) plus MaxGap; it prints the longest gap of each kind for each
// kill. Beside the workload's clients, a user runs the CLI (`mrmarket
// transfer`, `mrmarket spend`, each a new process) in a loop: no single
// command of theirs may take longer than its row's bound either.
//
// It runs with `make faults` (MRM_FAULTS=1), which CI runs after `make
// test`; without MRM_FAULTS it skips, being minutes long. It needs the
// PostgreSQL server binaries, Patroni and etcd (see internal/pgtest).
package faults
