package bank

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mrmarket/mrmarket/internal/mandate"
	"github.com/mrmarket/mrmarket/internal/obs"
	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Sentinel errors of the bank. Each wraps the wire error of its reply code,
// so handlers and clients match them with errors.Is.
var (
	ErrUnknownAccount = fmt.Errorf("%w: unknown account", wire.ErrNotFound)
	ErrUnknownHold    = fmt.Errorf("%w: unknown hold", wire.ErrNotFound)
	ErrInsufficient   = fmt.Errorf("%w", wire.ErrInsufficient)
	ErrNotOwner       = fmt.Errorf("%w: not the owner", wire.ErrForbidden)
	ErrNotBeneficiary = fmt.Errorf("%w: host may not capture from this hold", wire.ErrForbidden)
	ErrIDReused       = fmt.Errorf("%w: id already used for a different request", wire.ErrConflict)
	ErrHoldClosed     = fmt.Errorf("%w: hold is closed", wire.ErrConflict)
	ErrHoldExpired    = fmt.Errorf("%w: hold has expired", wire.ErrExpired)
	ErrHoldExhausted  = fmt.Errorf("%w: capture beyond the hold", wire.ErrInsufficient)
	ErrPastExpiry     = fmt.Errorf("%w: hold expiry is not in the future", wire.ErrBadRequest)
	ErrOverflow       = fmt.Errorf("%w: amount would overflow the account", wire.ErrBadRequest)
	ErrUnknownUser    = fmt.Errorf("%w: no registered principal of role user has that name", wire.ErrNotFound)
)

var errUnavailable = wire.ErrUnavailable

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
	// Now is the ledger's clock (hold expiry, income periods); nil means the
	// wall clock.
	Now func() time.Time
	// SigningClock is what signing times are checked against (freshness,
	// nonce expiry); nil means the wall clock. It is apart from Now because
	// a signature's time is the signer's wall clock, whatever virtual clock
	// the ledger runs on (mrmarket demo).
	SigningClock func() time.Time
	// Metrics, when set, counts the bank's requests and errors.
	Metrics *obs.Metrics
	// Logger hears the requests Serve refuses, slow requests, audit events
	// waiting in the outbox (the stream not taking them) and failed ticks
	// (Run). nil: a discard logger.
	Logger *slog.Logger
	// OnPrincipal, when set, hears every principal added, changed or
	// revoked, after it is stored (the embedded NATS server reloads its
	// users with it: a revoked key's connections are closed).
	OnPrincipal func(wire.Principal)
	// AdminKey is the trust anchor (creds/admin.pub): when set, a principal
	// is registered only with the admin's record of it (AddPrincipal).
	AdminKey string
	// Signer is the bank's own key (role bank): when set, Serve signs every
	// reply with it, attaching the bank's principal record once registered,
	// so agents believe only the bank's capture results.
	Signer *signing.Signer
}

// Bank is the ledger on its store.
type Bank struct {
	st      *store
	now     func() time.Time
	metrics *obs.Metrics
	// captureTxs and captureTries count the capture transactions committed
	// or failed and how many times they began (serialization failures
	// begin one again).
	captureTxs, captureTries atomic.Int64
	logger                   *slog.Logger
	// signingClock checks signing times (Options.SigningClock); nil: wall clock.
	signingClock func() time.Time
	onPrincipal  func(wire.Principal)

	adminKey string                      // Options.AdminKey
	signer   *signing.Signer             // Options.Signer
	ownMiss  atomic.Int64                // when ownCert last found no record (Unix ns)
	ownLast  atomic.Pointer[wire.Sealed] // the record ownCert last found

	mu         sync.Mutex
	principals map[string]cachedPrincipal // cache by key (principals.go)
	// notify, set by Serve, announces a committed revocation on NATS.
	notify func(wire.RevokedNotice)

	// mandates caches the brokers' mandates read (mandate.go).
	mandates mandate.Cache

	// captures are the capture batches waiting for their group (group.go).
	captures captureQueue

	// outboxKick wakes the audit publisher when an event was committed
	// (outbox.go).
	outboxKick chan struct{}
}

