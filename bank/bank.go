package bank

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the embedded store's driver

	"github.com/mrmarket/mrmarket/internal/obs"
)

// Sentinel errors of the bank. Each wraps the wire error of its reply code,
// so handlers and clients match them with errors.Is.
var (
	ErrUnknownAccount = fmt.Errorf("%w: unknown account", errNotFound)
	ErrUnknownHold    = fmt.Errorf("%w: unknown hold", errNotFound)
	ErrInsufficient   = fmt.Errorf("%w", errInsufficient)
	ErrNotOwner       = fmt.Errorf("%w: not the hold's owner", errForbidden)
	ErrIDReused       = fmt.Errorf("%w: id already used for a different request", errConflict)
	ErrHoldClosed     = fmt.Errorf("%w: hold is closed", errConflict)
	ErrHoldExpired    = fmt.Errorf("%w: hold has expired", errExpired)
	ErrPastExpiry     = fmt.Errorf("%w: hold expiry is not in the future", errBadRequest)
	ErrOverflow       = fmt.Errorf("%w: amount would overflow the account", errBadRequest)
)

// System account ids.
const (
	MintAccount   = "mint"
	EscrowAccount = "escrow"
)

// UserAccount is the account id of user.
func UserAccount(user string) string { return "user:" + user }

// ProviderAccount is the account id of host's provider.
func ProviderAccount(host string) string { return "provider:" + host }

//go:embed migrations/*.sql
var migrations embed.FS

// Options configures a bank.
type Options struct {
	// Now is the clock; nil means the wall clock.
	Now func() time.Time
	// Metrics, when set, counts the bank's requests and errors.
	Metrics *obs.Metrics
}

// Bank is the ledger on its store.
type Bank struct {
	db      *sql.DB
	now     func() time.Time
	metrics *obs.Metrics
}

// Open opens (creating and migrating) the SQLite ledger at path.
func Open(path string, opts Options) (*Bank, error) {
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)" +
		"&_pragma=foreign_keys(1)&_pragma=synchronous(FULL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("bank: opening %s: %w", path, err)
	}
	// One connection: every transaction is serialised, and SQLite never
	// reports a busy database to a caller.
	db.SetMaxOpenConns(1)
	b := &Bank{db: db, now: opts.Now, metrics: opts.Metrics}
	if b.now == nil {
		b.now = time.Now
	}
	if err := b.migrate(context.Background()); err != nil {
		db.Close()
		return nil, err
	}
	return b, nil
}

// migrate applies the embedded migrations not yet applied, in name order.
func (b *Bank) migrate(ctx context.Context) error {
	if _, err := b.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("bank: migrations table: %w", err)
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		err := b.tx(ctx, func(tx *sql.Tx) error {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE name = ?`, name).Scan(&n); err != nil || n > 0 {
				return err
			}
			body, err := migrations.ReadFile(name)
			if err != nil {
				return err
			}
			for _, stmt := range strings.Split(stripComments(string(body)), ";") {
				if strings.TrimSpace(stmt) == "" {
					continue
				}
				if _, err := tx.ExecContext(ctx, stmt); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO accounts (id, kind, balance) VALUES (?, 'mint', 0), (?, 'escrow', 0) ON CONFLICT DO NOTHING`, MintAccount, EscrowAccount); err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, `INSERT INTO schema_migrations (name, at) VALUES (?, ?)`, name, b.now().UnixNano())
			return err
		})
		if err != nil {
			return fmt.Errorf("bank: migrating: %w", err)
		}
	}
	return nil
}

func stripComments(s string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// Close closes the store.
func (b *Bank) Close() error { return b.db.Close() }

// Healthy reports whether the store answers.
func (b *Bank) Healthy() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var one int
	if err := b.db.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return fmt.Errorf("bank store: %w", err)
	}
	return nil
}

// tx runs fn in one transaction, committed only if fn returns nil.
func (b *Bank) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%w: bank store: %v", errUnavailable, err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%w: bank store commit: %v", errUnavailable, err)
	}
	return nil
}

// IsUnavailable reports whether err means the store could not be reached.
func IsUnavailable(err error) bool { return errors.Is(err, errUnavailable) }
