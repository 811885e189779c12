package bank

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mrmarket/mrmarket/internal/signing"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// Registry errors.
var (
	// ErrOlderRecord refuses a principal record sealed before the one the
	// bank holds for the key: the newest record wins, and an old one
	// replayed (a demoted principal's former record) changes nothing.
	ErrOlderRecord = fmt.Errorf("%w: principal record older than the registered one", wire.ErrConflict)
	// ErrNameTaken refuses a second live key for a principal: the admin
	// rotates its key (RotatePrincipal) or revokes the old one first.
	ErrNameTaken = fmt.Errorf("%w: the principal has another live key", wire.ErrConflict)
	// ErrUnknownPrincipal is a key the registry does not hold.
	ErrUnknownPrincipal = fmt.Errorf("%w: no such principal key", wire.ErrNotFound)
	// ErrLastAdmin refuses revoking the last live admin key.
	ErrLastAdmin = fmt.Errorf("%w: the last admin key is not revoked", wire.ErrConflict)
)

// principalCacheTTL is how long the bank believes a live key it read
// without reading it again: a key another replica revoked is refused here
// within it even if the revocation notice never came (Serve listens for
// them). A revoked key is remembered as revoked: revocation is final.
const principalCacheTTL = 10 * time.Second

// cachedPrincipal is a key as the bank read it, and when (wall clock).
type cachedPrincipal struct {
	p       wire.Principal
	revoked bool
	at      time.Time
}

// AddPrincipal registers (or changes) an identity. A bank that knows its
// admin key (Options.AdminKey) takes only a registration carrying the
// admin's record of exactly it (signing.CheckPrincipalRequest), sealed no
// earlier than the record it holds; the admin key registers itself as
// admin without one. The record is kept and given out by Whois. A revoked
// key is never registered again (signing.ErrRevoked), and a principal has one
// live key: a new key for a name and role that have another is refused
// (ErrNameTaken) — the admin rotates the key instead.
func (b *Bank) AddPrincipal(ctx context.Context, req *wire.PrincipalRequest) (wire.Principal, error) {
	if err := req.Validate(); err != nil {
		return wire.Principal{}, err
	}
	if b.adminKey != "" {
		if err := signing.CheckPrincipalRequest(req, b.adminKey); err != nil {
			return wire.Principal{}, err
		}
	}
	cert, certTime, err := certColumn(req.Cert)
	if err != nil {
		return wire.Principal{}, err
	}
	p := wire.Principal{Key: req.Key, Name: req.Name, Role: req.Role, Cert: req.Cert}
	err = b.audited(ctx, func() any { return p }, func(t tx) error {
		held, err := readPrincipal(ctx, t, req.Key)
		switch {
		case errors.Is(err, ErrUnknownPrincipal) || err == nil && (held.name != req.Name || held.role != req.Role):
			// A new key of (role, name), or a key becoming another
			// principal: the one live key of its name (a key registered
			// as it already keeps its place, whatever older stores hold).
			if err := nameFree(ctx, t, req.Role, req.Name, req.Key); err != nil {
				return err
			}
		}
		switch {
		case errors.Is(err, ErrUnknownPrincipal):
		case err != nil:
			return err
		case held.revoked != 0:
			return fmt.Errorf("%w: %s (%s %s) was revoked, and a revoked key is never registered again: give the principal a new key",
				signing.ErrRevoked, req.Key, held.role, held.name)
		case req.Cert == nil:
			// The anchor (or a bank without an admin key): keep the record held.
			cert, certTime = held.cert, held.certTime
			p.Cert = decodeCert(held.cert)
		case certTime < held.certTime:
			return fmt.Errorf("%w (%s: sealed %s, registered %s)", ErrOlderRecord, req.Key, stampNs(certTime), stampNs(held.certTime))
		}
		_, err = t.exec(ctx, `INSERT INTO principals (key, name, role, created, cert, cert_time) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (key) DO UPDATE SET name = excluded.name, role = excluded.role, cert = excluded.cert, cert_time = excluded.cert_time`,
			req.Key, req.Name, req.Role, b.now().UnixNano(), cert, certTime)
		return err
	})
	if err != nil {
		return wire.Principal{}, err
	}
	b.remember(p, false)
	if b.onPrincipal != nil {
		b.onPrincipal(p)
	}
	return p, nil
}

// certColumn is a record as stored: its JSON and when it was sealed (none:
// NULL and 0).
func certColumn(c *wire.Sealed) (sql.NullString, int64, error) {
	if c == nil {
		return sql.NullString{}, 0, nil
	}
	j, err := json.Marshal(c)
	if err != nil {
		return sql.NullString{}, 0, wire.Errorf(wire.ErrBadRequest, "principal record: %v", err)
	}
	return sql.NullString{String: string(j), Valid: true}, c.Time, nil
}

func stampNs(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }

// principalRow is one key's row of the registry.
type principalRow struct {
	key, name, role string
	created         int64
	cert            sql.NullString
	certTime        int64
	revoked         int64
	replacedBy      string
}

const principalColumns = `key, name, role, created, cert, cert_time, revoked, replaced_by`

