package bank

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // the PostgreSQL/CockroachDB driver
	_ "modernc.org/sqlite"             // the embedded store's driver

	"github.com/mrmarket/mrmarket/internal/retry"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// dialect is the SQL flavour of a store.
type dialect int

const (
	sqliteDialect dialect = iota
	postgresDialect
)

// store is the bank's SQL database: one code path for SQLite and
// PostgreSQL/CockroachDB. Statements are written with ? placeholders and
// rebound to $n for PostgreSQL.
type store struct {
	db      *sql.DB
	dialect dialect
	name    string       // for messages: "sqlite:/path" or the PostgreSQL host/db
	flavour atomic.Int32 // PostgreSQL or CockroachDB (see durableCommit)
}

// txRetry is how a transaction that lost a race (see retryable) is tried
// again: at most 50 times, each pause drawn anywhere below twice a backoff
// that doubles from 1 ms to 32 ms, so that racers do not collide again.
var txRetry = retry.Options{InitialBackoff: time.Millisecond, Multiplier: 2, MaxBackoff: 32 * time.Millisecond, Jitter: 1, MaxTries: 50}

// openStore opens target: "postgres://…" or "postgresql://…" (PostgreSQL or
// CockroachDB through pgx), "sqlite:PATH", or a bare SQLite path.
func openStore(target string) (*store, error) {
	switch {
	case strings.HasPrefix(target, "postgres://"), strings.HasPrefix(target, "postgresql://"):
		db, err := sql.Open("pgx", withConnectTimeout(withSessionSettings(target)))
		if err != nil {
			return nil, fmt.Errorf("bank: opening PostgreSQL: %w", err)
		}
		db.SetMaxOpenConns(16)
		db.SetMaxIdleConns(16)
		db.SetConnMaxIdleTime(time.Minute)
		return &store{db: db, dialect: postgresDialect, name: redact(target)}, nil
	default:
		path := strings.TrimPrefix(target, "sqlite:")
		if path == "" {
			return nil, errors.New("bank: empty SQLite path")
		}
		if err := privateFiles(path); err != nil {
			return nil, err
		}
		dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)" +
			"&_pragma=foreign_keys(1)&_pragma=synchronous(FULL)&_txlock=immediate"
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			return nil, fmt.Errorf("bank: opening %s: %w", path, err)
		}
		// One connection: every transaction is serialised in the process, and
		// SQLite's file lock serialises bank processes sharing the file.
		db.SetMaxOpenConns(1)
		return &store{db: db, dialect: sqliteDialect, name: "sqlite:" + path}, nil
	}
}

// storeFileMode is the mode of the SQLite store's files: the ledger and
// the principal registry are the bank's alone.
const storeFileMode os.FileMode = 0o600

// privateFiles makes the SQLite store at path private to its owner before
// SQLite opens it: the database file is created with storeFileMode (SQLite
// gives its -wal and -shm files the database file's mode), and a database,
// -wal or -shm file left with a looser mode (by a bank from before, or by
// hand) is tightened to it rather than refused — refusing would stop a bank
// on a restart for what it can repair itself. A file the bank may not chmod
// (another owner's) is refused.
func privateFiles(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, storeFileMode)
	if err != nil {
		return fmt.Errorf("bank: opening %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bank: opening %s: %w", path, err)
	}
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Stat(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("bank: store file %s: %w", name, err)
		}
		if st.Mode().Perm()&^storeFileMode != 0 {
			if err := os.Chmod(name, storeFileMode); err != nil {
				return fmt.Errorf("bank: store file %s is readable by others (mode %s) and could not be made private: %w", name, st.Mode().Perm(), err)
			}
		}
	}
	return nil
}