// Open opens (creating and migrating) the ledger at target: a SQLite path
// ("sqlite:PATH" or a bare path) or a PostgreSQL/CockroachDB URL
// ("postgres://…").
func Open(target string, opts Options) (*Bank, error) {
	st, err := openStore(target)
	if err != nil {
		return nil, err
	}
	b := &Bank{st: st, now: opts.Now, metrics: opts.Metrics, signingClock: opts.SigningClock, principals: map[string]cachedPrincipal{},
		onPrincipal: opts.OnPrincipal, adminKey: opts.AdminKey, signer: opts.Signer, outboxKick: make(chan struct{}, 1)}
	if b.now == nil {
		b.now = time.Now
	}
	if b.logger = opts.Logger; b.logger == nil {
		b.logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.migrate(ctx); err != nil {
		st.db.Close()
		return nil, err
	}
	return b, nil
}

// migrate applies the embedded migrations not yet applied, in name order.
// Concurrent bank processes may race here: the migration table's primary
// key lets one win and the others see it applied.
func (b *Bank) migrate(ctx context.Context) error { return b.migrateTo(ctx, "") }

// migrateTo is migrate up to migration number last ("0002"; "" for all):
// what a bank of that schema left (tests of opening an older store).
func (b *Bank) migrateTo(ctx context.Context, last string) error {
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	if last == "" && b.migrated(ctx, names) {
		return nil // nothing to do, and nothing written: a reader's role may only read (the NATS nodes')
	}
	if _, err := b.st.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, at BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("bank: migrations table on %s: %w", b.st.name, err)
	}
	for _, name := range names {
		if number, _, _ := strings.Cut(path.Base(name), "_"); last != "" && number > last {
			break
		}
		err := b.st.run(ctx, func(t tx) error {
			var n int
			if err := t.queryRow(ctx, `SELECT count(*) FROM schema_migrations WHERE name = ?`, name).Scan(&n); err != nil || n > 0 {
				return err
			}
			body, err := migrations.ReadFile(name)
			if err != nil {
				return err
			}
			for _, stmt := range strings.Split(b.st.dialectSQL(name, stripComments(string(body))), ";") {
				if strings.TrimSpace(stmt) == "" {
					continue
				}
				if _, err := t.exec(ctx, stmt); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
			}
			now := b.now().UnixNano()
			if _, err := t.exec(ctx, `INSERT INTO accounts (id, kind, balance, created) VALUES (?, 'mint', 0, ?), (?, 'escrow', 0, ?) ON CONFLICT DO NOTHING`,
				MintAccount, now, EscrowAccount, now); err != nil {
				return err
			}
			_, err = t.exec(ctx, `INSERT INTO schema_migrations (name, at) VALUES (?, ?)`, name, now)
			return err
		})
		if err != nil {
			return fmt.Errorf("bank: migrating %s: %w", b.st.name, err)
		}
	}
	return nil
}

// migrated reports whether every migration in names is applied, as far as
// reading the migrations table tells (a store without one is not).
func (b *Bank) migrated(ctx context.Context, names []string) bool {
	rows, err := b.st.db.QueryContext(ctx, `SELECT name FROM schema_migrations`)
	if err != nil {
		return false
	}
	defer rows.Close()
	applied := map[string]bool{}
	for rows.Next() {
		var name string
		if rows.Scan(&name) != nil {
			return false
		}
		applied[name] = true
	}
	if rows.Err() != nil {
		return false
	}
	for _, name := range names {
		if !applied[name] {
			return false
		}
	}
	return true
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
func (b *Bank) Close() error { return b.st.db.Close() }

// Store names the store, without credentials.
func (b *Bank) Store() string { return b.st.name }

// Healthy reports whether the store answers.
func (b *Bank) Healthy() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var one int
	if err := b.st.db.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return fmt.Errorf("bank store %s: %w", b.st.name, err)
	}
	return nil
}

// IsUnavailable reports whether err means the store could not be reached.
func IsUnavailable(err error) bool { return errors.Is(err, errUnavailable) }