func scanPrincipal(row interface{ Scan(...any) error }) (principalRow, error) {
	var r principalRow
	err := row.Scan(&r.key, &r.name, &r.role, &r.created, &r.cert, &r.certTime, &r.revoked, &r.replacedBy)
	return r, err
}

// readPrincipal reads key's row; ErrUnknownPrincipal if there is none.
func readPrincipal(ctx context.Context, t tx, key string) (principalRow, error) {
	r, err := scanPrincipal(t.queryRow(ctx, `SELECT `+principalColumns+` FROM principals WHERE key = ?`, key))
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("%w %s", ErrUnknownPrincipal, key)
	}
	return r, err
}

// info is the row as listed.
func (r principalRow) info() wire.PrincipalInfo {
	i := wire.PrincipalInfo{Key: r.key, Name: r.name, Role: r.role, Registered: time.Unix(0, r.created).UTC(), ReplacedBy: r.replacedBy}
	if r.revoked != 0 {
		at := time.Unix(0, r.revoked).UTC()
		i.Revoked = &at
	}
	return i
}

// nameFree refuses a key for (role, name) while another key of theirs is
// live.
func nameFree(ctx context.Context, t tx, role, name, key string) error {
	var other string
	err := t.queryRow(ctx, `SELECT key FROM principals WHERE role = ? AND name = ? AND revoked = 0 AND key <> ? LIMIT 1`, role, name, key).Scan(&other)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return err
	}
	return fmt.Errorf("%w: %s %s has key %s; rotate it (mrmarket bank principal rotate) or revoke it first", ErrNameTaken, role, name, other)
}

// decodeCert is a stored record (nil if none or unreadable: whoever checks
// it then refuses the principal).
func decodeCert(s sql.NullString) *wire.Sealed {
	if !s.Valid || s.String == "" {
		return nil
	}
	var c wire.Sealed
	if json.Unmarshal([]byte(s.String), &c) != nil {
		return nil
	}
	return &c
}

// Whois finds the principal of a public key, with its record. The admin
// key (Options.AdminKey) is the admin even before it is registered. A
// revoked key is refused (signing.ErrRevoked): it is nobody, here and for
// whoever asks the bank.
func (b *Bank) Whois(ctx context.Context, key string) (wire.Principal, error) {
	if c, ok := b.cached(key); ok {
		return c.p, c.err()
	}
	var c cachedPrincipal
	err := b.st.run(ctx, func(t tx) error {
		r, err := readPrincipal(ctx, t, key)
		if errors.Is(err, ErrUnknownPrincipal) && key == b.adminKey && key != "" {
			c = cachedPrincipal{p: wire.Principal{Key: key, Name: "admin", Role: wire.RoleAdmin}}
			return nil
		}
		if errors.Is(err, ErrUnknownPrincipal) {
			return fmt.Errorf("%w %s", signing.ErrUnknownKey, key)
		}
		c = cachedPrincipal{p: wire.Principal{Key: r.key, Name: r.name, Role: r.role, Cert: decodeCert(r.cert)}, revoked: r.revoked != 0}
		return err
	})
	if err != nil {
		return wire.Principal{}, err
	}
	b.remember(c.p, c.revoked)
	return c.p, c.err()
}

// err is signing.ErrRevoked for a revoked key.
func (c cachedPrincipal) err() error {
	if c.revoked {
		return fmt.Errorf("%w (%s %s, key %s)", signing.ErrRevoked, c.p.Role, c.p.Name, c.p.Key)
	}
	return nil
}

// cached is key as last read, if it is revoked or was read within
// principalCacheTTL.
func (b *Bank) cached(key string) (cachedPrincipal, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.principals[key]
	if ok && !c.revoked && time.Since(c.at) >= principalCacheTTL {
		delete(b.principals, key)
		return c, false
	}
	return c, ok
}

// remember caches p as read now (revoked: for good).
func (b *Bank) remember(p wire.Principal, revoked bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.principals) >= maxCachedPrincipals {
		clear(b.principals) // a flood of distinct keys costs a re-read, not memory
	}
	b.principals[p.Key] = cachedPrincipal{p: p, revoked: revoked, at: time.Now()}
}

// forget drops key from the cache: another replica revoked it.
func (b *Bank) forget(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.principals, key)
}

// maxCachedPrincipals bounds the bank's cache of keys.
const maxCachedPrincipals = 65536

// storeNonces is the bank's nonce store for its Authorizer: a signed
// request's nonce is recorded in the store, and a second use is a replay.
// Nonces live in the store so a replay is refused across restarts and by
// every bank replica; Tick forgets those older than the signature window.
type storeNonces struct{ b *Bank }

// Use records c's nonce; signing.ErrReplay if it was recorded before.
func (n storeNonces) Use(ctx context.Context, c signing.Caller, _ time.Time) error {
	return n.b.st.run(ctx, func(t tx) error {
		res, err := t.exec(ctx, `INSERT INTO nonces (key, nonce, at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`, c.Key, c.Nonce, c.Time.UnixNano())
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err != nil {
				return err
			}
			return fmt.Errorf("%w (signed %s)", signing.ErrReplay, c.Time.UTC().Format(time.RFC3339Nano))
		}
		return nil
	})
}