// withSessionSettings sets what every session of the bank asks of
// PostgreSQL, each unless the URL sets it:
//
//   - plan_cache_mode=force_custom_plan: plan every execution of a prepared
//     statement with its real parameters. By default PostgreSQL switches to a
//     generic plan after five executions, and a generic plan for "id IN ($1 …
//     $100)" scans whole tables, several times slower for a capture batch of
//     100 legs when captures listed their ids (docs/MEASUREMENTS.md), and
//     guesses an array's length for unnest. pgx still caches the parsed
//     statements.
//   - enable_seqscan=off: read rows through indexes whenever one serves.
//     Under SERIALIZABLE a sequential scan locks the whole table against
//     concurrent writers (PostgreSQL's manual, "Serializable Isolation
//     Level"), so two replicas' capture groups, or a capture and a spend's
//     hold, that touch different rows of a small table abort each other:
//     with two replicas a capture transaction began 2.2 times on average and
//     4 % of agents' batches missed their 1 s attempt; through indexes 1.2
//     times and none (BenchmarkCaptureReplicas, docs/MEASUREMENTS.md). A
//     query no index serves still scans.
//   - jit=off: no query compiled to machine code. A scan enable_seqscan
//     turns away is costed at ten billion, far past jit_above_cost, so
//     every query that must still scan (the ledger's over accounts, grants
//     and holds) was compiled first: 50–100 ms each, 150 ms of a ledger
//     read that runs in 2 ms, and the fault test's ledger reads took
//     1.3–8.6 s under its workload (BenchmarkLedger, docs/MEASUREMENTS.md).
//     The bank's transactions are short; compiling never pays for them.
func withSessionSettings(url string) string {
	for _, setting := range []string{"plan_cache_mode=force_custom_plan", "enable_seqscan=off", "jit=off"} {
		name, _, _ := strings.Cut(setting, "=")
		if strings.Contains(url, name+"=") {
			continue
		}
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		url += sep + setting
	}
	return url
}

// multiHostConnectTimeout bounds each host's connection attempt when the
// URL lists several hosts (see withConnectTimeout).
const multiHostConnectTimeout = "2"

// withConnectTimeout gives a URL that lists several hosts
// ("postgres://h1:5432,h2:5432/db?target_session_attrs=read-write": a
// primary and its standby) a per-host connect_timeout, unless it has one.
// pgx tries the hosts in order and bounds each with connect_timeout; without
// one, a first host that is gone without resetting connections (a dead
// machine, a partition) holds every new connection until the request's own
// deadline, and the promoted standby listed after it is never reached.
func withConnectTimeout(url string) string {
	if strings.Contains(url, "connect_timeout=") || !strings.Contains(urlHosts(url), ",") {
		return url
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "connect_timeout=" + multiHostConnectTimeout
}

// urlHosts is the host list of a connection URL: after the scheme and any
// user information, up to the path or query.
func urlHosts(url string) string {
	if i := strings.Index(url, "://"); i >= 0 {
		url = url[i+3:]
	}
	if i := strings.IndexAny(url, "/?"); i >= 0 {
		url = url[:i]
	}
	if i := strings.LastIndex(url, "@"); i >= 0 {
		url = url[i+1:]
	}
	return url
}

// redact drops a password from a connection URL.
func redact(url string) string {
	if at := strings.LastIndex(url, "@"); at > 0 {
		if scheme := strings.Index(url, "://"); scheme > 0 && scheme < at {
			return url[:scheme+3] + "…" + url[at:]
		}
	}
	return url
}

// rebind turns ? placeholders into $1, $2, … for PostgreSQL.
func (s *store) rebind(q string) string {
	if s.dialect != postgresDialect {
		return q
	}
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// dialectSQL is migration name's text for the store's dialect: an
// auto-numbered key is SQLite's INTEGER PRIMARY KEY AUTOINCREMENT and
// PostgreSQL's BIGSERIAL PRIMARY KEY, and a migration named *.postgres.sql
// (storage settings SQLite has no words for) is empty on SQLite.
func (s *store) dialectSQL(name, q string) string {
	if s.dialect != postgresDialect {
		if strings.HasSuffix(name, ".postgres.sql") {
			return ""
		}
		return q
	}
	return strings.ReplaceAll(q, "INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
}

// tx is a transaction with placeholder rebinding.
type tx struct {
	*sql.Tx
	s *store
}

func (t tx) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return t.ExecContext(ctx, t.s.rebind(q), args...)
}

func (t tx) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return t.QueryContext(ctx, t.s.rebind(q), args...)
}

func (t tx) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	return t.QueryRowContext(ctx, t.s.rebind(q), args...)
}

// inList returns "?, ?, …" for n values.
func inList(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

// eachRow runs a query and calls scan on each of its rows. The error that
// ended the rows early is Rows.Err: database/sql closes the rows itself
// when Next fails, so Close alone reports nothing, and a serialization
// failure raised mid-query would be lost — the transaction's next
// statement would then fail with 25P02 (current transaction is aborted),
// which is not retried.
func eachRow(ctx context.Context, t tx, scan func(*sql.Rows) error, q string, args ...any) error {
	rows, err := t.query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rows.Close()
}

// run runs fn in one SERIALIZABLE transaction, committed only if fn returns
// nil. A serialization failure or deadlock, whether raised by a statement or
// by COMMIT itself, retries the whole transaction from BEGIN: on PostgreSQL
// a failed transaction cannot be resumed, and a COMMIT error must never be
// mistaken for success (the crdb.ExecuteTx pitfall, docs/PLATFORM.md). fn must
// therefore have no effects outside the transaction.
func (s *store) run(ctx context.Context, fn func(tx) error) error {
	_, err := s.runTries(ctx, fn)
	return err
}

// runTries is run, and how many times the transaction began.
func (s *store) runTries(ctx context.Context, fn func(tx) error) (int, error) {
	var err error
	r := retry.Start(ctx, txRetry)
	for r.Next() {
		if err = s.runOnce(ctx, fn); err == nil || !retryable(err) {
			return r.Tries(), err
		}
	}
	if ctx.Err() != nil {
		return r.Tries(), fmt.Errorf("%w: bank store: %v (after %d attempts: %v)", errUnavailable, ctx.Err(), r.Tries(), err)
	}
	return r.Tries(), fmt.Errorf("%w: bank store: gave up after %d serialization failures: %v", errUnavailable, r.Tries(), err)
}

func (s *store) runOnce(ctx context.Context, fn func(tx) error) error {
	opts := &sql.TxOptions{}
	if s.dialect == postgresDialect {
		opts.Isolation = sql.LevelSerializable
	}
	t, err := s.db.BeginTx(ctx, opts)
	if err != nil {
		return storeErr("begin", err)
	}
	if err := fn(tx{t, s}); err != nil {
		_ = t.Rollback()
		// Only the bank's own refusals (wire errors) go to the caller as
		// they are. Not any error with an Is method: a lost connection
		// (ECONNRESET, EPIPE) arrives as a syscall.Errno, which has one, and
		// must be reported unavailable so that the client retries by id.
		var we *wire.Error
		if errors.As(err, &we) || retryable(err) {
			return err // a refusal for the caller, or a race to retry
		}
		return storeErr("transaction", err)
	}
	if s.dialect == postgresDialect {
		if err := s.durableCommit(ctx, t); err != nil {
			_ = t.Rollback()
			return storeErr("transaction", err)
		}
	}
	if err := t.Commit(); err != nil {
		return storeErr("commit", err)
	}
	return nil
}

// durableCommit makes the transaction write a little WAL on PostgreSQL (a
// transactional logical message, prefix "mrmarket", empty), so that its
// COMMIT, like a write's, is flushed and, with a synchronous standby, waits
// until the standby has it — even when the transaction only read.
//
// Why: when a COMMIT waiting for the standby is cancelled (pgx sends a
// CancelRequest when it drops a connection whose context ran out; so do
// statement_timeout and pg_cancel_backend), PostgreSQL keeps the
// transaction, committed on the primary alone, and shows it to everyone.
// The client saw an error and retries by id; the retry finds the transfer
// and answers it as done (Replayed) in a transaction that wrote nothing,
// which PostgreSQL commits without waiting for the standby. TestFailover,
// with the standby paused, saw such answers while nothing could reach the
// standby — acknowledged operations that die with the primary. Now the retry's COMMIT waits for the standby to reach
// its own commit record, which comes after the one it read, so the answer
// is given only once the standby has what it reports. (An xid alone is not
// enough: PostgreSQL skips the flush and the wait for a transaction that
// wrote no WAL.) Cost: one statement and a few bytes of WAL per
// transaction, and for a read the standby's acknowledgement. CockroachDB
// commits through consensus, has no such window and no such function: it
// is skipped there.
func (s *store) durableCommit(ctx context.Context, t *sql.Tx) error {
	switch s.flavour.Load() {
	case flavourCockroach:
		return nil
	case flavourUnknown:
		var v string
		if err := t.QueryRowContext(ctx, `SELECT version()`).Scan(&v); err != nil {
			return err
		}
		if strings.Contains(v, "CockroachDB") {
			s.flavour.Store(flavourCockroach)
			return nil
		}
		s.flavour.Store(flavourPostgres)
	}
	_, err := t.ExecContext(ctx, `SELECT pg_logical_emit_message(true, 'mrmarket', '')`)
	return err
}

// The server behind a postgres:// URL, learnt on the first transaction.
const (
	flavourUnknown int32 = iota
	flavourPostgres
	flavourCockroach
)

// storeErr marks a store failure as unavailable, keeping the driver error
// (and so its SQLSTATE) in the chain for retryable.
func storeErr(what string, err error) error {
	return fmt.Errorf("%w: bank store %s: %w", errUnavailable, what, err)
}

// retryable reports a serialization failure, a deadlock, or a unique
// violation: every insert is preceded by a read of the same key, so a unique
// violation means a concurrent transaction inserted it first, which under
// SERIALIZABLE PostgreSQL may report as 23505 rather than 40001.
func retryable(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "40001" || pg.Code == "40P01" || pg.Code == "23505"
	}
	return false
}

// A column of a parameter table (see store.table): its name and values.
type column struct {
	name   string
	bigint bool     // ints, else text
	text   []string // a text column's values
	ints   []int64  // a bigint column's values
}

func textCol(name string, v []string) column { return column{name: name, text: v} }
func intCol(name string, v []int64) column   { return column{name: name, bigint: true, ints: v} }

func (c column) value(r int) any {
	if c.bigint {
		return c.ints[r]
	}
	return c.text[r]
}

func (c column) len() int { return max(len(c.text), len(c.ints)) }

// table is a derived table of cols, for FROM (with an alias) or IN: one
// parameter per column on PostgreSQL (unnest of arrays), one JSON parameter
// on SQLite (json_each), so a statement over a thousand rows is parsed and
// planned as one over ten. A multi-row VALUES list instead takes a
// placeholder per value, is planned anew on every execution (custom
// plans, withSessionSettings) and has to be cut into chunks under the
// placeholder limits. The columns must have the same length.
func (s *store) table(cols ...column) (string, []any) {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.name
	}
	if s.dialect == postgresDialect {
		args := make([]any, len(cols))
		casts := make([]string, len(cols))
		for i, c := range cols {
			if c.bigint {
				args[i], casts[i] = c.ints, "?::bigint[]"
			} else {
				args[i], casts[i] = c.text, "?::text[]"
			}
		}
		return `SELECT * FROM unnest(` + strings.Join(casts, ", ") + `) AS p(` + strings.Join(names, ", ") + `)`, args
	}
	rows := make([][]any, cols[0].len())
	for r := range rows {
		rows[r] = make([]any, len(cols))
		for i, c := range cols {
			rows[r][i] = c.value(r)
		}
	}
	data, err := json.Marshal(rows)
	if err != nil {
		panic(err) // strings and int64s always marshal
	}
	sel := make([]string, len(cols))
	for i, name := range names {
		sel[i] = fmt.Sprintf("json_extract(value, '$[%d]') AS %s", i, name)
	}
	return `SELECT ` + strings.Join(sel, ", ") + ` FROM json_each(?)`, []any{string(data)}
}
